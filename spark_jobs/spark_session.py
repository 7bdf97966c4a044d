"""A SparkSession sized for this project's machines, with the cdc-kafka source registered."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Mapping

from pyspark.errors import PySparkRuntimeError
from pyspark.sql import SparkSession

from common.jars import module_jars
from common.processes import pid_alive
from spark_jobs.input.kafka_source import CdcKafkaDataSource

#: The JVMs' options when the records never pass through them (the ``cdc-kafka`` source):
#: the client compiler only.  C2 compiled for 5 s of CPU per job start, on code the merge
#: runs little of.  Measured over 1M events, two pairs each time (docs/merge-performance.md):
#: the JVM's CPU per event 3.4-3.9 us with the defaults against 2.0-2.2; the steady rate
#: +7% in one session, within the noise in the next (the table's turn bounds it).
#: With the client compiler alone the JVM reserves a 48 MB code cache (240 MB with C2), and the
#: lake sinks' Spark MERGEs fill it: 44 MB after 40-60 commits of Delta and Iceberg in one driver,
#: then "CodeCache is full. Compiler has been disabled" (seen in a chaos run) and everything new
#: runs interpreted.  Measured (60 commits of both lakes on the spark engine, one JVM each, back
#: to back, docs/lake.md "Speed"): the last ten commits took 12.9 s with 48 MB and 6.9 s with 240 MB
#: (the cache then held 76 MB).  The reservation is address space; the cache uses what it compiles.
CLIENT_COMPILER_ONLY = "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m"
_JAVA_OPTIONS = ("spark.driver.extraJavaOptions", "spark.executor.extraJavaOptions")

#: Spark's streaming checkpoint written through Hadoop's ``FileSystem`` API instead of its
#: ``FileContext`` API (Spark's default).  The project's checkpoints are local directories,
#: and without Hadoop's native library (PySpark ships none) the ``FileContext`` of the local
#: file system asks for a path's link status by running ``readlink`` in a child process:
#: about a dozen processes spawned per micro-batch for the offset and commit logs, 65-89 ms
#: of each batch in ``cdc bench merge`` (``walCommit`` and ``commitOffsets``, against 19-24
#: ms with ``FileSystem``, which spawns one ``chmod`` per file).  Its files are written to a
#: temporary name and renamed, atomic on a local file system as the logs need, with the
#: same checksum files.
CHECKPOINT_FILE_MANAGER = ("spark.sql.streaming.checkpointFileManagerClass",
                           "org.apache.spark.sql.execution.streaming.checkpointing.FileSystemBasedCheckpointFileManager")


def session_conf(conf: Mapping[str, str] | None = None, kafka_source: str = "python", *,
                 java_options_elsewhere: bool = False) -> dict[str, str]:
    """``conf`` with the JVMs' options of :data:`CLIENT_COMPILER_ONLY` added under the
    ``cdc-kafka`` source (``kafka_source="python"``), unless Java options are chosen
    elsewhere: in ``conf``, or (``java_options_elsewhere``, :func:`java_options_elsewhere`)
    by whoever started the JVM.  Spark's ``kafka`` source (``"jvm"``) reads and decodes in
    the JVM and keeps its defaults.  The lake sinks keep the client compiler too: their
    commits are many short Spark jobs whose generated code C2 would compile for little use
    (measured: a MERGE of 100 changes into Delta 4-8 s against 9-16 s with C2, into Iceberg
    0.7-1.4 s against 1.3-2.9 s, on a loaded machine; docs/lake.md, "Speed")."""
    out = dict(conf or {})
    if kafka_source == "python" and not java_options_elsewhere and not any(key in out for key in _JAVA_OPTIONS):
        out.update({key: CLIENT_COMPILER_ONLY for key in _JAVA_OPTIONS})
    return out


def _driver_class_path(conf: Mapping[str, str]) -> dict[str, str]:
    """The connectors' jars on the driver JVM's class path when this process starts it (and
    they are there): a session built later in the same process (the tests', ``cdc lake``
    after another command) can then turn the lake sinks on; the JVM's class path is fixed
    when it starts."""
    if "spark.driver.extraClassPath" in conf:
        return {}
    try:
        jars = module_jars("spark")
    except Exception:  # noqa: BLE001 - no `make jars` yet: only the lake sinks need them
        return {}
    return {"spark.driver.extraClassPath": os.pathsep.join(str(j) for j in jars)}


def java_options_elsewhere(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the JVMs' options are someone else's to choose: the JVM runs already
    (``spark-submit`` started this driver: ``PYSPARK_GATEWAY_PORT``), or ``PYSPARK_SUBMIT_ARGS``
    or ``spark-defaults.conf`` (``SPARK_CONF_DIR``, else ``SPARK_HOME/conf``) name them."""
    env = os.environ if environ is None else environ
    if env.get("PYSPARK_GATEWAY_PORT") or "extraJavaOptions" in env.get("PYSPARK_SUBMIT_ARGS", ""):
        return True
    conf_dir = env.get("SPARK_CONF_DIR") or (os.path.join(env["SPARK_HOME"], "conf") if env.get("SPARK_HOME") else "")
    defaults = os.path.join(conf_dir, "spark-defaults.conf") if conf_dir else ""
    try:
        with open(defaults, encoding="utf-8") as f:
            return any(line.split()[0] in _JAVA_OPTIONS for line in f if line.strip() and not line.startswith("#"))
    except OSError:
        return False


