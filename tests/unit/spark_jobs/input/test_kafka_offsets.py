"""The pure planning parts of the cdc-kafka source: options, offset JSON, rate limit, ranges."""

from __future__ import annotations

import json
import pickle

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from pyspark.sql.datasource import InputPartition

from spark_jobs.errors import KafkaSourceOptionError
from spark_jobs.input.kafka_offsets import (
    EARLIEST,
    log_end_from_json,
    offsets_from_json,
    offsets_to_json,
    plan_end_offsets,
    resolve_starting_offsets,
    spread_limit,
    wake_from_json,
)
from spark_jobs.input.kafka_source import CdcKafkaStreamReader, KafkaRange, parse_options, parse_starting_offsets, plan_ranges

BS = {"kafka.bootstrap.servers": "127.0.0.1:9092"}

topics = st.sampled_from(["a", "b.c", "cdc.shop.orders", "x-y_z"])
tps = st.tuples(topics, st.integers(0, 5))


# ---- options ---------------------------------------------------------------------------

def test_options_minimal_and_defaults():
    o = parse_options({**BS, "subscribe": "a, b ,a"})
    assert o.bootstrap_servers == "127.0.0.1:9092"
    assert o.topics == ("a", "b") and o.pattern is None
    assert o.starting == "latest" and o.max_offsets_per_trigger is None
    assert o.client_config == {"isolation.level": "read_committed"}
    assert o.poll_timeout_s == 120.0


def test_options_pass_kafka_settings_through_and_ignore_case():
    o = parse_options({"Kafka.Bootstrap.Servers": "h:1", "SUBSCRIBEPATTERN": r"cdc\..*",
                       "kafka.security.protocol": "SSL", "kafka.isolation.level": "read_uncommitted",
                       "MaxOffsetsPerTrigger": "500", "startingOffsets": "EARLIEST",
                       "kafkaConsumer.pollTimeoutMs": "2500"})
    assert o.bootstrap_servers == "h:1"
    assert o.client_config == {"security.protocol": "SSL", "isolation.level": "read_uncommitted"}
    assert o.max_offsets_per_trigger == 500 and o.starting == "earliest" and o.poll_timeout_s == 2.5


def test_secrets_come_by_reference_and_never_show(tmp_path, monkeypatch):
    (tmp_path / "pw").write_text("file-secret\n")
    monkeypatch.setenv("CDC_TEST_KEY_PASSWORD", "env-secret")
    o = parse_options({**BS, "subscribe": "a", "kafka.sasl.password": f"${{file:{tmp_path / 'pw'}}}",
                       "kafka.ssl.key.password": "${env:CDC_TEST_KEY_PASSWORD}"})
    assert o.client_config["sasl.password"] == "file-secret"
    assert o.client_config["ssl.key.password"] == "env-secret"
    assert "secret" not in repr(o)
    with pytest.raises(KafkaSourceOptionError, match="kafka.sasl.password|sasl.password refers to the environment"):
        parse_options({**BS, "subscribe": "a", "kafka.sasl.password": "${env:CDC_TEST_UNSET_VARIABLE}"})


def test_the_merge_job_passes_kafka_secrets_by_reference(tmp_path):
    from common.config import CDCConfig
    from common.kafka.security import EXPORTED, export_secret_references
    cfg = CDCConfig()
    sec = cfg.kafka.security
    sec.protocol, sec.sasl_username, sec.sasl_password = "SASL_SSL", "cdc", "inline-secret"
    environ: dict = {}
    refs = export_secret_references(sec, environ=environ)
    assert refs == {"sasl.password": "${env:CDC_KAFKA_SASL_PASSWORD}"}
    assert environ == {EXPORTED["sasl.password"]: "inline-secret"}
    (tmp_path / "pw").write_text("filed")
    sec.sasl_password = ""
    sec.sasl_password_file = str(tmp_path / "pw")
    assert export_secret_references(sec, environ={}) == {"sasl.password": f"${{file:{tmp_path / 'pw'}}}"}
    options = {f"kafka.{k}": v for k, v in cfg.kafka.client_settings(secrets=refs).items()}
    assert "inline-secret" not in str(options) and "filed" not in str(options)


