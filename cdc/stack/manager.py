"""``cdc stack up|down|status``: the embedded stack as one unit.

``up`` is idempotent: parts already running (by recorded pid and a live health check)
are left alone, dead ones are started again on the same port and data.  It writes
``stack.json`` (connection details, ports, pids) and ``cdc.yaml`` (a complete
configuration for this stack) into the state directory.  ``--replicas N`` adds MariaDB
replicas of the server (:mod:`cdc.stack.replication`), recorded under ``replicas``;
``--read-only`` gives the CDC user no write at all (``snapshot.read_only`` in cdc.yaml).  ``--sources 2``
adds a second source server (``mysql2``, recorded under ``sources``) and writes
``cdc-sources.yaml``, a configuration with both as ``sources`` (``east``: the first server,
``west``: the second; docs/sharding.md).  ``--monitoring`` gives the producers and the merge
job metrics ports in the configurations and runs a Prometheus that scrapes them
(:mod:`cdc.stack.prometheus_server`), recorded under ``monitoring``.  ``down`` stops only the
processes recorded there, checking each pid's command line first.

The embedded Kafka (:mod:`cdc.stack.kafka_broker`, ``--brokers 1|3``) keeps its topics in
``<state>/kafka``: stopped and started again, it has them all.  When that directory is lost
(deleted, or holding another cluster), what depended on its topics is still in the state
directory: the merge job's checkpoint and the producers' local offset copies.  ``up`` then
either resets them (``on_lost_kafka="recover"``: the checkpoint is deleted, and each producer
is asked to recover by snapshot on its next start, see :mod:`producer.offset_store`) or
refuses to start (``"refuse"``).
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cdc.errors import StackError
from cdc.stack.kafka_broker import EmbeddedKafka, external_broker
from cdc.stack.mysql_server import EmbeddedMySQL, server_status
from cdc.stack.postgres_server import EmbeddedPostgres, external_postgres
from cdc.stack.process import free_port, pid_alive
from cdc.stack.prometheus_server import EmbeddedPrometheus, prometheus_status
from cdc.stack.replication import replica_name, replica_status, start_replicas, stop_server
from cdc.stack.secure import SecureStack, secure_config
from common.config import CDCConfig, KafkaSecurityConfig, dump_config
from common.kafka.security import security_settings
from producer.offset_store import LocalOffsetCopy

DEFAULT_STATE_DIR = Path(".cdc/stack")
SINK_DATABASE = "cdc_sink"
#: The names of the stack's source servers in cdc-sources.yaml: the first server, then ``mysql2``.
SOURCE_NAMES = ("east", "west")
SOURCES_CONFIG = "cdc-sources.yaml"


@dataclass
class StackInfo:
    state_dir: Path
    data: dict[str, Any]
    notes: list[str] = field(default_factory=list)  # what ``up`` found and did, for the user

    @property
    def mysql(self) -> dict[str, Any]:
        return self.data["mysql"]

    @property
    def kafka(self) -> dict[str, Any]:
        return self.data["kafka"]

    @property
    def postgres(self) -> dict[str, Any]:
        return self.data["postgres"]

    @property
    def replicas(self) -> list[dict[str, Any]]:
        return self.data.get("replicas") or []

    @property
    def sources(self) -> list[dict[str, Any]]:
        """The source servers beyond the first (``--sources 2``: ``mysql2``)."""
        return self.data.get("sources") or []

    @property
    def config_path(self) -> Path:
        return self.state_dir / "cdc.yaml"

    @property
    def sources_config_path(self) -> Path | None:
        """``cdc-sources.yaml`` (every source server under ``sources``), when there are several."""
        return self.state_dir / SOURCES_CONFIG if self.sources else None


def _stack_file(state_dir: Path) -> Path:
    return state_dir / "stack.json"


def read_stack(state_dir: Path) -> dict[str, Any] | None:
    f = _stack_file(state_dir)
    if not f.exists():
        return None
    return json.loads(f.read_text())


def _write_private(path: Path, text: str) -> None:
    """Write a file that holds credentials: readable by its owner only."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def sqlalchemy_url(dsn: str) -> str:
    """A PostgreSQL DSN (a URL or libpq's ``key=value`` form) as the SQLAlchemy URL of
    psycopg 3 (the Iceberg sink's SQL catalog)."""
    from psycopg.conninfo import conninfo_to_dict
    from sqlalchemy.engine import URL
    d = conninfo_to_dict(dsn)
    port = d.get("port")
    return URL.create("postgresql+psycopg", username=d.get("user"), password=d.get("password"),
                      host=d.get("host"), port=int(port) if port else None, database=d.get("dbname"),
                      query={k: v for k, v in d.items()
                             if k in ("sslmode", "sslrootcert", "sslcert", "sslkey", "passfile")}
                      ).render_as_string(hide_password=False)


