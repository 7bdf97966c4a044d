"""Test harness: one real stack per session, unique names per test.

The stack is the embedded one (the machine's MariaDB/MySQL binary, Apache Kafka
from ``make jars``, a private PostgreSQL) started in a session state directory on free ports.
A test marked ``@pytest.mark.servers("mariadb", "mysql")`` runs once per source server: its
``source_stack`` (and ``config``, ``test_db``) is the session stack's MariaDB, or a MySQL 9.7
server (``mysql_stack``: MySQL from ``make mysql-server``, with the session stack's Kafka and
PostgreSQL, started when a test first asks for it).  Unmarked tests run on MariaDB.  With
``CDC_TEST_STACK=containers`` and a Docker engine present, testcontainers start
MySQL 8.4, Apache Kafka (KRaft) and PostgreSQL instead.  A stack that cannot start
fails the session with the reason: no test is skipped because a service is missing.
"""

from __future__ import annotations

import itertools
import re
import shutil
import signal
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from common.config import CDCConfig, dump_config
from tests.replication_helpers import Topology
from tests.stack_handle import StackHandle, start_source_stack, start_test_stack


def pytest_configure(config: pytest.Config) -> None:
    # A SIGTERM (CI timeout, `timeout`, Ctrl-C from a wrapper) runs the teardown like
    # Ctrl-C does, so the session stack is stopped instead of left running.
    def on_term(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    _enough_disk_for_the_suite(config)


#: Free space the whole suite needs in the temporary directory (its stacks, Kafka's logs, the
#: lake tables, Spark's scratch space): a run of 2026-11-29 took up to 6.9 GB at once (/tmp from
#: 4.0 to 10.9 GB, sampled every 30 s).  A CI run on a disk that filled up saw its Kafka nodes
#: stop and every later test fail after its timeouts, for 90 minutes.
SUITE_FREE_GB = 10


def _enough_disk_for_the_suite(config: pytest.Config) -> None:
    """The whole suite (``make test``: the ``tests`` directory itself) refuses to start on a disk
    with less than :data:`SUITE_FREE_GB` free, saying so (a part of it is left to try)."""
    if hasattr(config, "workerinput"):  # (the controller checks, once)
        return
    whole = Path(__file__).resolve().parent
    if not any(Path(arg.split("::")[0]).resolve() == whole for arg in config.args):
        return
    free = shutil.disk_usage(tempfile.gettempdir()).free / 2**30
    if free < SUITE_FREE_GB:
        raise pytest.UsageError(f"the suite needs {SUITE_FREE_GB} GB free in {tempfile.gettempdir()}, and "
                                f"{free:.1f} GB are: free some space first (old state directories, "
                                "/tmp/pytest-of-*), or run a part of the suite")


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    marker = metafunc.definition.get_closest_marker("servers")
    if marker is None:
        return
    unknown = set(marker.args) - set(SERVER_FLAVORS)
    if not marker.args or unknown:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: servers() takes flavors among {SERVER_FLAVORS}, "
                                f"not {marker.args}")
    if "server_flavor" not in metafunc.fixturenames:
        raise pytest.UsageError(f"{metafunc.definition.nodeid} is marked servers() but uses no source_stack, config "
                                "or test_db: it would run the same test twice")
    metafunc.parametrize("server_flavor", marker.args, indirect=True)


SERVER_FLAVORS = ("mariadb", "mysql")


@pytest.fixture
def server_flavor(request: pytest.FixtureRequest) -> str:
    """The source server of this test: ``mariadb``, or what its ``servers`` marker gives."""
    return getattr(request, "param", "mariadb")


