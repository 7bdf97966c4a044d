"""Debezium's column mappers (producer/column_mappers.py): masks, hashes, truncations and the
source type parameters, as values, schemas, settings and through the column controls."""

from __future__ import annotations

import hashlib
import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.config import SourceConfig
from producer.column_controls import ColumnControls
from producer.column_mappers import (
    ColumnMappers,
    declared_length,
    hash_value,
    java_serialized,
    mapped_columns,
    truncate_value,
)
from producer.errors import ColumnControlsError
from producer.events.builder import table_events
from producer.table_schema import ColumnDef, TableDef


def _col(name, data_type, column_type, ordinal, nullable=True) -> ColumnDef:
    return ColumnDef(name=name, data_type=data_type, column_type=column_type, nullable=nullable, ordinal=ordinal)


PEOPLE = TableDef("shop", "people", [
    _col("id", "int", "int(11)", 1, nullable=False), _col("email", "varchar", "varchar(40)", 2),
    _col("name", "varchar", "varchar(20)", 3), _col("bio", "text", "text", 4), _col("code", "char", "char(3)", 5),
    _col("colour", "enum", "enum('red','green')", 6), _col("n", "int", "int(11)", 7),
    _col("amount", "decimal", "decimal(10,2)", 8), _col("bin", "varbinary", "varbinary(10)", 9)], ["id"])


# -- the value transforms --------------------------------------------------------------------

def test_hash_v1_is_the_digest_of_the_salt_and_the_java_serialised_string():
    # (the digests Java 17 gives: MessageDigest SHA-256, salt "s", ObjectOutputStream.writeObject)
    assert hash_value("hello", "SHA-256", "s") == "08af04fdb237718aa62074cd29e2376f6621db3c3b230832674bdfa88970f616"
    assert hash_value("h\u00e9\0\U0001F600x", "sha-256", "s") == \
        "a08cd35cd2f715eb4b60931c03900c724bbcb8b4b6d10a3b175fef1ef301e6c4"
    assert java_serialized("ab") == b"\xac\xed\x00\x05\x74\x00\x02ab"
    assert java_serialized("\0") == b"\xac\xed\x00\x05\x74\x00\x02\xc0\x80"
    assert java_serialized("x" * 70000)[:13] == b"\xac\xed\x00\x05\x7c" + (70000).to_bytes(8, "big")
    assert hash_value(None, "MD5", "s") is None


@given(st.text(), st.text(max_size=8))
def test_hash_v2_is_the_digest_of_the_salt_and_the_utf8_bytes(value, salt):
    assert hash_value(value.encode("utf-8", "replace").decode(), "SHA-512", salt, v2=True) == \
        hashlib.sha512(salt.encode() + value.encode("utf-8", "replace").decode().encode()).hexdigest()


@given(st.text(), st.integers(min_value=0, max_value=12))
def test_truncation_counts_java_chars_and_never_splits_a_character(value, n):
    out = truncate_value(value, n)
    assert value.startswith(out)
    assert len(out.encode("utf-16-le")) // 2 <= n
    if len(value.encode("utf-16-le")) // 2 <= n:
        assert out == value
    else:  # (as many characters as fit)
        assert len((value[:len(out) + 1]).encode("utf-16-le")) // 2 > n


def test_truncation_of_bytes_and_of_other_values():
    assert truncate_value(b"\x01\x02\x03", 2) == b"\x01\x02" and truncate_value(7, 1) == 7
    assert truncate_value("\U0001F600\U0001F600abc", 4) == "\U0001F600\U0001F600"


def test_declared_length_as_debeziums_ddl_parser():
    cols = {c.name: c for c in PEOPLE.columns}
    assert [declared_length(cols[n]) for n in ("email", "bio", "code", "colour", "amount")] == [40, -1, 3, 1, 10]
    assert declared_length(_col("s", "set", "set('a','b','c')", 1)) == 5


# -- through the column controls: values and schemas -----------------------------------------

def fastavro_body(schema, record) -> bytes:
    import io

    import fastavro
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _controls(**mappers) -> ColumnControls:
    return ColumnControls(mappers=ColumnMappers(**mappers))


