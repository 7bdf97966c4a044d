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


def test_the_scratch_dirs_of_processes_that_ended_are_removed_and_the_running_ones_kept(tmp_path):
    import os
    import subprocess
    import sys

    from spark_jobs.spark_session import scratch_dir
    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    ended_pid = int(ended.stdout)
    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        base = tmp_path / f"cdc-spark-{os.getuid()}"
        for pid in (ended_pid, running.pid):
            (base / str(pid) / "spark-x" / "userFiles-y").mkdir(parents=True)
            (base / str(pid) / "spark-x" / "userFiles-y" / "delta.jar").write_bytes(b"jar")
        (base / "notes").mkdir()  # not a process's: left alone
        mine = scratch_dir(tmp_path)
        assert mine == base / str(os.getpid()) and mine.is_dir()
        assert sorted(p.name for p in base.iterdir()) == sorted([str(os.getpid()), str(running.pid), "notes"])
        assert scratch_dir(tmp_path) == mine  # made again by the same process: kept
    finally:
        running.kill()
        running.wait()