@pytest.fixture(scope="session")
def mysql_stack(stack: StackHandle, tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackHandle]:
    """A MySQL 9.7 server (``cdc stack up --flavor mysql``) beside the session stack, sharing its
    Kafka and PostgreSQL; started when a test first asks for it, stopped with the session."""
    state_dir = tmp_path_factory.mktemp("mysql-stack")
    try:
        handle = start_source_stack(state_dir, stack, "mysql")
    except Exception as exc:  # fail loudly, never skip
        pytest.exit(f"the MySQL test server could not start: {exc}", returncode=3)
    _SESSION_STACKS.append(handle)
    try:
        yield handle
    finally:
        _SESSION_STACKS.remove(handle)
        handle.close()


@pytest.fixture
def source_stack(server_flavor: str, request: pytest.FixtureRequest) -> StackHandle:
    """The stack whose source server this test reads: the session stack (MariaDB), or
    ``mysql_stack`` for a test run on MySQL (``servers`` marker)."""
    return request.getfixturevalue("mysql_stack" if server_flavor == "mysql" else "stack")


@pytest.fixture(scope="session")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[StackHandle]:
    state_dir = tmp_path_factory.mktemp("cdc-stack")
    try:
        handle = start_test_stack(state_dir)
    except Exception as exc:  # fail loudly, never skip
        pytest.exit(f"the test stack could not start: {exc}", returncode=3)
    _SESSION_STACKS.append(handle)
    try:
        yield handle
    finally:
        _SESSION_STACKS.remove(handle)
        _let_kafka_clients_go()
        handle.close()


#: The session's stacks, while they run (``stack``, ``mysql_stack``).
_SESSION_STACKS: list[StackHandle] = []


@pytest.fixture(autouse=True)
def _session_stack_alive(request: pytest.FixtureRequest) -> Iterator[None]:
    """After each test: a server of the session's stacks whose process has ended fails that
    test with the server's log, and stops the run.  Every later test of the worker would
    otherwise fail on it one by one, each after its own timeouts: a CI run whose disk had
    filled went on failing so until its time ran out, and never said why."""
    yield
    dead = [line for handle in _SESSION_STACKS for line in handle.dead_servers()]
    if dead:
        message = "a server of the session's test stack died:\n" + "\n".join(dead)
        request.session.shouldfail = message.splitlines()[0] + " " + dead[0].split(";")[0]
        pytest.fail(message, pytrace=False)


def _let_kafka_clients_go() -> None:
    """Before the stack stops: the Spark session's Python workers (with the Kafka clients they
    keep between tasks) end, and the clients the tests left in reference cycles are collected,
    while the broker still answers; otherwise each would print "Connection refused" until the
    process exits."""
    import gc
    import sys

    if "pyspark" in sys.modules:
        from spark_jobs.spark_session import stop_session
        stop_session()
    gc.collect()


_counter = itertools.count()
_RUN = uuid.uuid4().hex[:6]


@pytest.fixture
def unique(request: pytest.FixtureRequest):
    """``unique("orders")`` -> a name no other test (or run) uses: ``orders_<run>_<n>``."""
    base = re.sub(r"[^a-z0-9]+", "_", request.node.name.lower())[:20].strip("_")

    def make(prefix: str = "") -> str:
        return f"{prefix or base}_{_RUN}_{next(_counter)}"
    return make


@pytest.fixture(autouse=True)
def _no_producer_left_running() -> Iterator[None]:
    """A ``cdc produce`` process a test started and left running (it failed before stopping
    it) is killed when the test ends."""
    yield
    from tests.producer_helpers import ProducerProcess
    ProducerProcess.kill_leftovers()


@pytest.fixture
def test_db(source_stack: StackHandle, unique) -> Iterator[str]:
    """A fresh database for one test on its source server, dropped afterwards."""
    name = unique("db")
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"CREATE DATABASE `{name}` CHARACTER SET utf8mb4")
    yield name
    with source_stack.admin() as conn, conn.cursor() as cur:
        cur.execute(f"DROP DATABASE IF EXISTS `{name}`")


@pytest.fixture
def topic(unique) -> str:
    return unique("topic")


