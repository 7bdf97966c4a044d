"""The lake sinks of both engines (``driver``: delta-rs and pyiceberg; ``spark``: delta-spark
and Iceberg's Spark runtime in this process's Spark session; the Iceberg catalog in the
stack's PostgreSQL, or SQLite): batches staged as the merge tasks stage them and committed as
the driver commits them; read back through the libraries and through DuckDB.

Records are built the way the pipeline builds them (tests/integration/spark_jobs/test_sinks.py:
the producer's conversion and an Avro round trip)."""

from __future__ import annotations

import time
from datetime import date, datetime, timedelta, timezone
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pytest

from cdc.lake import duckdb_connection
from spark_jobs.errors import SinkError, SinkUnavailable
from spark_jobs.sinks.delta import DeltaSink
from spark_jobs.sinks.iceberg import IcebergSink
from spark_jobs.sinks.layout import row_columns
from spark_jobs.sinks.naming import POSITION_COLUMN
from tests.all_types import create_all_types
from tests.integration.spark_jobs.test_sinks import P, Source, col, read_source, simple_source, table_def
from tests.lake_helpers import LAKE_KINDS, commit_batch, lake_commits, lake_rows, lake_session, make_lake_sink

UTC = timezone.utc
#: Every lake sink: each format with each engine.
LAKES = [(kind, engine) for engine in ("driver", "spark") for kind in LAKE_KINDS]


def _lake(request, stack, tmp_path, unique):
    kind, engine = request.param
    if engine == "spark":
        lake_session()
    return make_lake_sink(kind, tmp_path, stack.pg_dsn, unique("cat"), engine=engine)


@pytest.fixture(params=LAKES, ids=lambda p: "-".join(p))
def lake(request, stack, tmp_path, unique):
    sink = _lake(request, stack, tmp_path, unique)
    try:
        yield sink
    finally:
        sink.close()


@pytest.fixture(params=[(kind, "driver") for kind in LAKE_KINDS], ids=lambda p: "-".join(p))
def driver_lake(request, stack, tmp_path, unique):
    """A lake sink of the ``driver`` engine: the long runs (many commits) on the fast engine;
    the spark engine's compaction and removal of old versions have tests of their own below."""
    sink = _lake(request, stack, tmp_path, unique)
    try:
        yield sink
    finally:
        sink.close()


@pytest.fixture(params=LAKE_KINDS)
def spark_lake(request, stack, tmp_path, unique):
    """A lake sink of the ``spark`` engine (merge-on-read, Spark's maintenance)."""
    lake_session()
    sink = make_lake_sink(request.param, tmp_path, stack.pg_dsn, unique("cat"), engine="spark")
    try:
        yield sink
    finally:
        sink.close()


def values(sink, db, table, cols=("v",)) -> dict:
    return {k[0]: tuple(r[c] for c in cols) for k, r in lake_rows(sink, db, table, ["id"]).items()}


def test_merge_by_position_deletes_and_a_replayed_batch_commits_nothing(lake):
    src = simple_source()
    schema = src.schema
    b0 = [[src.upsert({"id": 1, "v": "a", "n": Decimal("1.5")}, 10, "c"),
           src.upsert({"id": 2, "v": "b"}, 11, "c"),
           src.upsert({"id": 1, "v": "a2"}, 14)],  # partition 0: key 1 twice
          [src.upsert({"id": 3, "v": "c"}, 12, "r"),  # a snapshot row
           src.delete({"id": 2}, 13),  # key 2's delete (another partition here: the commit orders by position)
           src.upsert({"id": 4, "v": "d"}, 15, "c")]]
    res = commit_batch(lake, "shop", "items", schema, ["id"], b0, 0)
    # key 2 created and deleted in the batch: its delete wins and finds nothing to remove
    assert (res.upserted, res.deleted, res.skipped, res.superseded) == (3, 0, 1, 2)
    assert values(lake, "shop", "items", ("v", "n")) == {1: ("a2", None), 3: ("c", None), 4: ("d", None)}
    # The same batch replayed (a crash after the commit, before the job stored its state):
    # the tasks stage it again, the commit finds it committed and changes nothing.
    again = commit_batch(lake, "shop", "items", schema, ["id"], b0, 0)
    assert (again.upserted, again.deleted, again.skipped) == (0, 0, 6)
    assert lake_commits(lake, "shop", "items") == [("app-1", 0)]
    # An older change never moves a row backwards; a newer one wins; a key deleted again.
    b1 = [[src.upsert({"id": 1, "v": "older"}, 9), src.upsert({"id": 3, "v": "c2"}, 20)],
          [src.delete({"id": 4}, 21), src.upsert({"id": 2, "v": "back"}, 22, "c")]]
    res = commit_batch(lake, "shop", "items", schema, ["id"], b1, 1)
    assert (res.upserted, res.deleted, res.skipped) == (2, 1, 1)
    rows = lake_rows(lake, "shop", "items", ["id"], position=True)
    assert {k[0]: (r["v"], r[POSITION_COLUMN]) for k, r in rows.items()} == {
        1: ("a2", P(14)), 2: ("back", P(22)), 3: ("c2", P(20))}
    assert lake_commits(lake, "shop", "items") == [("app-1", 0), ("app-1", 1)]
    # A new checkpoint (another app id) counts its batches from 0 again: committed, not skipped.
    res = commit_batch(lake, "shop", "items", schema, ["id"], [[src.upsert({"id": 5, "v": "e"}, 30, "c")]], 0,
                       app="app-2")
    assert res.upserted == 1 and (5,) in lake_rows(lake, "shop", "items", ["id"])
    # the staged parts are gone once committed
    assert not list(Path(lake.staging.uri).rglob("*.parquet"))