def test_masks_hashes_and_truncations_in_the_events_values_and_schema():
    c = _controls(mask={5: [r"shop\.people\.(email|colour|n)"]}, truncate={"4": "shop.people.bio,shop.people.bin",
                                                                          5: ["shop.people.code"]},
                  hashes=[{"algorithm": "SHA-256", "salt": "s", "columns": ["shop.people.name"]}],
                  propagate=["shop.people.amount", "shop.people.id"])
    te = table_events("p", PEOPLE, c)
    assert te.encoder is None  # (the fast encoders step aside)
    row = {"id": 1, "email": None, "name": "hello", "bio": "abcdef", "code": "abc", "colour": "red", "n": 3,
           "amount": None, "bin": b"123456"}
    out = te.converter.convert(row)
    assert out["email"] == "*****" and out["colour"] == "*****" and out["n"] == 3  # (an INT is not masked)
    assert out["name"] == hash_value("hello", "SHA-256", "s")[:20]  # (cut to VARCHAR(20))
    assert out["bio"] == "abcd" and out["code"] == "abc" and out["bin"] == b"1234"
    assert te.converter.convert_key(row) == {"id": 1}
    types = {f["name"]: f["type"] for f in te.row_schema["fields"]}
    assert types["email"] == ["null", {"type": "string", "connect.parameters": {"masked": "true"}}]
    assert types["n"][1]["connect.parameters"] == {"masked": "true"}
    assert types["bio"][1]["connect.parameters"] == {"truncateLength": "4"}
    assert types["code"] == ["null", "string"]  # (CHAR(3) cannot be longer than 5: no truncation)
    assert types["colour"][1]["connect.parameters"] == {"allowed": "red,green", "masked": "true"}
    assert types["amount"][1]["connect.parameters"]["__debezium.source.column.type"] == "DECIMAL"
    assert {k: v for k, v in types["amount"][1]["connect.parameters"].items() if k.startswith("__")} == {
        "__debezium.source.column.type": "DECIMAL", "__debezium.source.column.length": "10",
        "__debezium.source.column.scale": "2", "__debezium.source.column.name": "amount"}
    assert types["id"]["connect.parameters"]["__debezium.source.column.name"] == "id"
    assert te.key_schema["fields"][0]["type"] == "int"  # (the key's schema has no parameters, as Debezium's)
    assert pickle.loads(pickle.dumps(te.table)).fingerprint() == te.table.fingerprint() != PEOPLE.fingerprint()


def test_first_rule_wins_in_debeziums_order():
    c = _controls(mask={3: ["shop.people.bio"]}, truncate={2: ["shop.people.bio"]})
    assert table_events("p", PEOPLE, c).converter.convert_key({"id": 1}) == {"id": 1}
    bio = c.resolve(PEOPLE).column("bio")
    assert bio.mapping.kind == "truncate"  # (truncations before masks, as ColumnMappers.create)
    hashes = _controls(hashes=[{"algorithm": "MD5", "salt": "a", "columns": "shop.people.bio", "strategy": "v2"},
                               {"algorithm": "MD5", "salt": "b", "columns": "shop.people.bio"}])
    assert hashes.resolve(PEOPLE).column("bio").mapping.v2 is False  # (v1 before v2)


def test_datatype_propagation_matches_db_table_type():
    c = _controls(propagate_types=[r"shop\.people\.VARCHAR"])
    t = c.resolve(PEOPLE)
    assert [col.name for col in t.columns if col.mapping] == ["email", "name"]
    te = table_events("p", PEOPLE, c)  # (parameters only: the fast encoders keep the table, same bytes)
    assert te.encoder is not None
    row = {"id": 1, "email": "a@b", "name": None, "bio": "x", "code": "abc", "colour": "red", "n": 3,
           "amount": None, "bin": b"1"}
    values = tuple(row[n] for n in te.table.column_names)
    assert te.encoder.row_tuple(values) == fastavro_body(te.row_schema, te.converter.convert(row))


