#!/usr/bin/env bash
# Installs the servers the embedded stack runs, when the machine has none:
# a MySQL-compatible server (MariaDB from apt), PostgreSQL, and Prometheus with promtool
# (`cdc stack up --monitoring`, the alert rules' checks), librdkafka's header for the
# producer's compiled Kafka client, and percona-toolkit (pt-online-schema-change, for the tests).  Java 17 is needed by Spark.
# With --debezium (make debezium, for the tests): also Debian's MariaDB JDBC driver, which
# Debezium's MySQL connector needs to read a MariaDB server (docs/debezium-conformance.md).
set -euo pipefail

SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi
need=()

if ! command -v mariadbd >/dev/null 2>&1 && ! command -v mysqld >/dev/null 2>&1 \
   && [ ! -x /usr/sbin/mariadbd ] && [ ! -x /usr/sbin/mysqld ]; then
  need+=(mariadb-server mariadb-client)
fi
if ! command -v mariadb-install-db >/dev/null 2>&1 && ! command -v mysql_install_db >/dev/null 2>&1 \
   && [ -x /usr/sbin/mariadbd ]; then
  need+=(mariadb-server)
fi
if ! ls /usr/lib/postgresql/*/bin/postgres >/dev/null 2>&1 && ! command -v pg_ctl >/dev/null 2>&1; then
  need+=(postgresql)
fi
if ! command -v prometheus >/dev/null 2>&1 || ! command -v promtool >/dev/null 2>&1; then
  need+=(prometheus)
fi
if ! command -v mvn >/dev/null 2>&1; then
  need+=(maven)  # make jars: Apache Kafka and the Spark connectors from Maven Central (java/pom.xml)
fi
if [ ! -f /usr/include/librdkafka/rdkafka.h ]; then
  need+=(librdkafka-dev)  # the header the producer's own Kafka client is built against (producer/_native_producer.c)
fi
if ! command -v pt-online-schema-change >/dev/null 2>&1; then
  need+=(percona-toolkit)  # pt-online-schema-change, run by the online schema change tests
fi
if ! command -v setpriv >/dev/null 2>&1; then
  need+=(util-linux)
fi
if [ "${1:-}" = "--debezium" ] && [ ! -f /usr/share/java/mariadb-java-client.jar ]; then
  need+=(libmariadb-java)
fi

if [ ${#need[@]} -gt 0 ]; then
  echo "installing system packages: ${need[*]}"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}"
fi

if ! command -v java >/dev/null 2>&1; then
  echo "warning: no 'java' on PATH: Kafka and the Spark merge job need Java 17 (apt-get install openjdk-17-jdk-headless)" >&2
fi