@pytest.mark.parametrize("kafka_source", ["python", "jvm"])
def test_the_merge_streams_options_hold_no_secret(tmp_path, monkeypatch, kafka_source):
    """What Spark prints in the query plan: the source's options."""
    from common.config import CDCConfig
    from spark_jobs.planning.merge_tasks import MergeTasks
    from spark_jobs.sharding.routes import Router
    monkeypatch.setenv("CDC_KAFKA_SASL_PASSWORD", "")  # (restored afterwards: the job exports it)
    (tmp_path / "pw").write_text("plan-secret")
    cfg = CDCConfig()
    cfg.spark.kafka_source = kafka_source
    sec = cfg.kafka.security
    sec.protocol, sec.sasl_username, sec.sasl_password_file = "SASL_SSL", "cdc", str(tmp_path / "pw")
    tasks = MergeTasks(cfg, "cdc", cfg.kafka.client_settings(), tmp_path / "q", Router.from_config(cfg), [])
    options = tasks.source_options()
    assert "plan-secret" not in str(options)
    if kafka_source == "python":
        assert options["kafka.sasl.password"] == f"${{file:{tmp_path / 'pw'}}}"
        assert parse_options(options).client_config["sasl.password"] == "plan-secret"
    else:
        assert "kafka.sasl.password" not in options and "${dir:" in options["kafka.sasl.jaas.config"]


@pytest.mark.parametrize("options, message", [
    ({"subscribe": "a"}, "kafka.bootstrap.servers is required"),
    ({"kafka.bootstrap.servers": " ", "subscribe": "a"}, "kafka.bootstrap.servers is required"),
    ({**BS}, "one of the options subscribe or subscribePattern"),
    ({**BS, "subscribe": "a", "subscribePattern": "a.*"}, "exclusive"),
    ({**BS, "subscribe": " , "}, "names no topic"),
    ({**BS, "subscribePattern": "("}, "not a valid regular expression"),
    ({**BS, "assign": '{"a": [0]}'}, "assign is not supported"),
    ({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "0"}, "positive integer"),
    ({**BS, "subscribe": "a", "maxOffsetsPerTrigger": "ten"}, "positive integer"),
    ({**BS, "subscribe": "a", "kafka.auto.offset.reset": "earliest"}, "use startingOffsets"),
    ({**BS, "subscribe": "a", "kafka.enable.auto.commit": "true"}, "never commits"),
    ({**BS, "subscribe": "a", "startingOffsets": '{"b": {"0": 1}}'}, "does not subscribe"),
    ({**BS, "subscribePattern": r"cdc\..*", "startingOffsets": '{"other": {"0": 1}}'}, "does not subscribe"),
    ({**BS, "subscribePattern": r"cdc\..*", "wakeTopics": "other._schemas, cdc.shop.t"}, "wakeTopics names topics"),
])
def test_options_errors_are_clear(options, message):
    with pytest.raises(KafkaSourceOptionError, match=message):
        parse_options(options)


def test_wake_topics_are_kept_apart_from_the_offsets_read():
    o = parse_options({**BS, "subscribePattern": r"cdc\.[^_].*", "wakeTopics": " cdc_w._schemas,cdc_x._schemas ,"})
    assert o.wake_topics == ("cdc_w._schemas", "cdc_x._schemas")
    assert parse_options({**BS, "subscribe": "a"}).wake_topics == ()
    doc = offsets_to_json({("cdc.s.t", 0): 5}, wake={("cdc_w._schemas", 0): 3, ("a|b", 1): 2})
    assert json.loads(json.dumps(doc)) == doc
    assert offsets_from_json(doc) == {("cdc.s.t", 0): 5}  # the wake topics are not read
    assert wake_from_json(doc) == {("cdc_w._schemas", 0): 3, ("a|b", 1): 2}
    assert wake_from_json(offsets_to_json({("cdc.s.t", 0): 5})) == {} and "@wake" not in offsets_to_json({})
    assert plan_ranges(offsets_from_json(doc), offsets_from_json(doc)) == []


def test_pattern_matches_whole_names_and_skips_internal_topics():
    o = parse_options({**BS, "subscribePattern": r"cdc\.shop\..*"})
    assert o.subscribed("cdc.shop.orders")
    assert not o.subscribed("xcdc.shop.orders") and not o.subscribed("cdc.shopping")
    assert not parse_options({**BS, "subscribePattern": ".*"}).subscribed("__consumer_offsets")
    assert parse_options({**BS, "subscribePattern": "cdc"}).subscribed("cdc")
    assert not parse_options({**BS, "subscribePattern": "cdc"}).subscribed("cdc2")


# ---- startingOffsets and offset JSON ---------------------------------------------------------

def test_starting_offsets_words_and_json():
    assert parse_starting_offsets("earliest") == "earliest"
    assert parse_starting_offsets(" Latest ") == "latest"
    assert parse_starting_offsets('{"t": {"0": 23, "1": -2, "2": -1}, "u": {}}') == {
        ("t", 0): 23, ("t", 1): -2, ("t", 2): -1}