def test_all_types_without_loss(lake, stack, test_db):
    with stack.admin(test_db) as conn:
        create_all_types(conn, stack.mysql.get("flavor", "mariadb") == "mariadb")
    tdef, stored = read_source(stack, test_db, "types")
    src = Source(tdef)
    records = [src.upsert(r, 100 + i, "r") for i, r in enumerate(stored)]
    commit_batch(lake, test_db, "types", src.schema, ["id"], [records], 0)
    got = lake_rows(lake, test_db, "types", ["id"])
    assert sorted(got) == [(1,), (2,), (3,)]
    kinds = {c.name: c.kind for c in row_columns(src.schema)}
    for rec, row in zip(records, stored):
        lake_row = got[(row["id"],)]
        for name, kind in kinds.items():
            assert _lake_value(kind, lake_row[name]) == _source_value(kind, row[name]), (row["id"], name, kind)
    row = got[(1,)]
    assert row["d65"] == "-12345678901234567890123456789012345.123456789012345678901234567890"
    assert row["tm"] == -(838 * 3600 + 59 * 60 + 59) * 1_000_000
    assert row["ts6"] == datetime(1970, 1, 1, 0, 0, 1, 1, tzinfo=UTC)


def _source_value(kind: str, v):
    """A stored value (pymysql, the session in UTC) in the lake's form (docs/lake.md)."""
    if v is None:
        return None
    if kind == "time":
        return (v.days * 86400 + v.seconds) * 1_000_000 + v.microseconds
    if kind == "zoned_timestamp":
        return v.replace(tzinfo=UTC)
    if kind == "bits":
        return int.from_bytes(v, "big")
    if kind == "boolean":
        return bool(int.from_bytes(v, "big")) if isinstance(v, bytes) else bool(v)
    if kind in ("geometry", "point"):
        return bytes(v[4:])
    if kind == "decimal":
        return Decimal(v)
    if kind == "json":
        import json
        return json.loads(v)
    if kind == "set":
        return v if isinstance(v, str) else ",".join(sorted(v))
    if isinstance(v, datetime):
        return v
    if isinstance(v, date):
        return v
    return v


def _lake_value(kind: str, v):
    if v is None:
        return None
    if kind == "decimal":
        return Decimal(v) if isinstance(v, str) else v
    if kind == "bits":
        return int(v)
    if kind == "json":
        import json
        return json.loads(v)
    if kind in ("smallint", "year"):
        return int(v)
    return v


def test_soft_deletes_keep_the_row_flagged_with_the_delete_position(stack, tmp_path, unique):
    for kind in LAKE_KINDS:
        sink = make_lake_sink(kind, tmp_path / kind, stack.pg_dsn, unique("cat"), soft_delete=True)
        src = simple_source()
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 10, "c"),
                                                                   src.upsert({"id": 2, "v": "b"}, 11, "c")]], 0)
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.delete({"id": 1}, 12),
                                                                   src.delete({"id": 9}, 13)]], 1)
        rows = lake_rows(sink, "shop", "items", ["id"], position=True)
        flagged = {k[0]: (r["v"], r["__cdc_deleted"], r[POSITION_COLUMN]) for k, r in rows.items()}
        assert flagged == {1: ("a", True, P(12)), 2: ("b", False, P(11)), 9: (None, True, P(13))}, kind
        # an older insert stays out; a newer one brings the key back
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "old"}, 5, "c"),
                                                                   src.upsert({"id": 9, "v": "new"}, 20, "c")]], 2)
        rows = lake_rows(sink, "shop", "items", ["id"])
        assert (rows[(1,)]["v"], rows[(1,)]["__cdc_deleted"]) == ("a", True), kind
        assert (rows[(9,)]["v"], rows[(9,)]["__cdc_deleted"]) == ("new", False), kind
        # a delete-missing snapshot flags what it did not refresh
        assert sink.delete_below("shop", "items", P(12)) == 1  # key 2 (position 11); key 1 is flagged already
        assert lake_rows(sink, "shop", "items", ["id"])[(2,)]["__cdc_deleted"] is True
        sink.close()


def test_schema_changes_add_columns_widen_and_retype(lake):
    v1 = Source(table_def("shop", "evo", [col("id", "int", "int(11)", nullable=False, prec=10, scale=0),
                                           col("q", "int", "int(11)", prec=10, scale=0)], ["id"]))
    commit_batch(lake, "shop", "evo", v1.schema, ["id"], [[v1.upsert({"id": 1, "q": 5}, 10, "c")]], 0)
    # a column added, INT widened to BIGINT
    v2 = Source(table_def("shop", "evo", [col("id", "int", "int(11)", nullable=False, prec=10, scale=0),
                                           col("q", "bigint", "bigint(20)", prec=19, scale=0),
                                           col("note", "varchar", "varchar(20)", cs="utf8mb4", maxlen=20)], ["id"]))
    commit_batch(lake, "shop", "evo", v2.schema, ["id"], [[v2.upsert({"id": 2, "q": 2 ** 40, "note": "n"}, 11, "c")]],
                 1)
    rows = lake_rows(lake, "shop", "evo", ["id"])
    assert (rows[(1,)]["q"], rows[(1,)]["note"]) == (5, None)
    assert (rows[(2,)]["q"], rows[(2,)]["note"]) == (2 ** 40, "n")
    # q retyped to text: the table holds it as text from now on
    v3 = Source(table_def("shop", "evo", [col("id", "int", "int(11)", nullable=False, prec=10, scale=0),
                                           col("q", "varchar", "varchar(20)", cs="utf8mb4", maxlen=20),
                                           col("note", "varchar", "varchar(20)", cs="utf8mb4", maxlen=20)], ["id"]))
    commit_batch(lake, "shop", "evo", v3.schema, ["id"], [[v3.upsert({"id": 3, "q": "three"}, 12, "c")]], 2)
    rows = lake_rows(lake, "shop", "evo", ["id"])
    assert rows[(3,)]["q"] == "three"
    if isinstance(lake, DeltaSink):  # the table written again with the old values cast
        assert rows[(1,)]["q"] == "5"
    assert lake_commits(lake, "shop", "evo") == [("app-1", 0), ("app-1", 1), ("app-1", 2)]