def test_unmapped_tables_are_untouched():
    c = _controls(mask={5: ["other.t.c"]})
    assert c.resolve(PEOPLE) is PEOPLE and mapped_columns(c.resolve(PEOPLE).columns) == []
    assert table_events("p", PEOPLE, c).encoder is not None


# -- settings: refused at start, naming the setting ------------------------------------------

@pytest.mark.parametrize("mappers, message", [
    ({"mask": {5: ["shop.people.(email"]}}, "source.column_mask_with_chars: 'shop.people.(email' is not a valid"),
    ({"mask": {"-1": ["x"]}}, "source.column_mask_with_chars: '-1' is not a number"),
    ({"truncate": {"four": "x"}}, "source.column_truncate_to_chars: 'four' is not a number"),
    ({"hashes": [{"algorithm": "SHA-999", "salt": "s", "columns": ["x"]}]}, "source.column_mask_hash[0].algorithm"),
    ({"hashes": [{"algorithm": "MD5", "salt": "s", "columns": ["x"], "strategy": "v3"}]}, "[0].strategy"),
    ({"hashes": [{"algorithm": "MD5", "salt": "s"}]}, "source.column_mask_hash[0].columns"),
    ({"hashes": [{"algorithm": "MD5", "salt": "s", "columns": "x", "colums": 1}]}, "unknown key(s) ['colums']"),
    ({"propagate": ["("]}, "source.column_propagate_source_type"),
])
def test_bad_settings_are_refused_naming_the_setting(mappers, message):
    with pytest.raises(ColumnControlsError, match=None) as err:
        ColumnMappers(**mappers)
    assert message in str(err.value)


def test_a_key_column_is_never_masked():
    with pytest.raises(ColumnControlsError, match="source.column_mask_with_chars would change the values of key "
                                                  "column 'id'"):
        _controls(mask={3: ["shop.people.id"]}).resolve(TableDef("shop", "people", [
            _col("id", "varchar", "varchar(10)", 1, nullable=False)], ["id"]))


def test_settings_from_cdc_yaml():
    source = SourceConfig(column_mask_with_chars={12: "shop.people.email"},
                          column_truncate_to_chars={"4": ["shop.people.bio"]},
                          column_mask_hash=[{"algorithm": "SHA-256", "salt": "x", "columns": "shop.people.name"}],
                          column_propagate_source_type="shop.people.amount,shop.people.id")
    c = ColumnControls.from_config(source)
    t = c.resolve(PEOPLE)
    assert t.column("email").mapping.mask == "*" * 12 and t.column("bio").mapping.length == 4
    assert t.column("name").mapping.algorithm == "SHA-256" and t.column("id").mapping.kind == "propagate"
    assert [name for name, _ in mapped_columns(t.columns)] == ["email", "name", "bio"]


def test_declared_length_of_a_binlog_table_map_column_is_in_characters():
    # (the table map gives VARCHAR(20) in utf8mb4 as 80 bytes, INT without its display width)
    from producer.binlog.table_map import char_length
    assert char_length(80, "utf8mb4_general_ci") == 20 and char_length(80, "utf8mb3_bin") == 26
    assert char_length(80, "latin1_swedish_ci") == 80 and char_length(80, None) is None
    assert declared_length(ColumnDef("c", "varchar", "varchar(80)", True, 1, character_set="utf8",
                                     char_max_length=20)) == 20
    assert declared_length(ColumnDef("c", "varchar", "varchar(20)", True, 1, character_set="utf8mb4",
                                     char_max_length=20)) == 20
    assert declared_length(_col("i", "int", "int", 1)) == 11
    assert declared_length(_col("i", "int", "int unsigned", 1)) == 10


def test_a_masked_empty_set_is_the_mask():
    t = TableDef("shop", "s", [_col("id", "int", "int(11)", 1, nullable=False),
                               _col("tags", "set", "set('a','b')", 2)], ["id"])
    te = table_events("p", t, _controls(mask={3: ["shop.s.tags"]}))
    assert te.converter.convert({"id": 1, "tags": None}, {"tags": "empty set"})["tags"] == "***"
    assert table_events("p", t).converter.convert({"id": 1, "tags": None}, {"tags": "empty set"})["tags"] == ""


