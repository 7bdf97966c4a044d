# syntax=docker/dockerfile:1
# The binlog producer: `cdc produce`, configured through CDC__<SECTION>__<KEY> variables.
# Build context is the repository root (compose: context "..");
# producer.Dockerfile.dockerignore keeps the context to the files below.
FROM python:3.11-slim-bookworm

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /src
COPY pyproject.toml README.md ./
COPY common ./common
COPY contract ./contract
COPY cdc ./cdc
COPY producer ./producer
COPY spark_jobs ./spark_jobs
COPY schemas ./schemas
# cryptography: MySQL 8.4 authenticates with caching_sha2_password, which PyMySQL can
# only complete over a plain TCP connection with RSA (the cryptography package).
RUN pip install . "cryptography>=42" \
    && rm -rf /src

RUN useradd --create-home --uid 10001 cdc \
    && mkdir -p /var/lib/cdc \
    && chown cdc:cdc /var/lib/cdc
USER cdc
WORKDIR /home/cdc

CMD ["cdc", "produce"]