def test_every_type_added_to_a_table_and_widened_in_place_keeps_its_values(driver_lake, stack, test_db):
    """Schema evolution of every lake type on the driver engine: each column of the all-types
    table added to a table that held the key only (Iceberg: the type
    ``lake_types.iceberg_type`` gives, pyiceberg's public API), the table then of the schema a
    table created with them all has (each column's type), every value read back; FLOAT to DOUBLE and a decimal's
    precision widened in place, the old values kept."""
    lake = driver_lake
    with stack.admin(test_db) as conn:
        create_all_types(conn, stack.mysql.get("flavor", "mariadb") == "mariadb")
    tdef, stored = read_source(stack, test_db, "types")
    full = Source(tdef)
    key_only = Source(table_def(test_db, "types", [c for c in tdef.columns if c.name == "id"], ["id"]))
    commit_batch(lake, test_db, "types", key_only.schema, ["id"], [[key_only.upsert({"id": 1}, 50, "r")]], 0)
    records = [full.upsert(r, 100 + i, "r") for i, r in enumerate(stored)]
    commit_batch(lake, test_db, "types", full.schema, ["id"], [records], 1)  # row 1 replaced, 2 and 3 new
    commit_batch(lake, test_db, "created", full.schema, ["id"], [records], 0)
    evolved, created = (lake.format.schema(lake.load_table(test_db, t)) for t in ("types", "created"))
    assert dict(zip(evolved.names, evolved.types)) == dict(zip(created.names, created.types))  # (order, ids aside)
    got = lake_rows(lake, test_db, "types", ["id"])
    assert sorted(got) == [(1,), (2,), (3,)]
    kinds = {c.name: c.kind for c in row_columns(full.schema)}
    for row in stored:
        for name, kind in kinds.items():
            assert _lake_value(kind, got[(row["id"],)][name]) == _source_value(kind, row[name]), (row["id"], name)
    assert lake_commits(lake, test_db, "types") == [("app-1", 0), ("app-1", 1)]
    # FLOAT -> DOUBLE, DECIMAL(10,2) -> DECIMAL(14,2)
    cols = [col("id", "int", "int(11)", nullable=False, prec=10, scale=0)]
    v1 = Source(table_def("shop", "wide", cols + [col("f", "float", "float", prec=12),
                                                 col("n", "decimal", "decimal(10,2)", prec=10, scale=2)], ["id"]))
    v2 = Source(table_def("shop", "wide", cols + [col("f", "double", "double", prec=22),
                                                 col("n", "decimal", "decimal(14,2)", prec=14, scale=2)], ["id"]))
    commit_batch(lake, "shop", "wide", v1.schema, ["id"], [[v1.upsert({"id": 1, "f": 1.5, "n": Decimal("12.34")}, 10,
                                                                       "c")]], 0)
    commit_batch(lake, "shop", "wide", v2.schema, ["id"], [[v2.upsert({"id": 2, "f": 0.1, "n": Decimal("1e11")}, 11,
                                                                       "c")]], 1)
    schema = lake.format.schema(lake.load_table("shop", "wide"))
    assert (schema.field("f").type, schema.field("n").type) == (pa.float64(), pa.decimal128(14, 2))
    assert values(lake, "shop", "wide", ("f", "n")) == {1: (1.5, Decimal("12.34")), 2: (0.1, Decimal("1e11"))}


@pytest.mark.parametrize("soft_delete", [False, True], ids=["hard", "soft"])
def test_an_iceberg_batch_is_one_snapshot_with_its_properties(stack, tmp_path, unique, soft_delete):
    """The driver engine's copy-on-write commit of a batch (files holding replaced rows written
    again without them, new rows appended) and its compaction are one snapshot each, carrying
    the batch's properties (what exactly once reads): none for a replayed batch."""
    sink = make_lake_sink("iceberg", tmp_path, stack.pg_dsn, unique("cat"), soft_delete=soft_delete)
    src = simple_source()
    try:
        for b in range(3):  # three files of new keys
            commit_batch(sink, "shop", "items", src.schema, ["id"],
                         [[src.upsert({"id": 10 * b + i, "v": f"{b}.{i}"}, 100 * b + i, "c") for i in range(5)]], b)
        handle = sink.load_table("shop", "items")
        before = len(handle.metadata.snapshots)
        # keys of two of the files replaced, one deleted, one added, in two partitions
        batch = [[src.upsert({"id": 1, "v": "new"}, 500), src.delete({"id": 12}, 501)],
                 [src.upsert({"id": 30, "v": "added"}, 502, "c"), src.upsert({"id": 2, "v": "older"}, 1)]]
        res = commit_batch(sink, "shop", "items", src.schema, ["id"], batch, 3)
        assert (res.upserted, res.deleted, res.skipped) == (2, 1, 1)
        handle = sink.load_table("shop", "items")
        snapshots = handle.metadata.snapshots
        assert len(snapshots) == before + 1
        summary = handle.current_snapshot().summary
        assert (summary["cdc.app"], summary["cdc.batch"], summary.operation.value) == ("app-1", "3", "overwrite")
        assert summary["cdc.commit"] and summary["deleted-data-files"] == "2"
        assert handle.properties["cdc.batch.app-1"] == "3"
        rows = lake_rows(sink, "shop", "items", ["id"])
        assert len(rows) == (16 if soft_delete else 15)
        assert (rows[(1,)]["v"], rows[(2,)]["v"], rows[(30,)]["v"]) == ("new", "0.2", "added")
        if soft_delete:  # the deleted row kept with its last values, flagged
            assert (rows[(12,)]["v"], rows[(12,)]["__cdc_deleted"]) == ("1.2", True)
            assert not any(r["__cdc_deleted"] for k, r in rows.items() if k != (12,))
        else:
            assert (12,) not in rows
        # replayed: nothing committed
        again = commit_batch(sink, "shop", "items", src.schema, ["id"], batch, 3)
        assert again.upserted == 0 and len(sink.load_table("shop", "items").metadata.snapshots) == before + 1
        assert lake_commits(sink, "shop", "items") == [("app-1", b) for b in range(4)]
        # compaction: one snapshot, the same rows
        done = sink.compact("shop", "items")
        handle = sink.load_table("shop", "items")
        assert done["files_removed"] >= 2 and sink.file_count("shop", "items") == done["files_added"] == 1, done
        summary = handle.current_snapshot().summary
        assert summary["cdc.maintenance"] == "compact" and summary["cdc.batch"] is None
        assert len([s for s in handle.metadata.snapshots if s.summary.additional_properties.get(
            "cdc.maintenance") == "compact"]) == 1
        assert lake_rows(sink, "shop", "items", ["id"]) == rows
    finally:
        sink.close()


