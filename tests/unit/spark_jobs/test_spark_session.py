"""The JVMs' options a session starts with (``session_conf``)."""

from __future__ import annotations

from spark_jobs.spark_session import CLIENT_COMPILER_ONLY, session_conf


def test_the_cdc_kafka_source_starts_the_jvms_with_the_client_compiler_only():
    conf = session_conf({"spark.cores.max": "2"})
    assert conf == {"spark.cores.max": "2", "spark.driver.extraJavaOptions": CLIENT_COMPILER_ONLY,
                    "spark.executor.extraJavaOptions": CLIENT_COMPILER_ONLY}
    assert CLIENT_COMPILER_ONLY == "-XX:TieredStopAtLevel=1"


def test_sparks_own_kafka_source_and_java_options_given_keep_theirs():
    assert session_conf({"spark.cores.max": "2"}, kafka_source="jvm") == {"spark.cores.max": "2"}
    given = {"spark.executor.extraJavaOptions": "-Xss4m"}
    assert session_conf(given) == given
    assert session_conf(None) == session_conf({})
