"""A SparkSession sized for this project's machines, with the cdc-kafka source registered."""

from __future__ import annotations

import os
import sys
from typing import Mapping

from pyspark.sql import SparkSession

from spark_jobs.kafka_source import CdcKafkaDataSource

#: The JVMs' options when the records never pass through them (the ``cdc-kafka`` source):
#: the client compiler only.  C2 compiled for 5 s of CPU per job start, on code the merge
#: runs little of; measured over 1M events (two pairs), the JVM's CPU per event 3.7 and 3.9
#: us with the defaults against 2.0 and 2.2, the steady rate 95,642 and 104,143 events/s
#: against 104,588 and 109,804 (docs/merge-performance.md).
CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1"
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")


def session_conf(conf: Mapping[str, str] | None = None, kafka_source: str = "python") -> dict[str, str]:
    """``conf`` with the JVMs' options of :data:`CLIENT_COMPILER_ONLY` added under the
    ``cdc-kafka`` source (``kafka_source="python"``), where ``conf`` sets none of its own;
    Spark's ``kafka`` source (``"jvm"``) reads and decodes in the JVM and keeps its defaults."""
    out = dict(conf or {})
    if kafka_source == "python" and not any(key in out for key in _JAVA_OPTIONS):
        out.update({key: CLIENT_COMPILER_ONLY for key in _JAVA_OPTIONS})
    return out


def build_session(master: str = "local[2]", app_name: str = "mysql-cdc", conf: Mapping[str, str] | None = None,
                  kafka_source: str = "python") -> SparkSession:
    """Get or create a session: few shuffle partitions, no UI, ``cdc-kafka`` registered,
    the JVMs as :func:`session_conf` starts them (a session that runs already keeps its JVM).

    Python workers need the project's interpreter (pyarrow, confluent-kafka): when
    ``PYSPARK_PYTHON`` is not set it is set to the running interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in session_conf(conf, kafka_source).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("CDC_SPARK_LOG_LEVEL", "ERROR"))
    spark.dataSource.register(CdcKafkaDataSource)
    return spark


def stop_session() -> None:
    """Stop the running session, if any: its Python workers end with it, and with them the
    Kafka clients they keep between tasks (which would otherwise go on trying to reach a
    broker that stopped, and say so, until the process exits)."""
    spark = SparkSession.getActiveSession()
    if spark is not None:
        spark.stop()