def stack_config(data: dict[str, Any], state_dir: Path) -> CDCConfig:
    """The complete configuration for a running stack."""
    m, k, p = data["mysql"], data["kafka"], data["postgres"]
    cfg = CDCConfig()
    cfg.state_dir = str(state_dir)
    cfg.source.host, cfg.source.port = m["host"], m["port"]
    cfg.source.user, cfg.source.password = m["cdc_user"], m["cdc_password"]
    cfg.source.signal_table = m["signal_table"]
    cfg.snapshot.read_only = bool(m.get("cdc_read_only"))
    cfg.kafka.bootstrap_servers = k["bootstrap_servers"]
    cfg.kafka.replication_factor = min(3, k.get("brokers") or 1)
    cfg.sinks.postgres.enabled = True
    cfg.sinks.postgres.dsn = p["dsn"]
    cfg.sinks.mysql.enabled = True
    cfg.sinks.mysql.host, cfg.sinks.mysql.port = m["host"], m["port"]
    cfg.sinks.mysql.user, cfg.sinks.mysql.password = m["admin_user"], m["admin_password"]
    cfg.sinks.mysql.database = SINK_DATABASE
    # The lake: Delta tables and an Iceberg warehouse in the state directory, the Iceberg
    # catalog in the stack's PostgreSQL (docs/lake.md).
    cfg.sinks.delta.path = str(state_dir / "lake" / "delta")
    cfg.sinks.delta.enabled = True
    cfg.sinks.iceberg.catalog_uri = sqlalchemy_url(p["dsn"])
    cfg.sinks.iceberg.warehouse = str(state_dir / "lake" / "iceberg")
    cfg.sinks.iceberg.enabled = True
    cfg.spark.checkpoint_dir = str(state_dir / "checkpoints")
    cfg.spark.ui_port = data.get("spark_ui_port")
    monitoring = data.get("monitoring")
    if monitoring:  # (the n-th source's producer of cdc-sources.yaml: the port plus n, CDCConfig.for_source)
        cfg.producer.metrics_port, cfg.spark.metrics_port = monitoring["producer_port"], monitoring["merge_port"]
    if data.get("secure"):
        secure_config(cfg, data)
    return cfg


def stack_sources_config(data: dict[str, Any], state_dir: Path) -> CDCConfig | None:
    """The configuration of a stack with several source servers: ``sources`` named
    :data:`SOURCE_NAMES` (the first server, then the others), the rest as in
    :func:`stack_config`; None with one server."""
    if not data.get("sources"):
        return None
    cfg = stack_config(data, state_dir)
    entries = [{"name": name, **cfg.source.model_dump(), "host": m["host"], "port": m["port"], "user": m["cdc_user"],
                "password": m["cdc_password"], "signal_table": m["signal_table"]}
               for name, m in zip(SOURCE_NAMES, [data["mysql"], *data["sources"]])]
    return CDCConfig.model_validate({**cfg.model_dump(exclude={"source"}), "sources": entries})