# -- the compiled paths and masked, hashed, truncated columns ---------------------------------

def test_the_binlog_image_and_select_row_encoders_take_a_masked_table():
    from producer.events.builder import StreamEncoding
    from producer.events.select_encoder import SelectRowEncoder
    from tests.unit.producer.events.test_image_encoder import BENCH, ROWS, _table, values_way
    table = _table(BENCH, [True] * len(BENCH), [0], name="u")
    controls = _controls(mask={3: ["db.u.name"]})
    masked = StreamEncoding("cdc", controls, frozenset()).image_encoder(table, BENCH)
    assert masked is not None  # (the binlog image encoder and _binlog_images.c: the mapper's values)
    data = b"".join(ROWS)
    assert masked.encode(data, False).bodies == values_way(BENCH, table_events("cdc", table, controls), data, False)
    source_types = StreamEncoding("cdc", _controls(propagate=["db.u.name"]), frozenset())
    assert source_types.image_encoder(table, BENCH) is not None  # (parameters only: same bytes)
    te = table_events("cdc", table, _controls(truncate={2: ["db.u.note"]}), binlog=False)
    assert te.encoder is None  # (the row encoder, from values: a NULL as NULL)
    SelectRowEncoder(te, [(None, None)] * len(BENCH))  # (and _select_rows.c: test_select_encoder.py's tables)


def test_source_type_parameters_keep_the_image_encoders_bytes():
    from producer.events.image_encoder import BinlogImageEncoder
    from tests.unit.producer.events.test_image_encoder import BENCH, ROWS, _table, values_way
    table = _table(BENCH, [i != 0 for i in range(len(BENCH))], [0])
    te = table_events("cdc", table, _controls(propagate=[r"db\.t\..*"]))
    assert te.row_schema["fields"][1]["type"][1]["connect.parameters"]["__debezium.source.column.name"] == "name"
    data = b"".join(ROWS)
    assert BinlogImageEncoder(BENCH, te).encode(data, False).bodies == values_way(BENCH, te, data, False)


def test_struct_columns_carry_their_parameters_on_the_field_and_bits_are_not_cut():
    from contract.codecs.connect_json import connect_schema
    t = TableDef("shop", "g", [_col("id", "int", "int(11)", 1, nullable=False), _col("p", "point", "point", 2),
                               _col("q", "point", "point", 3), _col("b", "bit", "bit(64)", 4),
                               _col("y", "year", "year", 5)], ["id"])
    te = table_events("p", t, _controls(truncate={2: [r"shop\.g\.(p|b)"]}, propagate=[r"shop\.g\.(q|y)"]))
    row = connect_schema(te.row_schema)["fields"]
    by = {f["field"]: f for f in row}
    assert by["p"]["parameters"] == {"truncateLength": "2"} and by["p"]["name"] == "io.debezium.data.geometry.Point"
    assert by["q"]["parameters"] == {"__debezium.source.column.type": "POINT", "__debezium.source.column.name": "q"}
    assert by["b"]["parameters"]["truncateLength"] == "2"
    assert te.converter.convert({"id": 1, "p": None, "q": None, "b": b"\xff" * 8, "y": 2000})["b"] == b"\xff" * 8
    assert by["y"]["parameters"]["__debezium.source.column.length"] == "4"


def test_a_bad_setting_in_cdc_yaml_stops_the_start_naming_it():
    from common.errors import ConfigError
    source = SourceConfig(column_mask_hash=[{"algorithm": "SHA-999", "salt": "x", "columns": "a.b.c"}])
    with pytest.raises(ConfigError, match=r"source\.column_mask_hash\[0\]\.algorithm: 'SHA-999'"):
        ColumnControls.from_config(source)  # (ProducerApp and cdc verify build them first)
    with pytest.raises(ConfigError, match=r"source\.column_truncate_to_chars: '2x' is not a number .*"
                                          r"column\.truncate\.to\.N\.chars"):
        ColumnControls.from_config(SourceConfig(column_truncate_to_chars={"2x": "a.b.c"}))
