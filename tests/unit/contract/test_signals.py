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
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": ["a.b"], "type": "blocking", '
                                                      '"delete-missing": true}'}, "blocking"),
    ({"id": "a", "type": "execute-snapshot", "data": '{"data-collections": ["a.b"], "type": "full"}'}, "'blocking'"),
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


# -- the Kafka signal channel ------------------------------------------------------------

def test_signal_record_round_trips_through_the_kafka_row():
    from contract.signals import execute_snapshot_data, kafka_signal_row, signal_record
    topic, key, value = signal_record("cdc", "prod-1", "s9", "execute-snapshot", execute_snapshot_data(["a.b"]))
    assert topic == "cdc._signals" and key == b"prod-1"
    assert json.loads(value) == {"id": "s9", "type": "execute-snapshot",
                                 "data": {"data-collections": ["a.b"], "type": "incremental"}}
    sig = parse_signal(kafka_signal_row(value, 7))
    assert (sig.id, sig.type, sig.data_collections) == ("s9", "execute-snapshot", ["a.b"])


def test_kafka_signal_data_may_be_an_object_or_a_string_as_in_the_table():
    from contract.signals import kafka_signal_row
    as_object = b'{"id": "o", "type": "execute-snapshot", "data": {"data-collections": ["a.b"]}}'
    as_string = json.dumps({"id": "s", "type": "execute-snapshot",
                            "data": json.dumps({"data-collections": ["a.b"]})}).encode()
    assert parse_signal(kafka_signal_row(as_object, 0)).data_collections == ["a.b"]
    assert parse_signal(kafka_signal_row(as_string, 0)).data_collections == ["a.b"]
    assert parse_signal(kafka_signal_row(b'{"id": "p", "type": "pause-snapshot"}', 0)).type == "pause-snapshot"


def test_kafka_signal_without_an_id_is_named_by_its_offset():
    from contract.signals import kafka_signal_row
    assert kafka_signal_row(b'{"type": "log", "data": {"message": "hi"}}', 42)["id"] == "kafka-42"
    assert kafka_signal_row(b'{"id": "", "type": "log"}', 43)["id"] == "kafka-43"
    assert kafka_signal_row(b'{"id": 17, "type": "log"}', 44)["id"] == "17"


@pytest.mark.parametrize("value,sid,reason", [
    (None, "kafka-5", "has no value"),
    (b"", "kafka-5", "has no value"),
    (b"execute-snapshot shop.t", "kafka-5", "is not JSON"),
    (b"\xff\xfe\x00", "kafka-5", "not UTF-8"),
    (b'["execute-snapshot"]', "kafka-5", "holds a JSON list"),
    (b'{"id": "w", "type": "snapshot-window-open", "data": "{}"}', "w", "window marker"),
    (b'{"id": "w", "type": "Snapshot-Window-Close"}', "w", "window marker"),
])
def test_kafka_signal_values_that_are_no_signal_name_the_reason(value, sid, reason):
    from contract.signals import kafka_signal_row
    with pytest.raises(BadSignal) as err:
        kafka_signal_row(value, 5)
    assert err.value.signal_id == sid and reason in err.value.reason
    assert "JSON object" in err.value.reason or "window marker" in err.value.reason


@pytest.mark.parametrize("value,reason", [
    (b'{"id": "k", "type": "explode"}', "unknown signal type"),
    (b'{"id": "k", "type": 5}', "unknown signal type"),
    (b'{"id": "k"}', "unknown signal type"),
    (b'{"id": "k", "type": "execute-snapshot"}', "data-collections"),
    (b'{"id": "k", "type": "execute-snapshot", "data": [1]}', "JSON object"),
    (b'{"id": "k", "type": "execute-snapshot", "data": "{broken"}', "not valid JSON"),
])
def test_kafka_signals_are_checked_as_table_rows_are(value, reason):
    from contract.signals import kafka_signal_row
    with pytest.raises(BadSignal) as err:
        parse_signal(kafka_signal_row(value, 0))
    assert err.value.signal_id == "k" and reason in err.value.reason


def test_window_markers_are_told_from_user_signals():
    from contract.signals import is_window_marker
    assert is_window_marker({"type": "snapshot-window-open"}) and is_window_marker({"type": " SNAPSHOT-WINDOW-CLOSE"})
    assert not is_window_marker({"type": "execute-snapshot"}) and not is_window_marker({})
    assert not is_window_marker({"type": 5})