def start_sources(state_dir: Path, first: dict[str, Any], count: int, *,
                  previous: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Start (or find running) the source servers beyond ``first``, for ``count`` in all
    (``mysql2``, ...: servers of their own, not replicas, with ``first``'s users, passwords,
    signal table and CDC grants); recorded ones beyond ``count`` are stopped (their data is
    kept, and found again by a later ``--sources``).  Returns their records for stack.json."""
    if not 1 <= count <= len(SOURCE_NAMES):
        raise StackError(f"the number of source servers must be between 1 and {len(SOURCE_NAMES)}, not {count}")
    previous = list(previous or [])
    for old in previous[count - 1:]:
        stop_server(old)
    started: list[dict[str, Any]] = []
    try:
        for index in range(2, count + 1):
            server = EmbeddedMySQL(state_dir, first["signal_table"], name=f"mysql{index}", server_id=10 + index,
                                   cdc_read_only=first["cdc_read_only"], tls=dict(first.get("tls") or {}),
                                   flavor=first.get("flavor"))
            seed = previous[index - 2] if index - 2 < len(previous) else {
                "admin_password": first["admin_password"], "cdc_password": first["cdc_password"],
                "cdc_read_only": first["cdc_read_only"]}
            started.append(server.start(seed).to_json())
    except BaseException:
        for info in started:
            stop_server(info)
        raise
    return started


def start_monitoring(state_dir: Path, previous: dict[str, Any] | None, sources: int) -> dict[str, Any]:
    """The metrics ports of the stack's producers (one per source server, from
    ``producer_port`` on) and merge job, kept from ``previous``, and a Prometheus scraping
    them; their record for stack.json."""
    previous = previous or {}
    producer_port = previous.get("producer_port") or free_port()
    merge_port = previous.get("merge_port") or free_port()
    while merge_port in range(producer_port, producer_port + len(SOURCE_NAMES)):
        merge_port = free_port()
    targets = {"cdc-producer": [(f"127.0.0.1:{producer_port + i}", {}) for i in range(sources)],
               "cdc-merge": [(f"127.0.0.1:{merge_port}", {})]}
    prometheus = EmbeddedPrometheus(state_dir).start(targets, previous.get("prometheus"))
    return {"producer_port": producer_port, "merge_port": merge_port, "prometheus": prometheus}


def _checkpoint_dir(state_dir: Path) -> Path:
    return state_dir / "checkpoints"  # spark.checkpoint_dir of the stack's cdc.yaml


def _offset_copies(state_dir: Path) -> list[Path]:
    d = state_dir / "offsets"  # producer offset copies (state_dir of the stack's cdc.yaml)
    return sorted(d.glob("*.json")) if d.is_dir() else []


def lost_kafka_dependents(state_dir: Path) -> list[str]:
    """What in the state directory depended on the embedded broker's topics."""
    found = [f"producer '{p.stem}' position ({p})" for p in _offset_copies(state_dir)]
    ck = _checkpoint_dir(state_dir)
    if ck.is_dir() and any(ck.iterdir()):
        found.append(f"merge job checkpoint ({ck})")
    return found