@pytest.fixture
def config(source_stack: StackHandle, tmp_path: Path, unique) -> CDCConfig:
    """A configuration for the test's stack (``source_stack``) with a unique topic prefix and state dir."""
    cfg = source_stack.config()
    cfg.kafka.topic_prefix = unique("cdc")
    cfg.producer.name = cfg.kafka.topic_prefix
    cfg.state_dir = str(tmp_path / "state")
    cfg.spark.checkpoint_dir = str(tmp_path / "checkpoints")
    # The lake sinks only where a test asks for them (lake_config): they are its own place.
    cfg.sinks.delta.enabled = cfg.sinks.iceberg.enabled = False
    return cfg


@pytest.fixture
def merge_config(config: CDCConfig, unique, tmp_path: Path) -> CDCConfig:
    """``config`` for the Spark merge job: its own sink schema and database, ``local[2]``,
    a checkpoint per test, a short trigger interval."""
    config.sinks.postgres.schema_name = unique("sinkpg")
    config.sinks.mysql.database = unique("sink")
    config.spark.master = "local[2]"
    config.spark.checkpoint_dir = str(tmp_path / "ckpt")
    config.spark.trigger_interval_s = 0.5
    return config


@pytest.fixture
def lake_config(merge_config: CDCConfig, unique, tmp_path: Path) -> CDCConfig:
    """``merge_config`` with the Delta and Iceberg sinks on, in the test's own places: a Delta
    directory, a warehouse and an Iceberg catalog of its own name in the stack's PostgreSQL."""
    cfg = merge_config
    cfg.sinks.delta.path = str(tmp_path / "lake" / "delta")
    cfg.sinks.iceberg.warehouse = str(tmp_path / "lake" / "iceberg")
    cfg.sinks.iceberg.catalog_name = unique("cat")
    cfg.sinks.delta.enabled = cfg.sinks.iceberg.enabled = True
    return cfg


@pytest.fixture
def config_file(config: CDCConfig, tmp_path: Path) -> Path:
    path = tmp_path / "cdc.yaml"
    path.write_text(dump_config(config))
    return path


@pytest.fixture
def replicated(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Topology]:
    """A fresh MariaDB primary with two replicas (GTID replication, read-only, log_slave_updates)
    in a directory of this test's own; everything is stopped and removed afterwards.  MySQL
    with ``@pytest.mark.parametrize("replicated", ["mariadb", "mysql"], indirect=True)``."""
    flavor = getattr(request, "param", "mariadb")
    topology = Topology(tmp_path_factory.mktemp("repl"), replicas=2, flavor=flavor).start()  # a short path: sockets
    try:
        yield topology
    finally:
        topology.close()


@pytest.fixture
def own_mysql(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[Topology]:
    """A MariaDB server of this test's own (no replicas), for what must not touch the session
    server (purging its binlogs); ``own_mysql.point(config)`` reads from it.  MySQL as
    ``replicated``'s (an indirect parameter)."""
    topology = Topology(tmp_path_factory.mktemp("own"), replicas=0, flavor=getattr(request, "param", "mariadb")).start()
    try:
        yield topology
    finally:
        topology.close()


@pytest.fixture
def two_sources(config: CDCConfig, own_mysql: Topology, unique) -> CDCConfig:
    """``config`` with two ``sources`` on two servers: the first reads the session server,
    the second a MariaDB server of this test's own (``own_mysql``).  Their names are unique
    (``east_<run>_<n>``, ``west_<run>_<n>``), and so are their topic prefixes
    (``<config's prefix>_<name>``), producer names and transactional ids;
    ``cfg.for_source(cfg.sources[i].name)`` is the configuration of either's producer."""
    east = config.source.model_dump()
    west = own_mysql.point(CDCConfig()).source.model_dump()
    west["server_id"] = east["server_id"] + 1
    data = config.model_dump()
    data.pop("source")
    data["sources"] = [{"name": unique("east"), **east}, {"name": unique("west"), **west}]
    return CDCConfig.model_validate(data)