@pytest.mark.parametrize("text", ["newest", "", "[1]", '{"t": [0]}', '{"t": {"x": 1}}', '{"t": {"-1": 1}}',
                                  '{"t": {"0": -3}}', '{"t": {"0": 1.5}}', '{"t": {"0": true}}', '{"t": {"0": "1"}}',
                                  '{"": {"0": 1}}', '{"t": {"01": 1}}'])
def test_starting_offsets_rejects(text):
    with pytest.raises(KafkaSourceOptionError):
        parse_starting_offsets(text)


@given(st.dictionaries(tps, st.integers(0, 2**62)))
def test_offsets_json_round_trip_and_canonical(offsets):
    doc = offsets_to_json(offsets)
    assert offsets_from_json(json.loads(json.dumps(doc))) == offsets
    shuffled = dict(sorted(offsets.items(), key=lambda kv: hash(kv[0]) % 7))
    assert json.dumps(offsets_to_json(shuffled)) == json.dumps(doc)
    assert list(doc) == sorted(doc)
    for parts in doc.values():
        assert [int(p) for p in parts] == sorted(int(p) for p in parts)


def test_offsets_from_json_rejects_negatives():
    assert offsets_from_json(None) == {} and offsets_from_json({}) == {}
    with pytest.raises(KafkaSourceOptionError):
        offsets_from_json({"t": {"0": -2}})


def test_resolve_starting_offsets():
    latest = {("t", 0): (0, 10), ("t", 1): (5, 8), ("t", 2): (0, 0)}
    assert resolve_starting_offsets("earliest", latest) == {("t", 0): 0, ("t", 1): 5, ("t", 2): 0}
    assert resolve_starting_offsets("latest", latest) == {("t", 0): 10, ("t", 1): 8, ("t", 2): 0}
    spec = {("t", 0): 4, ("t", 1): -1}  # t/2 left out: earliest
    assert resolve_starting_offsets(spec, latest) == {("t", 0): 4, ("t", 1): 8, ("t", 2): 0}
    # Out-of-range JSON offsets are clamped into [low, end], as a consumer would be.
    assert resolve_starting_offsets({("t", 0): 99, ("t", 1): 1}, latest) == {("t", 0): 10, ("t", 1): 5, ("t", 2): 0}


# ---- the rate limit --------------------------------------------------------------------------

backlog_maps = st.dictionaries(tps, st.integers(0, 10_000), max_size=12)


@given(backlog_maps, st.integers(1, 20_000))
def test_spread_limit_properties(backlogs, limit):
    shares = spread_limit(backlogs, limit)
    assert shares.keys() == backlogs.keys()
    pending = [k for k, b in backlogs.items() if b > 0]
    for k, b in backlogs.items():
        assert 0 <= shares[k] <= b
        assert (shares[k] >= 1) == (b > 0)  # nobody with a backlog starves
    total = sum(backlogs.values())
    assert sum(shares.values()) == min(total, max(limit, len(pending)))
    if total > limit and limit > len(pending):
        # In proportion to the backlog beyond the guaranteed first offset, within 1.
        rest, wsum = limit - len(pending), sum(backlogs[k] - 1 for k in pending)
        for k in pending:
            assert abs(shares[k] - (1 + rest * (backlogs[k] - 1) / wsum)) < 1
    assert spread_limit(backlogs, limit) == shares  # deterministic


@given(backlog_maps)
def test_spread_limit_without_limit_takes_everything(backlogs):
    assert spread_limit(backlogs, None) == backlogs


def test_spread_limit_examples():
    assert spread_limit({"a": 900, "b": 90, "c": 10}, 100) == {"a": 88, "b": 10, "c": 2}
    assert spread_limit({"a": 100, "b": 1, "c": 1}, 3) == {"a": 1, "b": 1, "c": 1}
    assert spread_limit({"a": 100, "b": 1, "c": 1}, 2) == {"a": 1, "b": 1, "c": 1}  # >= 1 each beats the cap
    assert spread_limit({"a": 5, "b": 0}, 100) == {"a": 5, "b": 0}
    with pytest.raises(ValueError):
        spread_limit({"a": 1}, 0)


# ---- end offsets and ranges ----------------------------------------------------------------