def test_a_table_of_another_pipeline_or_not_made_by_the_job_is_refused(lake):
    src = simple_source()
    commit_batch(lake, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 10, "c")]], 0,
                 owner="cdc-merge:one")
    with pytest.raises(SinkError, match=r"shop\.items.*another pipeline.*cdc-merge:one"):
        commit_batch(lake, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 2, "v": "b"}, 11, "c")]], 0,
                     owner="cdc-merge:two")
    assert values(lake, "shop", "items") == {1: ("a",)}


def test_a_delta_table_the_job_did_not_make_is_refused(tmp_path):
    import pyarrow as pa
    from deltalake import write_deltalake
    write_deltalake(str(tmp_path / "delta" / "shop" / "items"), pa.table({"id": [1], "v": ["x"]}))
    sink = DeltaSink(str(tmp_path / "delta"))
    src = simple_source()
    with pytest.raises(SinkError, match=r"shop\.items.*not made by the merge job"):
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 2, "v": "b"}, 11, "c")]], 0)


def test_a_path_under_a_file_is_a_clear_error_that_loses_nothing(tmp_path):
    (tmp_path / "file").write_text("not a directory")
    src = simple_source()
    sink = DeltaSink(str(tmp_path / "file" / "delta"), staging=str(tmp_path / "staging"))
    with pytest.raises(SinkUnavailable, match=r"shop\.items"):
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 1, "c")]], 0)
    # the staged part is still there for the batch's retry
    assert list((tmp_path / "staging").rglob("*.parquet"))


def test_a_catalog_database_that_is_down_is_sink_unavailable(tmp_path, unique):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    sink = IcebergSink(f"postgresql+psycopg://nobody:s3cret-pw@127.0.0.1:{port}/none", str(tmp_path / "wh"),
                       catalog_name=unique("cat"))
    src = simple_source()
    with pytest.raises(SinkUnavailable, match="catalog database cannot be reached") as err:
        commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 1, "c")]], 0)
    assert "s3cret-pw" not in str(err.value)


def test_delete_below_drop_and_rename(lake):
    src = simple_source()
    commit_batch(lake, "shop", "items", src.schema, ["id"], [[src.upsert({"id": i, "v": str(i)}, 10 + i, "c")
                                                               for i in range(1, 6)]], 0)
    assert lake.delete_below("shop", "items", P(13)) == 2
    assert sorted(values(lake, "shop", "items")) == [3, 4, 5]
    assert lake.applied_positions()[("shop", "items")] == P(15)
    assert lake.rename_table("shop", "items", "shop", "goods") == "renamed"
    assert ("shop", "goods") in lake.tables() and ("shop", "items") not in lake.tables()
    assert sorted(values(lake, "shop", "goods")) == [3, 4, 5]
    assert lake.drop_table("shop", "goods", below=P(15)) is True  # a row above the DROP stays
    assert sorted(values(lake, "shop", "goods")) == [5]
    assert lake.drop_table("shop", "goods") is True
    assert lake.tables() == []


def test_compaction_bounds_the_files_and_duckdb_reads_the_tables(driver_lake):
    lake = driver_lake
    src = simple_source()
    for b in range(12):  # new keys: every commit adds a file
        commit_batch(lake, "shop", "items", src.schema, ["id"],
                     [[src.upsert({"id": i, "v": f"{b}-{i}"}, 100 * b + i, "c") for i in range(b * 5, b * 5 + 5)]], b)
    before = lake.file_count("shop", "items")
    expected = {k[0]: r["v"] for k, r in lake_rows(lake, "shop", "items", ["id"]).items()}
    done = lake.compact("shop", "items")
    after = lake.file_count("shop", "items")
    assert before > 2 and after < before and after <= 2, (before, after, done)
    assert {k[0]: r["v"] for k, r in lake_rows(lake, "shop", "items", ["id"]).items()} == expected
    con = duckdb_connection()
    got = dict(con.execute(f"SELECT id, v FROM {lake.duckdb_scan('shop', 'items')}").fetchall())
    assert got == expected


def test_delta_change_data_feed(tmp_path):
    sink = DeltaSink(str(tmp_path / "delta"), change_data_feed=True)
    src = simple_source()
    commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 10, "c")]], 0)
    commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "b"}, 11)]], 1)
    commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.delete({"id": 1}, 12)]], 2)
    import pyarrow as pa
    from deltalake import DeltaTable
    table = DeltaTable(sink.format.table_uri("shop", "items"))
    feed = pa.table(table.load_cdf(starting_version=0).read_all()).to_pylist()
    kinds = sorted((r["_commit_version"], r["_change_type"], r["v"]) for r in feed)
    assert kinds == [(1, "insert", "a"), (2, "update_postimage", "b"), (2, "update_preimage", "a"),
                     (3, "delete", "b")]


def test_iceberg_on_a_sqlite_catalog(tmp_path):
    sink = make_lake_sink("iceberg", tmp_path, None, "local")
    src = simple_source()
    commit_batch(sink, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 1, "v": "a"}, 10, "c")]], 0)
    assert values(sink, "shop", "items") == {1: ("a",)}
    assert sink.engine.expire("shop", "items", 0) == {"snapshots_expired": 0, "files_removed": 0}  # 1 snapshot: kept
    sink.close()


