import json

import pytest

from contract.errors import BadSignal
from contract.signals import parse_signal


def test_execute_snapshot_debezium_form():
    s = parse_signal({"id": "s1", "type": "execute-snapshot", "data": '{"data-collections": ["shop.orders", '
                      '"shop\\\\.line_.*"], "type": "incremental", "additional-conditions": [{"data-collection": '
                      '"shop.orders", "filter": "region = \'EU\'"}], "surrogate-key": "order_no"}'})
    assert s.data_collections == ["shop.orders", "shop\\.line_.*"]
    assert s.conditions == {"shop.orders": "region = 'EU'"}
    assert s.surrogate_key == "order_no"


@pytest.mark.parametrize("row,reason", [
    ({"id": "a", "type": "execute-snapshot", "data": "{not json"}, "not valid JSON"),
    ({"id": "a", "type": "explode", "data": "{}"}, "unknown signal type"),
    ({"id": "a", "type": "execute-snapshot", "data": "{}"}, "data-collections"),
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": []}'}, "data-collections"),
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": ["a.b"], "type": "blocking"}'}, "blocking"),
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": ["a.b"], "additional-conditions": "x"}'},
     "additional-conditions"),
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": ["a.b"], "surrogate-key": 5}'},
     "surrogate-key"),
    ({"id": "a", "type": "execute-snapshot", "data": '[1]'}, "JSON object"),
])
def test_bad_signals_name_the_reason(row, reason):
    with pytest.raises(BadSignal) as err:
        parse_signal(row)
    assert reason in str(err.value) and "'a'" in str(err.value)


def test_control_signals_need_no_data():
    for t in ("pause-snapshot", "resume-snapshot", "stop-snapshot", "log"):
        assert parse_signal({"id": "x", "type": t, "data": None}).type == t


def test_regex_typed_into_sql_reads_as_meant():
    # INSERT ... VALUES (..., '{"data-collections": ["shop\\.line_.*"]}') reaches the
    # server with a single backslash: not valid JSON, but what the user meant is clear.
    raw = '{"data-collections": ["shop\\.line_.*", "a\\\\.b", "c\\d+"], "type": "incremental"}'
    assert raw.count("\\") == 4  # shop\.  a\\.  c\d
    s = parse_signal({"id": "r", "type": "execute-snapshot", "data": raw})
    assert s.data_collections == ["shop\\.line_.*", "a\\.b", "c\\d+"]


@pytest.mark.parametrize("raw,expected", [
    ('{"m": "tab\\there"}', {"m": "tab\there"}),                  # valid escapes keep their meaning
    ('{"m": "q\\"x\\\\y\\/z\\u00e9"}', {"m": 'q"x\\y/zé'}),
    ('{"m": "a\\.b", "n": "\\n"}', {"m": "a\\.b", "n": "\n"}),    # mixed: only the invalid one stands for itself
    ('{"m": "end\\\\"}', {"m": "end\\"}),
])
def test_loads_lenient(raw, expected):
    from contract.signals import loads_lenient
    assert loads_lenient(raw) == expected


def test_loads_lenient_still_refuses_broken_json():
    import json

    from contract.signals import loads_lenient
    for raw in ('{"a": ', '{"a": "x\\', "{'a': 1}"):
        with pytest.raises(json.JSONDecodeError):
            loads_lenient(raw)


def test_delete_missing_option():
    from contract.signals import execute_snapshot_data
    row = {"id": "s1", "type": "execute-snapshot", "data": json.dumps(execute_snapshot_data(["a.b"], delete_missing=True))}
    assert parse_signal(row).delete_missing is True
    assert parse_signal({"id": "s2", "type": "execute-snapshot",
                         "data": json.dumps({"data-collections": ["a.b"]})}).delete_missing is False
    with pytest.raises(BadSignal, match="must be true or false"):
        parse_signal({"id": "s3", "type": "execute-snapshot",
                       "data": json.dumps({"data-collections": ["a.b"], "delete-missing": "yes"})})
    with pytest.raises(BadSignal, match="cannot be combined with 'additional-conditions'"):
        parse_signal({"id": "s4", "type": "execute-snapshot", "data": json.dumps(
            execute_snapshot_data(["a.b"], where="x > 1", delete_missing=True))})
