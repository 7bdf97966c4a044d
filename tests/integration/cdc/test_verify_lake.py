"""cdc verify on the lake tables (Delta Lake through delta-rs, Iceberg through pyiceberg) on the
real stack: source tables in MariaDB, lake tables filled the way the merge job fills them (the
rows converted by the producer's ``RowConverter`` through the envelope schema, staged and
committed by the real sinks), first equal, then damaged on purpose through the libraries'
own APIs (a row deleted, a row added, values changed) and verify must name each key and
column, per table and per sink; with ``soft_delete`` a flagged row is no row of the table;
a route's target holds each shard's rows by its origin values, and its rows of no shard are
counted."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Iterator

import pyarrow as pa
import pytest

from cdc.verify import VerifyReport, verify
from common.config import CDCConfig, dump_config
from spark_jobs.sharding.route_settings import RouteConfig
from spark_jobs.sharding.routes import Router
from spark_jobs.sharding.shapes import ShardId
from spark_jobs.sharding.target import target_fields, target_row, target_schema
from spark_jobs.sinks.configured import build_sinks
from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.lake_sink import LakeSink
from spark_jobs.sinks.lake_types import DELETED_COLUMN
from tests.integration.spark_jobs.test_sinks import P, Source, read_source
from tests.lake_helpers import commit_batch, lake_rows
from tests.producer_helpers import ROOT

TABLE_DDL = ("CREATE TABLE `{t}` (id INT PRIMARY KEY, v VARCHAR(20), n DECIMAL(12,3), at DATETIME(6), "
             "ts TIMESTAMP(6) NULL)")


@dataclass
class Lakes:
    cfg: CDCConfig
    delta: DeltaSink
    iceberg: IcebergSink

    def __iter__(self) -> Iterator[LakeSink]:
        return iter((self.delta, self.iceberg))

    def close(self) -> None:
        for s in self:
            s.close()


def lakes_of(cfg: CDCConfig) -> Lakes:
    """The lake sinks ``cfg`` configures: the ones verify reads."""
    sinks = {name: s for name, s in build_sinks(cfg.sinks) if isinstance(s, LakeSink)}
    return Lakes(cfg, sinks["delta"], sinks["iceberg"])


@pytest.fixture
def lake_cfg(lake_config: CDCConfig, test_db: str) -> CDCConfig:
    """``lake_config`` (a Delta directory and an Iceberg catalog of the test's own) reading the
    test database, with the lake sinks the only ones verify compares."""
    cfg = lake_config
    cfg.source.include_databases = [test_db]
    cfg.sinks.postgres.enabled = cfg.sinks.mysql.enabled = False
    return cfg


def make_table(stack, db: str, table: str, n: int = 12) -> None:
    with stack.admin(db) as conn, conn.cursor() as cur:
        cur.execute("SET time_zone = '+00:00'")
        cur.execute(TABLE_DDL.format(t=table))
        cur.executemany(f"INSERT INTO `{table}` VALUES (%s, %s, %s, %s, %s)", [
            (i, f"{table}-{i}", f"{i}.{i:03d}", f"2024-03-0{1 + i % 9} 10:00:00.{i:06d}",
             f"2025-06-01 12:00:0{i % 10}.{999000 + i:06d}") for i in range(1, n + 1)])
        conn.commit()


def load_lakes(stack, lakes: Lakes, db: str, table: str) -> Source:
    """The source table's rows in both lake tables, as a snapshot would put them (one batch,
    two partitions)."""
    tdef, stored = read_source(stack, db, table)
    src = Source(tdef)
    records = [src.upsert(r, i + 1, "r") for i, r in enumerate(stored)]
    for sink in lakes:
        commit_batch(sink, db, table, src.schema, list(tdef.primary_key), [records[::2], records[1::2]], 0)
    return src


def results(report: VerifyReport, table: str) -> dict:
    (t,) = [t for t in report.tables if t.table == table]
    return {r.sink: r for r in t.results}


def found(result) -> set[tuple[str, int]]:
    return {(s.kind, s.key["id"]) for s in result.samples}


def assert_equal(report: VerifyReport, tables: list[str], rows: int | dict) -> None:
    for table in tables:
        res = results(report, table)
        assert set(res) == {"delta", "iceberg"}, res
        for sink, r in res.items():
            n = rows if isinstance(rows, int) else rows[table]
            assert r.error is None and r.equal, (table, sink, r)
            assert (r.source_rows, r.sink_rows, r.missing, r.extra, r.differing) == (n, n, 0, 0, 0), (table, sink, r)
    assert report.equal


# ----------------------------------------------------------------------------- damage through the libraries
def delta_append(delta: DeltaSink, db: str, table: str, rows: list[dict]) -> None:
    """Rows added to the Delta table with delta-rs (``write_deltalake``, mode append)."""
    from deltalake import DeltaTable, write_deltalake
    uri = delta.format.table_uri(db, table)
    schema = pa.schema(DeltaTable(uri).schema().to_arrow())
    write_deltalake(uri, pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema),
                    mode="append")


def iceberg_append(iceberg: IcebergSink, db: str, table: str, rows: list[dict]) -> None:
    """Rows added to the Iceberg table with pyiceberg (``Table.append``)."""
    tbl = iceberg.load_table(db, table)
    schema = tbl.schema().as_arrow()
    tbl.append(pa.Table.from_pylist([{f.name: r.get(f.name) for f in schema} for r in rows], schema=schema))


def iceberg_change(iceberg: IcebergSink, db: str, table: str, key: int, **values) -> None:
    """A row of the Iceberg table rewritten with other values (``Table.overwrite`` with a filter)."""
    from pyiceberg.expressions import EqualTo
    tbl = iceberg.load_table(db, table)
    (row,) = tbl.scan(row_filter=EqualTo("id", key)).to_arrow().to_pylist()
    row.update(values)
    tbl.overwrite(pa.Table.from_pylist([row], schema=tbl.schema().as_arrow()), overwrite_filter=EqualTo("id", key))


def iceberg_delete(iceberg: IcebergSink, db: str, table: str, key: int) -> None:
    from pyiceberg.expressions import EqualTo
    iceberg.load_table(db, table).delete(EqualTo("id", key))


def run_cli(cfg: CDCConfig, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    path = tmp_path / "verify.yaml"
    path.write_text(dump_config(cfg))
    return subprocess.run([sys.executable, "-m", "cdc.cli", "-c", str(path), "verify", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "220"})


# ----------------------------------------------------------------------------- the tests
def test_each_damage_to_a_delta_or_iceberg_table_is_named_with_its_table_key_and_column(
        stack, lake_cfg, test_db, tmp_path):
    """Table ``a`` is damaged in Delta only, table ``b`` in Iceberg only: each difference is
    reported for that table and that sink, with its key and columns, and the untouched copy
    of each table stays equal (the differences are not smeared over tables or sinks)."""
    cfg = lake_cfg
    lakes = lakes_of(cfg)
    try:
        for t in ("a", "b"):
            make_table(stack, test_db, t)
            load_lakes(stack, lakes, test_db, t)
        a, b = f"{test_db}.a", f"{test_db}.b"
        assert_equal(verify(cfg, [a, b], chunk_size=5), [a, b], 12)

        # Delta, table a: id 3 deleted, id 100 added, id 5's text and id 7's DATETIME(6) (by 1 us) changed
        from deltalake import DeltaTable
        uri = lakes.delta.format.table_uri(test_db, "a")
        assert DeltaTable(uri).delete("id = 3")["num_deleted_rows"] == 1
        DeltaTable(uri).update(predicate="id = 5", updates={"v": "'changed'"})
        at7 = lake_rows(lakes.delta, test_db, "a", ["id"])[(7,)]["at"]
        DeltaTable(uri).update(predicate="id = 7", new_values={"at": at7 + timedelta(microseconds=1)})
        delta_append(lakes.delta, test_db, "a", [{"id": 100, "v": "only in delta", "__cdc_position": P(0)}])
        # Iceberg, table b: id 4 deleted, id 200 added, id 6's decimal changed in its last digit
        iceberg_delete(lakes.iceberg, test_db, "b", 4)
        iceberg_append(lakes.iceberg, test_db, "b", [{"id": 200, "v": "only in iceberg", "__cdc_position": P(0)}])
        n6 = lake_rows(lakes.iceberg, test_db, "b", ["id"])[(6,)]["n"]
        iceberg_change(lakes.iceberg, test_db, "b", 6, n=n6 + Decimal("0.001"))

        report = verify(cfg, [a, b], chunk_size=5, samples=10)
        assert not report.equal
        ra, rb = results(report, a), results(report, b)
        d = ra["delta"]
        assert d.error is None and (d.missing, d.extra, d.differing) == (1, 1, 2), d
        assert (d.source_rows, d.sink_rows) == (12, 12)
        assert found(d) == {("missing", 3), ("extra", 100), ("differs", 5), ("differs", 7)}
        by = {s.key["id"]: s for s in d.samples}
        assert by[5].columns == ["v"] and (by[5].source["v"], by[5].sink["v"]) == ("a-5", "changed")
        assert by[7].columns == ["at"] and by[7].source["at"] == "2024-03-08 10:00:00.000007"
        assert by[7].sink["at"] == "2024-03-08 10:00:00.000008"
        assert by[100].sink["v"] == "only in delta"
        assert d.target == uri
        i = rb["iceberg"]
        assert i.error is None and (i.missing, i.extra, i.differing) == (1, 1, 1), i
        assert found(i) == {("missing", 4), ("extra", 200), ("differs", 6)}
        by = {s.key["id"]: s for s in i.samples}
        assert by[6].columns == ["n"] and (by[6].source["n"], by[6].sink["n"]) == ("6.006", "6.007")
        assert i.target == f"iceberg:{test_db}.b"
        assert ra["iceberg"].equal and rb["delta"].equal, (ra["iceberg"], rb["delta"])

        # the command a user runs: exit code 1, the same numbers
        out = run_cli(cfg, tmp_path, "--json", a, b)
        assert out.returncode == 1, out.stdout + out.stderr
        data = json.loads(out.stdout)
        got = {(t["table"], r["sink"]): (r["missing"], r["extra"], r["differing"])
               for t in data["tables"] for r in t["results"]}
        assert got == {(a, "delta"): (1, 1, 2), (a, "iceberg"): (0, 0, 0), (b, "delta"): (0, 0, 0),
                       (b, "iceberg"): (1, 1, 1)}
    finally:
        lakes.close()


def test_a_missing_lake_table_is_every_row_missing(stack, lake_cfg, test_db):
    cfg = lake_cfg
    make_table(stack, test_db, "a", n=5)
    lakes = lakes_of(cfg)
    try:
        tdef, stored = read_source(stack, test_db, "a")
        src = Source(tdef)
        commit_batch(lakes.iceberg, test_db, "a", src.schema, ["id"], [[src.upsert(r, 1, "r") for r in stored]], 0)
        report = verify(cfg, [f"{test_db}.a"])
        r = results(report, f"{test_db}.a")
        assert r["iceberg"].equal
        assert "no Delta table" in r["delta"].error and r["delta"].missing == 5
        assert not report.equal
    finally:
        lakes.close()


def test_soft_deleted_rows_are_not_rows_of_the_table(stack, lake_cfg, test_db):
    """With ``soft_delete`` a deleted key stays in the lake, flagged: equal to a source without
    it.  A row flagged deleted that the source has is missing; a row the source deleted that
    the lake holds unflagged is extra."""
    cfg = lake_cfg
    cfg.sinks.delta.soft_delete = cfg.sinks.iceberg.soft_delete = True
    make_table(stack, test_db, "t", n=8)
    lakes = lakes_of(cfg)
    try:
        src = load_lakes(stack, lakes, test_db, "t")
        tdef, stored = read_source(stack, test_db, "t")
        gone = src.upsert({**stored[0], "id": 50, "v": "deleted later"}, 20, "c")
        for sink in lakes:  # key 50 inserted and deleted; key 60 deleted before the lake held it
            commit_batch(sink, test_db, "t", src.schema, ["id"], [[gone]], 1)
            commit_batch(sink, test_db, "t", src.schema, ["id"], [[src.delete({"id": 50}, 21),
                                                                   src.delete({"id": 60}, 22)]], 2)
            flags = {k[0]: r[DELETED_COLUMN] for k, r in lake_rows(sink, test_db, "t", ["id"]).items()}
            assert flags == {**{i: False for i in range(1, 9)}, 50: True, 60: True}, (sink.FORMAT, flags)
        t = f"{test_db}.t"
        report = verify(cfg, [t], chunk_size=3)
        assert_equal(report, [t], 8)

        # the lake flags id 4 deleted (a delete the source never had); the source deletes id 7
        # (the lake still holds it, unflagged)
        for sink in lakes:
            commit_batch(sink, test_db, "t", src.schema, ["id"], [[src.delete({"id": 4}, 30)]], 3)
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("DELETE FROM t WHERE id = 7")
            conn.commit()
        report = verify(cfg, [t], chunk_size=3)
        assert not report.equal
        for sink, r in results(report, t).items():
            assert r.error is None and (r.missing, r.extra, r.differing) == (1, 1, 0), (sink, r)
            assert (r.source_rows, r.sink_rows) == (7, 7), (sink, r)
            assert found(r) == {("missing", 4), ("extra", 7)}, (sink, r.samples)
            (missing,) = [s for s in r.samples if s.kind == "missing"]
            assert missing.source["v"] == "t-4"
    finally:
        lakes.close()


def test_a_routed_lake_target_is_verified_shard_by_shard(stack, lake_cfg, test_db):
    """Two tables routed into one lake target (origin columns in its key, the same ids in both):
    each shard is compared with its rows there; a row deleted, changed or added under a
    shard's origin is that shard's difference, and a row whose origin names no shard is
    counted as a row of no shard."""
    cfg = lake_cfg
    cfg.routes = [RouteConfig(schema=re.escape(test_db), table="orders_[ab]", target=f"{test_db}.orders",
                              ddl="optimistic")]
    source_name = cfg.captured_sources()[0].name
    route = Router.from_config(cfg).route_of(source_name, test_db, "orders_a")
    assert route is not None and route.target == (test_db, "orders")
    sources, stored = {}, {}
    for t in ("orders_a", "orders_b"):
        make_table(stack, test_db, t, n=6)
        tdef, stored[t] = read_source(stack, test_db, t)
        sources[ShardId(source_name, test_db, t)] = Source(tdef)
    schema, key = target_schema(route, {shard: (s.schema, ["id"]) for shard, s in sources.items()})
    assert key == ["__source", "__db", "__table", "id"]
    fields = target_fields(schema)
    records = [(None, "r", target_row(route, shard, src.after(row), fields), P(100 * n + i))
               for n, (shard, src) in enumerate(sources.items()) for i, row in enumerate(stored[shard.table])]
    lakes = lakes_of(cfg)
    try:
        for sink in lakes:
            commit_batch(sink, test_db, "orders", schema, key, [records], 0)
            assert len(lake_rows(sink, test_db, "orders", key)) == 12
        shard_a, shard_b = (f"{source_name}/{test_db}.orders_{x}" for x in "ab")
        stray = f"{test_db}.orders: rows of no shard"
        report = verify(cfg, [f"{test_db}.orders"], chunk_size=4)  # the route's target: all its shards
        assert {t.table for t in report.tables} == {shard_a, shard_b, stray}
        assert all(t.target == f"{test_db}.orders" for t in report.tables)
        assert_equal(report, [shard_a, shard_b], 6)
        assert {r.sink: (r.extra, r.error) for r in results(report, stray).values()} == {
            "delta": (0, None), "iceberg": (0, None)}

        # Delta: shard a's id 2 deleted, shard b's id 3 changed, an id 77 added under shard a's
        # origin, a row of a table no route names
        from deltalake import DeltaTable
        uri = lakes.delta.format.table_uri(test_db, "orders")
        DeltaTable(uri).delete("__table = 'orders_a' AND id = 2")
        DeltaTable(uri).update(predicate="__table = 'orders_b' AND id = 3", updates={"v": "'moved'"})
        origin = {"__source": source_name, "__db": test_db}
        delta_append(lakes.delta, test_db, "orders", [
            {**origin, "__table": "orders_a", "id": 77, "v": "extra", "__cdc_position": P(0)},
            {**origin, "__table": "orders_zz", "id": 1, "v": "stray", "__cdc_position": P(0)}])
        report = verify(cfg, [f"{test_db}.orders"], chunk_size=4)
        assert not report.equal
        a, b = results(report, shard_a), results(report, shard_b)
        assert (a["delta"].missing, a["delta"].extra, a["delta"].differing) == (1, 1, 0), a["delta"]
        assert found(a["delta"]) == {("missing", 2), ("extra", 77)}
        assert (b["delta"].missing, b["delta"].extra, b["delta"].differing) == (0, 0, 1), b["delta"]
        assert found(b["delta"]) == {("differs", 3)} and b["delta"].samples[0].columns == ["v"]
        assert a["iceberg"].equal and b["iceberg"].equal
        rest = results(report, stray)
        assert (rest["delta"].extra, rest["iceberg"].extra) == (1, 0), rest
        assert any("orders_zz" in n for n in rest["delta"].notes), rest["delta"].notes
    finally:
        lakes.close()