def test_iceberg_reads_the_rows_of_a_batchs_keys_by_their_range_and_merges_hundreds_spread_keys(tmp_path):
    """The driver engine's Iceberg merge finds the table's rows of a batch's keys through the
    files the range of the first key column plans (no ``In`` of every key, which pyiceberg makes
    and binds in Python a literal at a time), kept by the keys themselves: a range spanning the
    table holds only the batch's rows; then 600 updates and deletes spread over 3 files merge."""
    from pyiceberg.expressions import And, EqualTo

    from spark_jobs.sinks.iceberg_merge import coarse, held_rows
    sink = make_lake_sink("iceberg", tmp_path, None, "local")
    src = simple_source()
    for b in range(3):  # (a data file a batch: keys 0-2999)
        commit_batch(sink, "shop", "items", src.schema, ["id"],
                     [[src.upsert({"id": i, "v": f"v{i}"}, 10 + i, "c") for i in range(b * 1000, b * 1000 + 1000)]], b)
    handle = sink.load_table("shop", "items")
    batch = pa.table({"id": pa.array([5, 2995], pa.int64())})
    assert isinstance(coarse(batch, ["id"]), And) and isinstance(coarse(batch.slice(0, 1), ["id"]), EqualTo)
    held = held_rows(handle, batch, ["id"], ["id", POSITION_COLUMN])
    assert sorted(held.column("id").to_pylist()) == [5, 2995]  # (not the 2,991 rows between them)
    spread = list(range(0, 3000, 5))
    changes = [src.delete({"id": i}, 5000 + i) if i % 2 else src.upsert({"id": i, "v": f"new{i}"}, 5000 + i)
               for i in spread]
    commit_batch(sink, "shop", "items", src.schema, ["id"], [changes], 3)
    expected = {i: (f"new{i}",) if i % 5 == 0 and i % 2 == 0 else (f"v{i}",)
                for i in range(3000) if not (i % 5 == 0 and i % 2)}
    assert values(sink, "shop", "items") == expected
    sink.close()


def test_composite_and_temporal_keys(lake):
    src = Source(table_def("shop", "lines", [
        col("o", "int", "int(11)", nullable=False, prec=10, scale=0),
        col("at", "datetime", "datetime(6)", nullable=False, dtp=6),
        col("s", "varchar", "varchar(10)", nullable=False, cs="utf8mb4", maxlen=10),
        col("v", "int", "int(11)", prec=10, scale=0)], ["o", "at", "s"]))
    t = datetime(2024, 5, 6, 7, 8, 9, 123456)
    rows = [{"o": i % 3, "at": t + timedelta(seconds=i % 2), "s": f"k{i % 4}", "v": i} for i in range(24)]
    b0 = [[src.upsert(r, 10 + i, "c") for i, r in enumerate(rows)]]
    commit_batch(lake, "shop", "lines", src.schema, ["o", "at", "s"], b0, 0)
    b1 = [[src.delete({"o": 0, "at": t, "s": "k0"}, 100), src.upsert({**rows[1], "v": -1}, 101)]]
    commit_batch(lake, "shop", "lines", src.schema, ["o", "at", "s"], b1, 1)
    got = lake_rows(lake, "shop", "lines", ["o", "at", "s"])
    expected = {}
    for r in rows:
        expected[(r["o"], r["at"], r["s"])] = r["v"]
    del expected[(0, t, "k0")]
    expected[(rows[1]["o"], rows[1]["at"], rows[1]["s"])] = -1
    assert {k: r["v"] for k, r in got.items()} == expected


def test_compact_every_keeps_the_files_of_a_long_run_bounded(driver_lake):
    lake = driver_lake
    """Every commit of new keys adds a file; compacting after every 5th keeps a table at a
    handful of files whatever the number of batches."""
    lake.compact_every = 5
    src = simple_source()
    most = 0
    for b in range(40):
        commit_batch(lake, "shop", "items", src.schema, ["id"],
                     [[src.upsert({"id": b * 10 + i, "v": f"{b}"}, 1000 * b + i, "c") for i in range(10)]], b)
        most = max(most, lake.file_count("shop", "items"))
    assert most <= 6, most
    assert len(values(lake, "shop", "items")) == 400
    assert len(lake_commits(lake, "shop", "items")) == 40  # compaction commits are not the job's batches


def test_compact_min_files_compacts_before_the_count_of_commits_is_reached(driver_lake):
    """Commits of new keys add a file each; with ``compact_every`` far away (a commit a minute
    makes 50 an hour) the files pile up until it comes, unless a commit that leaves
    ``compact_min_files`` small files compacts the table then."""
    lake = driver_lake
    src = simple_source()
    lake.compact_every, lake.retention_hours = 1000, None
    counts = {}
    for min_files in (0, 4):
        lake.compact_min_files = min_files
        table = f"piles{min_files}"
        files = []
        for b in range(12):
            commit_batch(lake, "shop", table, src.schema, ["id"],
                         [[src.upsert({"id": b * 10 + i, "v": f"{b}"}, 1000 * b + i, "c") for i in range(10)]], b)
            files.append(lake.file_count("shop", table))
        counts[min_files] = files
        assert len(values(lake, "shop", table)) == 120
        assert len(lake_commits(lake, "shop", table)) == 12  # compaction commits are not the job's batches
    assert counts[0][-1] >= 12, counts  # by the count of commits alone: a file a commit
    assert max(counts[4]) <= 4, counts  # compacted whenever a commit left 4 small files
    assert lake.small_file_count("shop", "piles4") < 4


def test_two_writers_committing_at_once_both_land(lake, stack, tmp_path, unique):
    """Two jobs of one pipeline (two sources' queries routed into one table) commit to the
    same table at the same moment: the one that loses the race reads the table again and
    commits after (LakeCommitConflict, tried again), nothing lost, nothing twice."""
    import pickle
    import threading
    src = simple_source()
    commit_batch(lake, "shop", "items", src.schema, ["id"], [[src.upsert({"id": 0, "v": "seed"}, 1, "c")]], 0)
    other = pickle.loads(pickle.dumps(lake))  # a second sink object, as another job's
    errors = []

    def write(sink, app: str, first: int) -> None:
        try:
            for b in range(1, 6):
                commit_batch(sink, "shop", "items", src.schema, ["id"],
                             [[src.upsert({"id": first + b, "v": app}, 100 * first + b, "c")]], b, app=app)
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=write, args=(lake, "app-a", 100)),
               threading.Thread(target=write, args=(other, "app-b", 200))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    other.close()
    assert errors == []
    assert sorted(values(lake, "shop", "items")) == [0, 101, 102, 103, 104, 105, 201, 202, 203, 204, 205]
    commits = lake_commits(lake, "shop", "items")
    assert len(commits) == len(set(commits)) == 11


