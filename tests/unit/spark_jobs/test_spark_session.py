"""The JVMs' options a session starts with (``session_conf``)."""

from __future__ import annotations

from spark_jobs.spark_session import CLIENT_COMPILER_ONLY, java_options_elsewhere, session_conf


def test_the_cdc_kafka_source_starts_the_jvms_with_the_client_compiler_only():
    conf = session_conf({"spark.cores.max": "2"})
    assert conf == {"spark.cores.max": "2", "spark.driver.extraJavaOptions": CLIENT_COMPILER_ONLY,
                    "spark.executor.extraJavaOptions": CLIENT_COMPILER_ONLY}
    assert CLIENT_COMPILER_ONLY == "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"


def test_sparks_own_kafka_source_and_java_options_given_keep_theirs():
    assert session_conf({"spark.cores.max": "2"}, kafka_source="jvm") == {"spark.cores.max": "2"}
    given = {"spark.executor.extraJavaOptions": "-Xss4m"}
    assert session_conf(given) == given
    assert session_conf(None) == session_conf({})


def test_java_options_chosen_by_whoever_started_the_jvm_are_kept(tmp_path):
    assert session_conf({}, java_options_elsewhere=True) == {}
    assert not java_options_elsewhere({})
    assert java_options_elsewhere({"PYSPARK_GATEWAY_PORT": "40000"})  # spark-submit started this driver
    assert java_options_elsewhere({"PYSPARK_SUBMIT_ARGS": "--conf spark.driver.extraJavaOptions=-Xss4m pyspark-shell"})
    assert not java_options_elsewhere({"PYSPARK_SUBMIT_ARGS": "--master local[2] pyspark-shell"})
    conf_dir = tmp_path / "conf"
    conf_dir.mkdir()
    (conf_dir / "spark-defaults.conf").write_text("# spark.executor.extraJavaOptions -Xss1m\nspark.cores.max 2\n")
    assert not java_options_elsewhere({"SPARK_CONF_DIR": str(conf_dir)})
    (conf_dir / "spark-defaults.conf").write_text("spark.cores.max 2\nspark.executor.extraJavaOptions  -Xss4m\n")
    assert java_options_elsewhere({"SPARK_CONF_DIR": str(conf_dir)})
    assert java_options_elsewhere({"SPARK_HOME": str(tmp_path)})
