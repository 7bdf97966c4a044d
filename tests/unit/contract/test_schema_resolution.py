"""Reading records with their table's newest schema (contract.schema_resolution, the
resolving RecordDecoder)."""

from __future__ import annotations

from decimal import Decimal

from contract.codecs.serde import AvroWriter, RecordDecoder
from contract.envelope import envelope_schema
from contract.schema_resolution import describe_change, reader_view, resolvable, row_fields


def _env(fields: list[dict]) -> dict:
    return envelope_schema({"type": "record", "name": "p.d.t.Value", "fields": fields}, "p.d.t.Envelope")


def _dec(v: Decimal, scale: int) -> dict:
    return {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": scale}


V1 = _env([{"name": "id", "type": "int"}, {"name": "v", "type": ["null", "string"], "default": None}])
V2 = _env([{"name": "id", "type": "long"}, {"name": "v", "type": ["null", "string"], "default": None},
           {"name": "extra", "type": ["null", "int"], "default": None}, {"name": "nn", "type": "int"}])
V3 = _env([{"name": "id", "type": "string"}])  # INT -> VARCHAR: not resolvable
SRC = {"version": "1", "connector": "mysql", "name": "p", "ts_ms": 0, "snapshot": "false", "db": "d",
       "table": "t", "server_id": 1, "file": "f", "pos": 4, "row": 0}


def _rec(after: dict) -> dict:
    return {"before": None, "after": after, "source": SRC, "op": "c", "ts_ms": 1, "transaction": None,
            "position": "0" * 30, "snapshot_window": None}


class _Store:
    """The schema store's two lookups, over a dict; ``newest`` is the last one added."""

    def __init__(self, *schemas: dict) -> None:
        self.by_fp = {}
        for s in schemas:
            self.add(s)

    def add(self, schema: dict) -> str:
        fp = AvroWriter(schema).fingerprint
        self.by_fp[fp] = schema
        self.last = fp
        return fp

    def get(self, fp: str):
        return self.by_fp.get(fp)

    def newest(self, fp: str):
        return (self.last, self.by_fp[self.last]) if fp in self.by_fp else None


def test_a_record_written_before_columns_were_added_reads_them_as_null():
    store = _Store(V1, V2)
    dec = RecordDecoder.resolving(store)
    got = dec.decode(AvroWriter(V1).encode(_rec({"id": 7, "v": "x"})))
    assert got["after"] == {"id": 7, "v": "x", "extra": None, "nn": None}
    # A record of the newest schema reads as written.
    assert dec.decode(AvroWriter(V2).encode(_rec({"id": 8, "v": None, "extra": 3, "nn": 4})))["after"] == \
        {"id": 8, "v": None, "extra": 3, "nn": 4}
    assert dec.reader_schema(AvroWriter(V1).fingerprint)[0] == AvroWriter(V2).fingerprint


def test_a_dropped_column_is_not_read():
    v1 = _env([{"name": "id", "type": "long"}, {"name": "v", "type": ["null", "string"], "default": None}])
    got = RecordDecoder.resolving(_Store(V2, v1)).decode(
        AvroWriter(V2).encode(_rec({"id": 1, "v": "a", "extra": 2, "nn": 3})))
    assert got["after"] == {"id": 1, "v": "a"}


def test_a_change_resolution_cannot_express_reads_the_writer_schema():
    store = _Store(V1, V3)
    dec = RecordDecoder.resolving(store)
    got = dec.decode(AvroWriter(V1).encode(_rec({"id": 7, "v": "x"})))
    assert got["after"] == {"id": 7, "v": "x"}
    assert dec.reader_schema(AvroWriter(V1).fingerprint) is None


def test_a_decimal_whose_scale_changed_is_not_misread():
    w = _env([{"name": "id", "type": "int"}, {"name": "d", "type": _dec(Decimal(0), 2)}])
    # (a scale change alone is another writer schema: the fingerprint sees logical types)
    r = _env([{"name": "id", "type": "int"}, {"name": "d", "type": _dec(Decimal(0), 0)}])
    assert not resolvable(w, r) and AvroWriter(w).fingerprint != AvroWriter(r).fingerprint
    got = RecordDecoder.resolving(_Store(w, r)).decode(AvroWriter(w).encode(_rec({"id": 1, "d": Decimal("12.34")})))
    assert got["after"]["d"] == Decimal("12.34")


def test_promotions_and_nullability_are_resolvable():
    assert resolvable(V1, V2)
    assert not resolvable(V2, V1)  # long -> int narrows
    assert not resolvable(V1, V3)


def test_reader_view_makes_fields_without_default_nullable_and_leaves_its_input():
    view = reader_view(V2)
    fields = {f["name"]: f for f in row_fields(view)}
    assert fields["nn"] == {"name": "nn", "type": ["null", "int"], "default": None}
    assert fields["id"]["type"] == ["null", "long"]
    assert {f["name"]: f for f in row_fields(V2)}["nn"] == {"name": "nn", "type": "int"}


def test_describe_change_names_the_columns_added_dropped_and_retyped():
    assert describe_change(V1, V2) == "added: extra, nn; retyped: id"
    assert describe_change(V1, V3) == "dropped: v; retyped: id"
    assert describe_change(V1, V1) is None


def test_key_records_are_read_as_written():
    k1 = {"type": "record", "name": "p.d.t.Key", "fields": [{"name": "id", "type": "int"}]}
    k2 = {"type": "record", "name": "p.d.t.Key", "fields": [{"name": "id", "type": "int"},
                                                              {"name": "b", "type": ["null", "string"], "default": None}]}
    dec = RecordDecoder.resolving(_Store(k1, k2))
    assert dec.decode(AvroWriter(k1).encode({"id": 3})) == {"id": 3}


def _cut(value: dict) -> dict:
    """What RecordDecoder.decode_change gives of a whole record."""
    return {"source": {k: value["source"][k] for k in ("ts_ms", "db", "table")}, "op": value["op"],
            "position": value["position"],
            "snapshot_window": value["snapshot_window"],
            "row": value["before"] if value["op"] == "d" else value["after"]}


def test_decode_change_reads_an_older_record_with_the_newest_schema_too():
    store = _Store(V1, V2)
    dec = RecordDecoder.resolving(store)
    old = AvroWriter(V1).encode(_rec({"id": 7, "v": "x"}))  # needs resolution: decoded whole, then cut
    new = AvroWriter(V2).encode({**_rec({"id": 8, "v": None, "extra": 3, "nn": 4}), "op": "u",
                                 "before": {"id": 8, "v": "y", "extra": None, "nn": 4}})
    gone = AvroWriter(V2).encode({**_rec(None), "op": "d", "before": {"id": 9, "v": None, "extra": None, "nn": 1}})
    assert dec.decode_change(old)["row"] == {"id": 7, "v": "x", "extra": None, "nn": None}
    for data in (new, gone):
        got = dec.decode_change(data)
        assert got == _cut(dec.decode(data))
        assert dec.change_reader_of(data)(data, 10) == got
    assert dec.change_reader_of(old)(old, 10)["row"] == {"id": 7, "v": "x", "extra": None, "nn": None}