def _files_on_disk(sink, db: str, table: str) -> int:
    """The table's files, but Iceberg's metadata files: each commit writes one, and the table
    keeps the last 100 (``write.metadata.previous-versions-max``), checked apart."""
    where = sink.format.table_uri(db, table) if hasattr(sink.format, "table_uri") \
        else sink.load_table(db, table).metadata.location
    files = [p for p in Path(where.removeprefix("file://")).rglob("*") if p.is_file()]
    assert sum(1 for p in files if p.name.endswith(".metadata.json")) <= 101
    return sum(1 for p in files if not p.name.endswith(".metadata.json"))


def test_old_versions_go_so_the_disk_of_a_long_run_stays_bounded(driver_lake):
    lake = driver_lake
    """Every batch below rewrites every row (a MERGE copies the files it changes): without
    removing old versions the files on disk grow with each batch; with ``retention_hours``
    they are removed with each compaction (0 here: only the latest version kept), the rows
    stay right and a replayed batch is still recognised."""
    src = simple_source()

    def batch(b: int) -> list:
        return [[src.upsert({"id": i, "v": f"{b}-{i}"}, 1000 * b + i, "c" if b == 0 else "u") for i in range(50)]]

    lake.compact_every, lake.retention_hours = 0, None
    for b in range(10):
        commit_batch(lake, "shop", "grows", src.schema, ["id"], batch(b), b)
    grown = _files_on_disk(lake, "shop", "grows")
    lake.compact_every, lake.retention_hours = 5, 0
    counts = []
    for b in range(40):
        commit_batch(lake, "shop", "kept", src.schema, ["id"], batch(b), b)
        counts.append(_files_on_disk(lake, "shop", "kept"))
    assert max(counts[10:]) <= max(counts[:10]), counts  # bounded: no growth past the first compactions
    assert counts[-1] < grown, (counts, grown)  # 40 batches leave fewer files than 10 without removal
    assert values(lake, "shop", "kept") == {i: (f"39-{i}",) for i in range(50)}
    if isinstance(lake, IcebergSink):  # each commit would read more manifests than the last: a run that slows down
        handle = lake.load_table("shop", "kept")
        assert len(handle.current_snapshot().manifests(handle.io)) <= lake.compact_every + 2
        grown_handle = lake.load_table("shop", "grows")
        assert len(grown_handle.current_snapshot().manifests(grown_handle.io)) >= 10  # (pyiceberg's, without)
    again = commit_batch(lake, "shop", "kept", src.schema, ["id"], batch(39), 39)
    assert (again.upserted, again.deleted) == (0, 0)  # committed before: the batch marker survived
    commit_batch(lake, "shop", "kept", src.schema, ["id"], batch(40), 40)
    assert values(lake, "shop", "kept") == {i: (f"40-{i}",) for i in range(50)}
    # within a retention of an hour, nothing of these versions goes
    assert lake.remove_old_versions("shop", "kept", 1).get("files_removed", 0) == 0
    assert values(lake, "shop", "kept") == {i: (f"40-{i}",) for i in range(50)}


def test_iceberg_keeps_at_most_max_snapshots_so_its_commits_do_not_slow_down(stack, tmp_path, unique):
    """Each pyiceberg commit copies the table's metadata, every snapshot in it, several times:
    an hour of snapshots at a commit a second made the soak's merge job fall behind within
    minutes.  With ``max_snapshots`` the upkeep expires all but the newest, whatever the
    retention (an hour here) would keep; without it, every snapshot of the hour stays."""
    src = simple_source()
    sinks = {cap: make_lake_sink("iceberg", tmp_path / str(cap), stack.pg_dsn, unique("cat"), compact_every=5,
                                 retention_hours=1, max_snapshots=cap) for cap in (6, None)}
    try:
        for b in range(30):
            for sink in sinks.values():
                commit_batch(sink, "shop", "capped", src.schema, ["id"],
                             [[src.upsert({"id": i, "v": f"{b}-{i}"}, 1000 * b + i, "c" if b == 0 else "u")
                               for i in range(20)]], b)
        capped, uncapped = (sinks[c].load_table("shop", "capped").metadata.snapshots for c in (6, None))
        assert len(uncapped) >= 30  # (a snapshot or two a commit, none expired within the hour)
        assert len(capped) <= 6 + 1, len(capped)  # (+1: two snapshots of one commit in one millisecond)
        capped_sink = sinks[6]
        assert values(capped_sink, "shop", "capped") == {i: (f"29-{i}",) for i in range(20)}
        handle = capped_sink.load_table("shop", "capped")
        oldest = min(capped, key=lambda s: s.timestamp_ms)
        assert handle.scan(snapshot_id=oldest.snapshot_id).to_arrow().num_rows == 20  # its files are all there
        again = commit_batch(capped_sink, "shop", "capped", src.schema, ["id"],
                             [[src.upsert({"id": 1, "v": "x"}, 29_001, "u")]], 29)
        assert (again.upserted, again.deleted) == (0, 0)  # a replay still recognised (a table property)
    finally:
        for sink in sinks.values():
            sink.close()


def _deletes_marked(sink, db: str, table: str) -> int:
    """Rows a merge-on-read commit marked instead of writing their files again: Delta's data
    files carrying a deletion vector, Iceberg's position delete files."""
    fmt = sink.format
    return fmt.deletion_vectors(db, table) if isinstance(sink, DeltaSink) else fmt.delete_file_count(db, table)