def scratch_dir(root: Path | None = None) -> Path:
    """Spark's scratch space for this process's local session (its JVM's ``SPARK_LOCAL_DIRS``):
    ``<temp>/cdc-spark-<uid>/<pid>``.  The driver copies the jars of ``spark.jars`` there
    (84 MB with the lake connectors) and keeps its block manager's files there; a JVM that ends
    cleanly removes them, a killed one leaves them (40 such copies, 3.4 GB, after one run of the
    suite).  So the directories of processes that no longer run are removed when this one is
    made."""
    base = (root or Path(tempfile.gettempdir())) / f"cdc-spark-{os.getuid()}"
    base.mkdir(mode=0o700, exist_ok=True)
    for other in base.iterdir():
        if other.name.isdigit() and int(other.name) != os.getpid() and not pid_alive(int(other.name)):
            shutil.rmtree(other, ignore_errors=True)
    mine = base / str(os.getpid())
    mine.mkdir(exist_ok=True)
    return mine


def connector_jars() -> str:
    """The jars of Spark's own Kafka source (and the lake connectors) for ``spark.jars``:
    ``.jars/spark``, which ``make jars`` resolves from Maven Central (java/spark/pom.xml) for
    this PySpark's Spark; nothing is fetched when the session starts."""
    return ",".join(str(j) for j in module_jars("spark"))


def build_session(master: str = "local[2]", app_name: str = "mysql-cdc", conf: Mapping[str, str] | None = None,
                  kafka_source: str = "python", ui_port: int | None = None) -> SparkSession:
    """Get or create a session: few shuffle partitions, no UI (``ui_port``: Spark's UI on that
    port, ``spark.ui_port``), ``cdc-kafka`` registered,
    checkpoints written as :data:`CHECKPOINT_FILE_MANAGER` says (unless ``conf`` names
    another manager), a local master's scratch space in :func:`scratch_dir` (unless ``conf``
    or ``SPARK_LOCAL_DIRS`` names one), the JVMs as :func:`session_conf` starts them (a session that runs
    already keeps its JVM).

    ``conf`` with SQL extensions (the lake sinks': ``spark_jobs.sinks.configured.lake_conf``)
    that a session of this process which runs already lacks: that session is stopped and
    built again (extensions are fixed when a session starts).

    Python workers need the project's interpreter (pyarrow, confluent-kafka): when
    ``PYSPARK_PYTHON`` is not set it is set to the running interpreter.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    wanted = set(filter(None, (conf or {}).get("spark.sql.extensions", "").split(",")))
    running = running_session() if wanted else None
    if wanted and running is not None and \
            not wanted <= set(filter(None, (running.conf.get("spark.sql.extensions", "") or "").split(","))):
        running.stop()
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.ui.enabled", "true" if ui_port else "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.session.timeZone", "UTC")
               .config(*CHECKPOINT_FILE_MANAGER))
    if ui_port:
        builder = builder.config("spark.ui.port", str(ui_port))
    # (given as the JVM's SPARK_LOCAL_DIRS, which Spark reads first: as spark.local.dir it logs a
    # warning at each start that a cluster manager's value would override it)
    scratch = str(scratch_dir()) if master.startswith("local") and "spark.local.dir" not in (conf or {}) \
        and not os.environ.get("SPARK_LOCAL_DIRS") else None
    if kafka_source == "jvm" and not (conf and "spark.jars" in conf):
        builder = builder.config("spark.jars", connector_jars())
    extra = _driver_class_path(conf or {})
    for key, value in {**extra, **session_conf(conf, kafka_source,
                                               java_options_elsewhere=java_options_elsewhere())}.items():
        builder = builder.config(key, value)
    if scratch is not None:
        os.environ["SPARK_LOCAL_DIRS"] = scratch  # (for the JVM a new session starts; not kept for later children)
    try:
        spark = builder.getOrCreate()
    finally:
        if scratch is not None:
            os.environ.pop("SPARK_LOCAL_DIRS", None)
    spark.sparkContext.setLogLevel(os.environ.get("CDC_SPARK_LOG_LEVEL", "ERROR"))
    spark.dataSource.register(CdcKafkaDataSource)
    return spark


def running_session() -> SparkSession | None:
    """This process's session, if one runs: the calling thread's active one, else the one the
    builder made (``SparkSession.getActiveSession()`` alone is the thread's: None in a thread
    other than the one that made the session)."""
    try:
        return SparkSession.active()
    except PySparkRuntimeError:
        return None


def stop_session() -> None:
    """Stop the running session, if any: its Python workers end with it, and with them the
    Kafka clients they keep between tasks (which would otherwise go on trying to reach a
    broker that stopped, and say so, until the process exits)."""
    spark = running_session()
    if spark is not None:
        spark.stop()