@st.composite
def planning_cases(draw):
    parts = draw(st.lists(tps, unique=True, max_size=8))
    start, latest = {}, {}
    for tp in parts:
        low = draw(st.integers(0, 50))
        end = low + draw(st.integers(0, 3000))
        latest[tp] = (low, end)
        if draw(st.booleans()):  # known partition (else new: starts at earliest)
            start[tp] = draw(st.integers(low, end))
    gone = draw(st.dictionaries(st.tuples(st.just("gone"), st.integers(0, 3)), st.integers(0, 100), max_size=2))
    start.update(gone)
    return start, latest, draw(st.one_of(st.none(), st.integers(20, 2000)))


@settings(max_examples=200, deadline=None)
@given(planning_cases())
@example(({("a", 0): 0, ("a", 1): 10}, {("a", 0): (0, 3000), ("a", 1): (0, 12), ("b", 0): (5, 2000)}, 20))
def test_repeated_planning_reaches_the_end_exactly_within_the_cap(case):
    start, latest, cap = case
    expected = {**start, **{tp: end for tp, (_, end) in latest.items()}}
    current = dict(start)
    for _ in range(2_000):  # 8 partitions x 3,050 offsets / 20 per batch < 2,000
        end = plan_end_offsets(current, latest, cap)
        for tp in current:
            assert end[tp] >= current[tp]  # never backwards
        for tp, (low, hi) in latest.items():
            assert end[tp] <= max(hi, current.get(tp, low))
        advanced = sum(end[tp] - current.get(tp, latest[tp][0] if tp in latest else 0) for tp in end)
        if cap is not None:
            assert advanced <= max(cap, len(latest))
        ranges = plan_ranges(current, end)
        assert sum(r.end - max(r.start, latest[(r.topic, r.partition)][0]) for r in ranges) == advanced
        if end == current:
            break
        current = end
    else:
        pytest.fail("the plan did not converge")
    assert current == expected


def test_plan_end_offsets_examples():
    latest = {("t", 0): (0, 100), ("t", 1): (0, 10), ("n", 0): (3, 7)}
    start = {("t", 0): 40, ("t", 1): 10, ("old", 0): 9}
    # New partition n/0 starts at its low offset; gone partition old/0 keeps its offset.
    assert plan_end_offsets(start, latest) == {("t", 0): 100, ("t", 1): 10, ("n", 0): 7, ("old", 0): 9}
    assert plan_end_offsets(start, latest, 10) == {("t", 0): 49, ("t", 1): 10, ("n", 0): 4, ("old", 0): 9}
    # An end below the start (a recreated topic) does not move the partition backwards.
    assert plan_end_offsets({("t", 0): 500}, {("t", 0): (0, 20)}) == {("t", 0): 500}
    # A start below the low offset (records deleted) reads from the low offset.
    assert plan_end_offsets({("t", 0): 2}, {("t", 0): (10, 30)}, 5) == {("t", 0): 15}


def test_plan_ranges():
    start = {("t", 0): 5, ("t", 1): 7, ("t", 2): 3}
    end = {("t", 0): 9, ("t", 1): 7, ("t", 2): 1, ("n", 0): 4, ("n", 1): 0}
    assert plan_ranges(start, end) == [KafkaRange("n", 0, EARLIEST, 4), KafkaRange("t", 0, 5, 9)]
    assert plan_ranges(end, end) == []


def test_ranges_and_reader_pickle():
    r = KafkaRange("t", 1, 2, 3)
    assert isinstance(r, InputPartition) and pickle.loads(pickle.dumps(r)) == r
    reader = CdcKafkaStreamReader(parse_options({**BS, "subscribe": "t", "maxOffsetsPerTrigger": "7"}))
    again = pickle.loads(pickle.dumps(reader))
    assert again.opts == reader.opts
    assert again.opts.max_offsets_per_trigger == 7
    assert again.partitions({"t": {"0": 1}}, {"t": {"0": 4}}) == [KafkaRange("t", 0, 1, 4)]
    # The next batch starts where the last one Spark planned ends (Spark 4.1: no start given).
    assert again._next_start == {"t": {"0": 4}}


@given(st.dictionaries(tps, st.integers(0, 10**9), max_size=8), st.dictionaries(tps, st.integers(0, 10**9), max_size=8))
def test_the_logs_ends_are_recorded_where_a_batch_ends_short_of_them(ends, log):
    doc = offsets_to_json(ends, log_end=log)
    assert offsets_from_json(doc) == ends  # the batch's own ends are unchanged
    expected = {tp: max(o, log.get(tp, o)) for tp, o in ends.items()}  # a partition's end: its log's, or the batch's
    assert log_end_from_json(json.loads(json.dumps(doc))) == expected
    if all(log.get(tp, o) <= o for tp, o in ends.items()):
        assert "@log_end" not in doc  # nothing recorded for batches that reach the logs' ends
