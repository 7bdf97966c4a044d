# syntax=docker/dockerfile:1
# Spark standalone master, worker and the merge-job driver, all from this one image:
# Python 3.11 + Java 17 + the project (which pins pyspark 4.1.1; SPARK_VERSION below must
# be that exact version, so that driver, master and workers run the same Spark).
# Build context is the repository root (compose: context "..").
# The Java parts (Spark's Kafka connector, Delta Lake, Iceberg, the catalogs' JDBC drivers) are
# java/pom.xml's `spark` module, resolved from Maven Central as `make jars` resolves them, at the
# versions pinned there: nothing is fetched when a container starts.

FROM maven:3.9.11-eclipse-temurin-17 AS jars
WORKDIR /build
COPY java ./java
RUN mvn -q -B -s java/settings.xml -f java/pom.xml -pl spark -am dependency:copy-dependencies -Djars.dir=/jars

FROM python:3.11-slim-bookworm

ARG SPARK_VERSION=4.1.1

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless procps \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY common ./common
COPY contract ./contract
COPY cdc ./cdc
COPY producer ./producer
COPY spark_jobs ./spark_jobs
COPY schemas ./schemas
# cryptography: PyMySQL needs it for MySQL 8.4's caching_sha2_password (MySQL sink).
# (cdc.pyspark_zip: Spark's Python processes import PySpark from site-packages, compiled
# once, instead of compiling it from pyspark.zip in every process)
# (gcc for the native Avro reader, contract/codecs/_avro_reader.c, removed again once it is built)
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev \
    && pip install . "pyspark==${SPARK_VERSION}" "cryptography>=42" \
    && (cd / && python -c "import contract.codecs._avro_reader") \
    && apt-get purge -y --auto-remove gcc libc6-dev && rm -rf /var/lib/apt/lists/* \
    && python -m compileall -q /usr/local/lib/python3.11/site-packages/pyspark \
    && python -m cdc.pyspark_zip \
    && rm -rf /src

# pip's pyspark is a complete Spark distribution (bin/spark-submit, bin/spark-class, jars/).
# CDC_JARS_DIR: where the project finds the `spark` module's jars (.jars/ in a checkout); the
# merge job's spark-submit passes them with --jars (docker/compose.yaml).
COPY --from=jars /jars/spark /opt/cdc/jars/spark
ENV SPARK_HOME=/usr/local/lib/python3.11/site-packages/pyspark \
    PYSPARK_PYTHON=python3 \
    PYSPARK_DRIVER_PYTHON=python3 \
    CDC_JARS_DIR=/opt/cdc/jars
ENV PATH="${SPARK_HOME}/bin:${PATH}"

# `spark-submit -m`: run a module of the installed project as the application's main.
COPY <<PYEOF /opt/cdc/run_module.py
"""spark-submit entry: ``spark-submit ... /opt/cdc/run_module.py MODULE [ARGS...]``."""
import runpy
import sys

if len(sys.argv) < 2:
    sys.exit("usage: run_module.py MODULE [ARGS...]")
module = sys.argv[1]
sys.argv = [module, *sys.argv[2:]]
runpy.run_module(module, run_name="__main__", alter_sys=True)
PYEOF

RUN useradd --create-home --uid 185 spark \
    && mkdir -p /data/checkpoints /data/lake /tmp/spark-work \
    && chown -R spark:spark /data/checkpoints /data/lake /tmp/spark-work
USER spark
WORKDIR /home/spark

CMD ["spark-class", "org.apache.spark.deploy.master.Master"]
