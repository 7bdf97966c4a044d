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
COPY pyproject.toml setup.py README.md ./
COPY common ./common
COPY contract ./contract
COPY cdc ./cdc
COPY producer ./producer
COPY spark_jobs ./spark_jobs
COPY schemas ./schemas
# cryptography: MySQL 8.4 authenticates with caching_sha2_password, which PyMySQL can
# only complete over a plain TCP connection with RSA (the cryptography package).
# gcc and librdkafka's header build the producer's C parts (setup.py: the binlog image and
# SELECT row encoders, its own Kafka client, the debezium-json transcoder); they are removed
# after (the Kafka client loads the librdkafka confluent-kafka's wheel ships).
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev librdkafka-dev \
    && pip install . "cryptography>=42" \
    && apt-get purge -y --auto-remove gcc libc6-dev librdkafka-dev && rm -rf /var/lib/apt/lists/* \
    && (cd / && python -c "import producer._native_producer, producer.events._binlog_images") \
    && rm -rf /src

RUN useradd --create-home --uid 10001 cdc \
    && mkdir -p /var/lib/cdc \
    && chown cdc:cdc /var/lib/cdc
USER cdc
WORKDIR /home/cdc

CMD ["cdc", "produce"]