def test_merge_on_read_marks_replaced_rows_and_compaction_folds_them_back(spark_lake):
    lake = spark_lake
    """An update or a delete of a few keys leaves the file holding their old rows as it is
    (a deletion vector, a position delete file), and writes only the new rows; compaction
    writes the table again without the marked rows, in one file."""
    src = simple_source()
    commit_batch(lake, "shop", "mor", src.schema, ["id"],
                 [[src.upsert({"id": i, "v": f"a{i}"}, 10 + i, "c") for i in range(50)]], 0)
    assert lake.file_count("shop", "mor") == 1 and _deletes_marked(lake, "shop", "mor") == 0
    first = {f for f in _data_files(lake, "shop", "mor")}
    res = commit_batch(lake, "shop", "mor", src.schema, ["id"],
                       [[src.upsert({"id": 3, "v": "b3"}, 100), src.upsert({"id": 4, "v": "b4"}, 101),
                         src.delete({"id": 5}, 102)]], 1)
    assert (res.upserted, res.deleted) == (2, 1)
    # merge-on-read: the first file is still the table's (not rewritten), its replaced rows marked
    assert first <= set(_data_files(lake, "shop", "mor"))
    assert _deletes_marked(lake, "shop", "mor") >= 1
    expected = {i: (f"a{i}",) for i in range(50) if i != 5} | {3: ("b3",), 4: ("b4",)}
    assert values(lake, "shop", "mor") == expected
    done = lake.compact("shop", "mor")
    assert done["files_removed"] >= 2 and done["files_added"] == 1, done
    assert _deletes_marked(lake, "shop", "mor") == 0
    assert lake.file_count("shop", "mor") == 1
    assert not first & set(_data_files(lake, "shop", "mor"))
    assert values(lake, "shop", "mor") == expected


def _data_files(sink, db: str, table: str) -> list[str]:
    """The data files of the table's latest version."""
    handle = sink.load_table(db, table)
    if isinstance(sink, DeltaSink):
        return [u.rsplit("/", 1)[-1] for u in handle.file_uris()]
    return [t.file.file_path.rsplit("/", 1)[-1] for t in handle.scan().plan_files()]


def test_removing_old_versions_leaves_only_what_the_latest_version_needs(spark_lake):
    lake = spark_lake
    """After a compaction, removing old versions at a retention of 0 removes every file only
    older versions named (Delta: VACUUM; Iceberg: every snapshot but the current one expired,
    their files deleted), and the rows stay."""
    src = simple_source()
    for b in range(4):
        commit_batch(lake, "shop", "old", src.schema, ["id"],
                     [[src.upsert({"id": i, "v": f"{b}-{i}"}, 100 * b + i, "c" if b == 0 else "u") for i in range(10)]],
                     b)
    lake.compact("shop", "old")
    live = lake.file_count("shop", "old")
    assert live == 1
    if isinstance(lake, DeltaSink):
        on_disk = lake.format.files_on_disk("shop", "old")
        assert on_disk > live  # the versions before the compaction's files and deletion vectors
        done = lake.remove_old_versions("shop", "old", 0)
        assert done["files_removed"] == on_disk - live, done
        assert lake.format.files_on_disk("shop", "old") == live
    else:
        snapshots = len(lake.load_table("shop", "old").metadata.snapshots)
        assert snapshots >= 5  # four batches and the compaction
        done = lake.remove_old_versions("shop", "old", 0)
        assert done["snapshots_expired"] == snapshots - 1, done
        assert len(lake.load_table("shop", "old").metadata.snapshots) == 1
        assert done["files_removed"] > 0
        data_dir = Path(lake.load_table("shop", "old").metadata.location.removeprefix("file://")) / "data"
        assert sorted(p.name for p in data_dir.rglob("*.parquet")) == sorted(_data_files(lake, "shop", "old"))
    assert values(lake, "shop", "old") == {i: (f"3-{i}",) for i in range(10)}
    again = commit_batch(lake, "shop", "old", src.schema, ["id"], [[src.upsert({"id": 0, "v": "replayed"}, 300, "u")]],
                         3)
    assert (again.upserted, again.skipped) == (0, 1)  # the batch marker outlived the expired snapshots
    assert values(lake, "shop", "old")[0] == ("3-0",)


def test_staged_parts_of_a_failed_batch_are_removed_by_age(driver_lake):
    lake = driver_lake
    """A task's part whose batch never committed (the attempt failed) stays until ``cdc lake
    vacuum`` (``remove_stale``) finds it older than the retention; a commit removes its own."""
    src = simple_source()
    lake.stage("shop", "st", src.schema, ["id"], [src.upsert({"id": 1, "v": "a"}, 1, "c")], batch_id=7, partition=0,
               app="app-1")
    staged = list(Path(lake.staging.uri).rglob("*.parquet"))
    assert len(staged) == 1
    assert lake.staging.remove_stale(1) == 0  # young: kept for the batch's retry
    assert list(Path(lake.staging.uri).rglob("*.parquet")) == staged
    import os
    old = time.time() - 2 * 3600
    os.utime(staged[0].parent, (old, old))
    assert lake.staging.remove_stale(1) == 1
    assert not list(Path(lake.staging.uri).rglob("*.parquet"))