def _running_merge_job(state_dir: Path) -> int | None:
    """The pid of a merge job of this state directory that is still running, if any (its
    status file: ``merge-status.json``, or ``merge-status-<source>.json`` with ``sources``)."""
    for path in sorted(state_dir.glob("merge-status*.json")):
        try:
            pid = json.loads(path.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if pid and pid != os.getpid() and pid_alive(pid):
            return pid
    return None


def _reset_for_lost_kafka(state_dir: Path) -> list[str]:
    """Reset what depended on the lost topics; returns what was done."""
    done = []
    ck = _checkpoint_dir(state_dir)
    if ck.is_dir() and any(ck.iterdir()):
        running = _running_merge_job(state_dir)
        if running is not None:
            done.append(f"a merge job (pid {running}) is still running on {ck}: it stops on the lost topics; "
                        f"stop it, delete {ck} and start it again")
        else:
            shutil.rmtree(ck)
            done.append(f"deleted the merge job checkpoint {ck}: the next 'cdc merge' reads the new topics from the "
                        "start")
    for path in _offset_copies(state_dir):
        if LocalOffsetCopy(state_dir, path.stem).request_recovery(
                "snapshot", "the embedded broker came back empty (cdc stack up)"):
            done.append(f"producer '{path.stem}': the next 'cdc produce' re-publishes from its last position and "
                        "snapshots every captured table again (delete-missing)")
    return done


def stack_up(state_dir: Path = DEFAULT_STATE_DIR, *, kafka_bootstrap: str | None = None,
             postgres_dsn: str | None = None, signal_table: str = "cdc_control.cdc_signal",
             on_lost_kafka: str = "recover", replicas: int | None = None,
             read_only: bool | None = None, sources: int | None = None,
             server_args: tuple[str, ...] = (), monitoring: bool | None = None,
             spark_ui: bool | None = None, secure: bool | None = None, brokers: int | None = None,
             flavor: str | None = None) -> StackInfo:
    """Start the stack; ``on_lost_kafka`` (``recover`` | ``refuse``): what to do when the
    embedded broker must be started again (its topics are gone) and the state directory
    holds what depended on them.  ``replicas``: how many MariaDB replicas of the server to
    run (0..2; None: as many as recorded, none for a new stack).  ``read_only``: the CDC
    user gets only REPLICATION SLAVE, REPLICATION CLIENT and SELECT, and cdc.yaml says
    ``snapshot.read_only: true`` (None: as recorded, writable for a new stack).  ``sources``:
    how many source servers (1..2; None: as recorded, one for a new stack); with two,
    ``cdc-sources.yaml`` configures both as ``sources``.  ``server_args``: more options for
    the source server when it starts here (``--version=5.7.44-MariaDB-log`` for the
    benchmarks' Debezium runs); a server already running keeps its own.  ``monitoring``:
    metrics ports for the producers and the merge job in the configurations, and a Prometheus
    scraping them (None: as recorded, none for a new stack).  ``spark_ui``: Spark's web UI
    of the merge job on a port of its own (``spark.ui_port`` in the configurations; None: as
    recorded, off for a new stack).  ``secure``: TLS and
    passwords on every connection (:mod:`cdc.stack.secure`; None: as recorded, plain for a new
    stack).  ``brokers``: the embedded Kafka's nodes, 1 or 3 (None: as recorded, one for a new
    stack; with 3 the configurations create topics with replication factor 3).  ``flavor``: the
    source server, ``mariadb`` (the machine's) or ``mysql`` (MySQL from the root ``make
    mysql-server`` builds, :mod:`cdc.stack.mysql_root`); None: as recorded, the machine's
    server for a new stack.  A stack keeps its flavor: another one needs another state directory."""
    if on_lost_kafka not in ("recover", "refuse"):
        raise StackError(f"on_lost_kafka must be 'recover' or 'refuse', not {on_lost_kafka!r}")
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    previous = read_stack(state_dir) or {}
    lost = _LostKafka.find(state_dir, previous, kafka_bootstrap, brokers)
    if lost.dependents and on_lost_kafka == "refuse":
        lost.refuse()
    secure = bool(previous.get("secure")) if secure is None else secure
    guarded = _secure_stack(state_dir, previous, secure, replicas, kafka_bootstrap)
    data: dict[str, Any] = {"state_dir": str(state_dir)}
    try:
        n_sources = _start_servers(state_dir, previous, data, guarded, signal_table=signal_table,
                                   read_only=read_only, server_args=server_args, flavor=flavor,
                                   replicas=replicas, sources=sources)
        if kafka_bootstrap:
            data["kafka"] = external_broker(kafka_bootstrap)
        else:
            data["kafka"] = _start_embedded_kafka(state_dir, previous, brokers, lost.resized, guarded)
        if postgres_dsn:
            data["postgres"] = external_postgres(postgres_dsn)
        else:
            pg = EmbeddedPostgres(state_dir)
            prev_p = previous.get("postgres") if (previous.get("postgres") or {}).get("embedded") else None
            data["postgres"] = pg.start(prev_p, tls=guarded.postgres_tls() if guarded else None)
        if spark_ui or (spark_ui is None and previous.get("spark_ui_port")):
            data["spark_ui_port"] = previous.get("spark_ui_port") or free_port()
        _start_or_stop_monitoring(state_dir, previous, data, monitoring, n_sources)
    except BaseException:
        # Record what is running so 'down' can stop it, then report.
        partial = {**previous, **data}
        _write_private(_stack_file(state_dir), json.dumps(partial, indent=2))
        raise
    _write_stack_files(state_dir, data)
    return StackInfo(state_dir, data, lost.recover(brokers))


@dataclass
class _LostKafka:
    """Whether ``up`` finds the embedded broker's topics gone (its data directory lost, or
    another number of nodes: another cluster), and what in the state directory depended on them."""
    lost: bool
    resized: bool
    dependents: list[str]
    state_dir: Path
    cluster_id: Any

    @classmethod
    def find(cls, state_dir: Path, previous: dict[str, Any], kafka_bootstrap: str | None,
             brokers: int | None) -> _LostKafka:
        prev_kafka = previous.get("kafka") or {}
        # (another number of nodes is another cluster: the old one's topics are left behind)
        resized = bool(brokers) and bool(prev_kafka.get("nodes")) and brokers != len(prev_kafka["nodes"])
        lost = not kafka_bootstrap and bool(prev_kafka.get("embedded")) and (
            EmbeddedKafka.data_lost(prev_kafka) or resized)
        dependents = lost_kafka_dependents(state_dir) if lost else []
        return cls(lost, resized, dependents, state_dir, prev_kafka.get("cluster_id"))

    def refuse(self) -> None:
        raise StackError(
            f"the embedded Kafka of this stack lost its data ({self.state_dir / 'kafka'} no longer holds cluster "
            f"{self.cluster_id}): started again it is empty. These depended on its topics:\n  - " +
            "\n  - ".join(self.dependents) +
            "\nRun 'cdc stack up --on-lost-kafka recover' to start it anyway, delete the merge checkpoint and have "
            "each producer re-publish and snapshot its tables again on its next start; or move the state directory "
            "away to start from nothing.")

    def recover(self, brokers: int | None) -> list[str]:
        """The notes for the user on a lost broker, after resetting what depended on its topics."""
        if not self.lost:
            return []
        notes = [f"the embedded Kafka now runs {brokers} node(s), a new cluster: every topic of the earlier run "
                 "is gone" if self.resized else
                 f"the embedded Kafka's data directory ({self.state_dir / 'kafka'}) no longer held its cluster: it "
                 "was started anew, and every topic of the earlier run is gone"]
        if self.dependents:
            notes += _reset_for_lost_kafka(self.state_dir)
        return notes


def _start_servers(state_dir: Path, previous: dict[str, Any], data: dict[str, Any], guarded: SecureStack | None,
                   *, signal_table: str, read_only: bool | None, server_args: tuple[str, ...], flavor: str | None,
                   replicas: int | None, sources: int | None) -> int:
    """Start the source server, its replicas and the second source server, recording each in
    ``data`` as it comes up; returns how many source servers the stack has."""
    mysql = EmbeddedMySQL(state_dir, signal_table, cdc_read_only=read_only, server_args=server_args,
                          tls=guarded.mysql_tls() if guarded else {}, flavor=flavor)
    data["mysql"] = mysql.start(previous.get("mysql")).to_json()
    if guarded:
        data["secure"] = guarded.record(data["mysql"])
    count = len(previous.get("replicas") or []) if replicas is None else replicas
    data.update(start_replicas(state_dir, data["mysql"], count, previous=previous.get("replicas"),
                               replication=previous.get("replication")))
    n_sources = 1 + len(previous.get("sources") or []) if sources is None else sources
    extra = start_sources(state_dir, data["mysql"], n_sources, previous=previous.get("sources"))
    if extra:
        data["sources"] = extra
    return n_sources


def _start_embedded_kafka(state_dir: Path, previous: dict[str, Any], brokers: int | None, resized: bool,
                          guarded: SecureStack | None) -> dict[str, Any]:
    """Start the embedded Kafka (``brokers`` nodes, else as recorded, else one), with its
    users when the stack is secure; its record for stack.json."""
    prev_k = previous.get("kafka") if (previous.get("kafka") or {}).get("embedded") else None
    if resized and prev_k and EmbeddedKafka.running(prev_k):
        raise StackError(f"this stack's Kafka runs {len(prev_k['nodes'])} node(s): run 'cdc stack down' "
                         f"before 'cdc stack up --brokers {brokers}' (a new cluster: its topics start empty)")
    count = brokers or (prev_k or {}).get("brokers") or 1
    cluster = EmbeddedKafka(state_dir, count)
    kafka = cluster.start(prev_k, security=guarded.broker_security() if guarded else None)
    if guarded:
        prefix = CDCConfig().kafka.topic_prefix
        clean = [f"{prefix}.clean."] + [f"{prefix}_{name}.clean." for name in SOURCE_NAMES]
        kafka["users"] = guarded.kafka_users(kafka, prefix, clean)
        kafka["security"] = kafka["users"]["operator"]
    return kafka


def _start_or_stop_monitoring(state_dir: Path, previous: dict[str, Any], data: dict[str, Any],
                              monitoring: bool | None, n_sources: int) -> None:
    """Start the stack's Prometheus when monitored (None: as recorded), else stop a recorded one."""
    watched = bool(previous.get("monitoring")) if monitoring is None else monitoring
    if watched:
        data["monitoring"] = start_monitoring(state_dir, previous.get("monitoring"), n_sources)
    elif (previous.get("monitoring") or {}).get("prometheus"):
        EmbeddedPrometheus(state_dir).stop(previous["monitoring"]["prometheus"])


def _write_stack_files(state_dir: Path, data: dict[str, Any]) -> None:
    """stack.json, cdc.yaml, and cdc-sources.yaml with two source servers (else none)."""
    _write_private(_stack_file(state_dir), json.dumps(data, indent=2))
    _write_private(state_dir / "cdc.yaml", dump_config(stack_config(data, state_dir)))
    several = stack_sources_config(data, state_dir)
    if several is not None:
        _write_private(state_dir / SOURCES_CONFIG, dump_config(several))
    else:
        (state_dir / SOURCES_CONFIG).unlink(missing_ok=True)


def _secure_stack(state_dir: Path, previous: dict[str, Any], secure: bool, replicas: int | None,
                  kafka_bootstrap: str | None) -> SecureStack | None:
    """The secure stack's certificates and secrets when ``secure`` (None: plain); refuses what
    it cannot do, and a switch that would lose the running broker's topics."""
    prev_kafka = previous.get("kafka") or {}
    was = bool(previous.get("secure"))
    if was != secure and prev_kafka.get("embedded") and EmbeddedKafka.running(prev_kafka):
        raise StackError(f"this stack runs {'with' if was else 'without'} --secure and its Kafka is up: run "
                         f"'cdc stack down' first (then 'cdc stack up {'' if was else '--secure'}')")
    if not secure:
        return None
    if kafka_bootstrap:
        raise StackError("--secure runs the embedded Kafka with TLS and SASL: it cannot be combined with "
                         "--kafka-bootstrap (give the external Kafka's settings in kafka.security)")
    if replicas or (replicas is None and previous.get("replicas")):
        raise StackError("--secure with replicas is not supported yet: replication between the stack's servers "
                         "would need TLS too (MASTER_SSL)")
    return SecureStack(state_dir)


def record_kafka(state_dir: Path, kafka: dict[str, Any]) -> None:
    """Write the embedded Kafka's record ``kafka`` (a node started again: its new pid) into
    stack.json, so that ``cdc stack down`` stops what runs."""
    state_dir = state_dir.resolve()
    data = read_stack(state_dir) or {}
    data["kafka"] = kafka
    _write_private(_stack_file(state_dir), json.dumps(data, indent=2))


def grant_topic_prefix(state_dir: Path, prefix: str) -> None:
    """On a secure stack: the ACLs of its producer, merge job and operator users on the topics
    under ``prefix`` (a configuration's ``kafka.topic_prefix`` other than the stack's own, such
    as the demo's per run).  Nothing to do on a plain stack."""
    state_dir = state_dir.resolve()
    data = read_stack(state_dir) or {}
    if data.get("secure") and (data.get("kafka") or {}).get("embedded"):
        SecureStack(state_dir).grant_topic_prefix(data["kafka"], prefix)


def stack_down(state_dir: Path = DEFAULT_STATE_DIR) -> list[str]:
    """Stop the processes this state dir's stack started; return what was stopped."""
    state_dir = state_dir.resolve()
    data = read_stack(state_dir)
    if data is None:
        return []
    stopped = []
    prometheus = (data.get("monitoring") or {}).get("prometheus")
    if prometheus and EmbeddedPrometheus(state_dir).stop(prometheus):
        stopped.append("prometheus")
    if (data.get("postgres") or {}).get("embedded") and EmbeddedPostgres(state_dir).stop(data["postgres"]):
        stopped.append("postgres")
    if (data.get("kafka") or {}).get("embedded") and EmbeddedKafka(state_dir, data["kafka"].get("brokers") or 1).stop(
            data["kafka"]):
        stopped.append("kafka")
    for index, replica in enumerate(data.get("replicas") or [], start=1):
        if stop_server(replica):
            stopped.append(replica_name(index))
    for index, server in enumerate(data.get("sources") or [], start=2):
        if stop_server(server):
            stopped.append(f"mysql{index}")
    if data.get("mysql") and EmbeddedMySQL(state_dir).stop(data["mysql"]):
        stopped.append("mysql")
    return stopped


def stack_status(state_dir: Path = DEFAULT_STATE_DIR) -> dict[str, tuple[bool, str]]:
    state_dir = state_dir.resolve()
    data = read_stack(state_dir)
    if data is None:
        raise StackError(f"no stack in {state_dir}: run 'cdc stack up --state-dir {state_dir}'")
    report: dict[str, tuple[bool, str]] = {}
    if "mysql" in data:
        report["mysql"] = server_status(data["mysql"])
    for index, replica in enumerate(data.get("replicas") or [], start=1):
        report[replica_name(index)] = replica_status(replica)
    for index, server in enumerate(data.get("sources") or [], start=2):
        report[f"mysql{index}"] = server_status(server)
    if "kafka" in data:
        report["kafka"] = _kafka_status(data["kafka"])
    if "postgres" in data:
        report["postgres"] = _postgres_status(data["postgres"])
    if (data.get("monitoring") or {}).get("prometheus"):
        report["prometheus"] = prometheus_status(data["monitoring"]["prometheus"])
    return report


def _kafka_status(info: dict) -> tuple[bool, str]:
    from confluent_kafka.admin import AdminClient
    down = [n for n in info.get("nodes") or [] if not pid_alive(n.get("pid"))]
    if info.get("embedded") and len(down) == len(info.get("nodes") or []):
        return False, "embedded Kafka is not running"
    security = security_settings(KafkaSecurityConfig.model_validate(info.get("security") or {}))
    try:
        md = AdminClient({"bootstrap.servers": info["bootstrap_servers"], **security}).list_topics(timeout=5)
    except Exception as exc:  # KafkaException
        return False, f"unreachable at {info['bootstrap_servers']}: {exc}"
    kind = "embedded Apache Kafka" if info.get("embedded") else "external Kafka"
    if security:
        kind += f" ({security['security.protocol']}, {security.get('sasl.mechanism', 'no SASL')})"
    where = f"{info['bootstrap_servers']}, {len(md.brokers)} broker(s) answering"
    if down:
        where += ", down: " + ", ".join(f"node {n['id']} (pid {n.get('pid')})" for n in down)
    return not down, f"{kind} at {where}, {len(md.topics)} topic(s)"


def _postgres_status(info: dict) -> tuple[bool, str]:
    import psycopg
    try:
        with psycopg.connect(info["dsn"], connect_timeout=3) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
    except psycopg.Error as exc:
        return False, f"unreachable: {exc}"
    where = f"port {info['port']}" if info.get("embedded") else "external"
    return True, f"PostgreSQL {version} ({where})"


def restart_mysql(state_dir: Path = DEFAULT_STATE_DIR, down_s: float = 0.0) -> dict[str, Any]:
    """Stop and start the embedded MySQL-compatible server on the same port and data
    (a source restart, for operations and tests); stack.json is updated."""
    import time
    state_dir = state_dir.resolve()
    data = read_stack(state_dir)
    if data is None or "mysql" not in data:
        raise StackError(f"no embedded server recorded in {state_dir}")
    mysql = EmbeddedMySQL(state_dir, data["mysql"]["signal_table"])
    mysql.stop(data["mysql"])
    time.sleep(down_s)
    data["mysql"] = mysql.start(data["mysql"]).to_json()
    _write_private(_stack_file(state_dir), json.dumps(data, indent=2))
    return data["mysql"]
