import pytest

from producer.signals import BadSignal, parse_signal


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
