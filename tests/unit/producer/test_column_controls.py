"""The column controls (producer/column_controls.py): Debezium's column.include.list,
column.exclude.list and message.key.columns applied to a table definition."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given
from hypothesis import strategies as st

from common.config import ProducerConfig, SourceConfig
from producer.column_controls import NO_CONTROLS, ColumnControls, parse_message_key_columns
from producer.errors import ColumnControlsError
from producer.table_schema import ColumnDef, TableDef


def _table(names, pk=(), db="shop", name="users") -> TableDef:
    cols = [ColumnDef(name=n, data_type="int", column_type="int", nullable=True, ordinal=i + 1)
            for i, n in enumerate(names)]
    return TableDef(db, name, cols, list(pk))


USERS = _table(["id", "email", "password_hash", "photo"], pk=["id"])


def test_no_rule_gives_the_table_back():
    assert not NO_CONTROLS.active and NO_CONTROLS.resolve(USERS) is USERS


def test_exclude_list_matches_fully_qualified_names_in_full_ignoring_case():
    c = ColumnControls(exclude=[r"shop\.users\.PASSWORD_.*", r".*\.photo"])
    t = c.resolve(USERS)
    assert t.column_names == ["id", "email"] and t.primary_key == ["id"]
    assert c.resolve(_table(["id", "password_hash"], ["id"], name="other")).column_names == ["id", "password_hash"]
    assert ColumnControls(exclude=["users.photo"]).resolve(USERS) is USERS  # (the name in full: db.table.column)


def test_include_list_keeps_only_what_it_matches():
    t = ColumnControls(include=[r"shop\.users\.(id|email)"]).resolve(USERS)
    assert t.column_names == ["id", "email"]


def test_include_and_exclude_are_mutually_exclusive_naming_both_settings():
    with pytest.raises(ColumnControlsError, match="column_include_list and source.column_exclude_list"):
        ColumnControls(include=["a"], exclude=["b"])
    with pytest.raises(ValueError, match="mutually exclusive"):
        SourceConfig(column_include_list=["a"], column_exclude_list=["b"])


def test_a_bad_pattern_names_its_setting():
    with pytest.raises(ColumnControlsError, match="source.column_exclude_list: '\\(' is not a valid"):
        ColumnControls(exclude=["("])
    with pytest.raises(ColumnControlsError, match="source.message_key_columns"):
        ColumnControls(message_key_columns="shop.(:a")


@pytest.mark.parametrize("text", ["shop.t", "shop.t:", ":a", "shop.t:a,,b", "shop.t:a:b"])
def test_malformed_message_key_columns_are_refused(text):
    with pytest.raises(ColumnControlsError, match="source.message_key_columns"):
        parse_message_key_columns(text)


def test_message_key_columns_syntax_and_table_regexes():
    rules = parse_message_key_columns(" shop.users : email ; inv\\.(.*) : a , b ;")
    assert [(r.table.pattern, [p.pattern for p in r.columns]) for r in rules] == [
        ("shop.users", ["email"]), ("inv\\.(.*)", ["a", "b"])]


def test_message_key_columns_key_a_keyless_table_and_override_a_primary_key():
    c = ColumnControls(message_key_columns=r"shop\.users:photo,email;shop\.log:b")
    t = c.resolve(USERS)
    assert t.primary_key == ["email", "photo"]  # in the table's order, as Debezium's KeyMapper
    assert t.column_names == USERS.column_names
    assert c.resolve(_table(["a", "b"], name="log")).primary_key == ["b"]
    assert c.resolve(_table(["a", "b"], ["a"], name="other")).primary_key == ["a"]


def test_an_unknown_key_column_names_the_setting_and_the_table():
    c = ColumnControls(message_key_columns="shop.users:nope")
    with pytest.raises(ColumnControlsError, match=r"source.message_key_columns.*'nope'.*shop.users"):
        c.resolve(USERS)
    with pytest.raises(ColumnControlsError, match="source.key_columns"):
        ColumnControls(key_columns={"shop.log": ["x"]}).resolve(_table(["a"], name="log"))


def test_a_key_column_cannot_be_left_out():
    with pytest.raises(ColumnControlsError, match=r"source.column_exclude_list leaves out key column\(s\) \['id'\]"):
        ColumnControls(exclude=[r"shop\.users\.id"]).resolve(USERS)
    with pytest.raises(ColumnControlsError, match="source.column_include_list"):
        ColumnControls(include=[r".*\.email"], message_key_columns="shop.users:photo").resolve(USERS)


def test_the_older_settings_still_apply():
    c = ColumnControls(exclude_columns={"shop.users": ["photo"]}, key_columns={"shop.log": ["b"]})
    assert c.resolve(USERS).column_names == ["id", "email", "password_hash"]
    assert c.resolve(_table(["a", "b"], name="log")).primary_key == ["b"]


def test_controls_cross_to_the_binlog_reader_process():
    c = ColumnControls(exclude=[r".*\.photo"], message_key_columns="shop.users:email")
    c.resolve(USERS)
    again = pickle.loads(pickle.dumps(c))
    assert again.resolve(USERS).column_names == ["id", "email", "password_hash"]


def test_skipped_operations_setting():
    assert ProducerConfig(skipped_operations="c, T").skipped_operations == ["c", "t"]
    assert ProducerConfig(skipped_operations="none").skipped_operations == []
    with pytest.raises(ValueError):
        ProducerConfig(skipped_operations="r")
    with pytest.raises(ValueError, match="none"):
        ProducerConfig(skipped_operations=["none", "c"])


NAMES = st.lists(st.from_regex(r"[a-z][a-z0-9_]{0,6}", fullmatch=True), min_size=1, max_size=8, unique=True)


@given(NAMES, st.data())
def test_resolving_keeps_order_is_idempotent_and_include_is_exclude_of_the_rest(names, data):
    pk = data.draw(st.lists(st.sampled_from(names), unique=True, max_size=2))
    out = data.draw(st.lists(st.sampled_from(names), unique=True))
    out = [n for n in out if n not in pk]
    table = _table(names, pk)
    by_exclude = ColumnControls(exclude=[rf"shop\.users\.{n}" for n in out])
    kept = [n for n in names if n not in out]
    by_include = ColumnControls(include=[rf"shop\.users\.{n}" for n in kept])  # (empty: everything)
    for c in (by_exclude, by_include) if kept else (by_exclude,):
        t = c.resolve(table)
        assert t.column_names == kept and t.primary_key == pk
        assert c.resolve(t).column_names == t.column_names and c.resolve(t).primary_key == t.primary_key


@given(NAMES, st.data())
def test_message_key_is_the_named_columns_in_table_order(names, data):
    key = data.draw(st.lists(st.sampled_from(names), unique=True, min_size=1))
    c = ColumnControls(message_key_columns=f"shop.users:{','.join(key)}")
    t = c.resolve(_table(names))
    assert t.primary_key == [n for n in names if n in key]
    assert c.resolve(t).primary_key == t.primary_key
