"""A SparkSession sized for this project's machines, with the cdc-kafka source registered."""

from __future__ import annotations

import os
import sys
from typing import Mapping

from pyspark.sql import SparkSession

from spark_jobs.kafka_source import CdcKafkaDataSource


def build_session(master: str = "local[2]", app_name: str = "mysql-cdc", conf: Mapping[str, str] | None = None
                  ) -> SparkSession:
    """Get or create a session: few shuffle partitions, no UI, ``cdc-kafka`` registered.

    Python workers need the project's interpreter (pyarrow, confluent-kafka): when
    ``PYSPARK_PYTHON`` is not set it is set to the running interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC"))
    for key, value in (conf or {}).items():
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