def test_verify_finds_each_difference_of_a_damaged_lake_table_and_skips_soft_deleted_rows(stack, lake_config,
                                                                                           test_db):
    """``cdc verify`` against Delta (``soft_delete`` on) and Iceberg tables equal to the source,
    then damaged behind the job's back: a row gone and a row flagged deleted are missing, a row
    the source lacks is extra, a changed value differs; each with its key."""
    from cdc.verify import verify
    from spark_jobs.sinks.configured import build_sinks
    cfg = lake_config
    cfg.sinks.postgres.enabled = cfg.sinks.mysql.enabled = False
    cfg.sinks.delta.engine = cfg.sinks.iceberg.engine = "spark"
    cfg.sinks.delta.soft_delete = True
    with stack.admin(test_db) as conn, conn.cursor() as cur:
        cur.execute("CREATE TABLE items (id INT PRIMARY KEY, v VARCHAR(20), n DECIMAL(10,2))")
        cur.executemany("INSERT INTO items VALUES (%s, %s, %s)", [(i, f"v{i}", Decimal(i) / 4) for i in range(1, 31)])
        conn.commit()
    tdef, stored = read_source(stack, test_db, "items")
    src = Source(tdef)
    changes = [src.upsert(r, 100 + i, "r") for i, r in enumerate(stored)]
    changes += [src.delete({"id": k}, 500 + k) for k in (31, 32)]  # deleted keys: flagged rows in Delta
    sinks = {name: s for name, s in build_sinks(cfg.sinks) if name in ("delta", "iceberg")}
    for sink in sinks.values():
        commit_batch(sink, test_db, "items", src.schema, ["id"], [changes], 0)
    delta_rows = lake_rows(sinks["delta"], test_db, "items", ["id"])
    assert delta_rows[(31,)]["__cdc_deleted"] is True and len(delta_rows) == 32  # (30 rows, 2 flagged)

    def results() -> dict:
        report = verify(cfg, [f"{test_db}.items"])
        return {r.sink: r for t in report.tables for r in t.results}
    before = results()
    assert set(before) == {"delta", "iceberg"}
    for name, r in before.items():
        assert r.equal and r.source_rows == r.sink_rows == 30, (name, r)
    spark = lake_session()
    d, i = sinks["delta"].engine.spark_name(test_db, "items"), sinks["iceberg"].engine.spark_name(test_db, "items")
    p = P(999)
    spark.sql(f"DELETE FROM {d} WHERE id = 3")
    spark.sql(f"UPDATE {d} SET v = 'changed' WHERE id = 4")
    spark.sql(f"UPDATE {d} SET __cdc_deleted = true WHERE id = 5")
    spark.sql(f"INSERT INTO {d} (id, v, n, __cdc_position, __cdc_deleted) VALUES (99, 'x', 1.00, '{p}', false)")
    spark.sql(f"DELETE FROM {i} WHERE id = 6")
    spark.sql(f"UPDATE {i} SET n = 0 WHERE id = 7")
    spark.sql(f"INSERT INTO {i} (id, v, n, __cdc_position) VALUES (98, 'y', 2.00, '{p}')")
    after = results()
    dr, ir = after["delta"], after["iceberg"]
    assert (dr.missing, dr.extra, dr.differing) == (2, 1, 1), dr
    assert (ir.missing, ir.extra, ir.differing) == (1, 1, 1), ir
    assert not dr.equal and not ir.equal
    found = {(r.sink, s.kind, s.key.get("id")) for r in (dr, ir) for s in r.samples}
    assert found == {("delta", "missing", 3), ("delta", "missing", 5), ("delta", "extra", 99),
                     ("delta", "differs", 4), ("iceberg", "missing", 6), ("iceberg", "extra", 98),
                     ("iceberg", "differs", 7)}, found
    for sink in sinks.values():
        sink.close()


def test_a_driver_without_the_connectors_stops_with_a_clear_error(tmp_path):
    """A driver JVM started without the connectors' jars (``spark-submit`` without ``--jars``):
    the merge job's start-up check names what is missing instead of starting a query whose
    every commit would fail (a JVM of its own: this process's has the jars)."""
    import subprocess
    import sys

    from tests.producer_helpers import ROOT
    code = (
        "from common.config import SinksConfig\n"
        "from spark_jobs import sections\n"
        "from spark_jobs.errors import SinkError\n"
        "from spark_jobs.sinks.configured import lake_conf\n"
        "from spark_jobs.sinks.lake_spark import check_connectors\n"
        "from spark_jobs.spark_session import build_session\n"
        "cfg = SinksConfig.model_validate({'delta': {'enabled': True, 'path': 'unused', 'engine': 'spark'}})\n"
        "conf = {**lake_conf(cfg),\n"
        "        'spark.jars': '', 'spark.driver.extraClassPath': ''}\n"
        "spark = build_session('local[1]', conf=conf)\n"
        "try:\n"
        "    check_connectors(spark)\n"
        "except SinkError as exc:\n"
        "    print('REFUSED:', exc)\n"
        "else:\n"
        "    print('ACCEPTED')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=180)
    assert "REFUSED: the lake sinks need delta-spark and iceberg-spark-runtime" in out.stdout, \
        out.stdout[-2000:] + out.stderr[-3000:]
    assert "--jars" in out.stdout


@pytest.mark.parametrize("kind", LAKE_KINDS)
def test_a_table_changes_engine_between_runs(kind, stack, tmp_path, unique):
    """Both engines write the same tables: rows the spark engine marked deleted (a deletion
    vector, a position delete) stay deleted when the driver engine merges into the table, and
    the other way round; replays are recognised across the switch (the same batch markers)."""
    lake_session()
    name = unique("cat")
    spark_sink, driver_sink = (make_lake_sink(kind, tmp_path, stack.pg_dsn, name, engine=e) for e in ("spark", "driver"))
    src = simple_source()
    try:
        commit_batch(spark_sink, "shop", "sw", src.schema, ["id"],
                     [[src.upsert({"id": i, "v": f"a{i}"}, 10 + i, "c") for i in range(10)]], 0)
        commit_batch(spark_sink, "shop", "sw", src.schema, ["id"],
                     [[src.delete({"id": 3}, 100), src.upsert({"id": 4, "v": "b4"}, 101)]], 1)
        assert _deletes_marked(spark_sink, "shop", "sw") >= 1  # merge-on-read marks, not rewrites
        res = commit_batch(driver_sink, "shop", "sw", src.schema, ["id"],
                           [[src.upsert({"id": 5, "v": "c5"}, 200), src.delete({"id": 6}, 201)]], 2)
        assert (res.upserted, res.deleted) == (1, 1)
        again = commit_batch(driver_sink, "shop", "sw", src.schema, ["id"], [[src.upsert({"id": 4, "v": "x"}, 102)]], 1)
        assert (again.upserted, again.skipped) == (0, 1)  # the spark engine's batch 1, recognised by the driver's
        commit_batch(spark_sink, "shop", "sw", src.schema, ["id"], [[src.upsert({"id": 7, "v": "d7"}, 300)]], 3)
        expected = {i: (f"a{i}",) for i in range(10) if i not in (3, 6)} | {4: ("b4",), 5: ("c5",), 7: ("d7",)}
        assert values(spark_sink, "shop", "sw") == expected
        assert values(driver_sink, "shop", "sw") == expected
        assert [b for _, b in lake_commits(spark_sink, "shop", "sw")] == [0, 1, 2, 3]
    finally:
        spark_sink.close()
        driver_sink.close()
