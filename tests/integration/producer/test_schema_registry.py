"""The Schema Registry path end to end: the producer registers its schemas through
confluent-kafka's client (basic auth, TLS) and frames records Confluent's way; the merge
job decodes them through the same client and its sinks equal the source.

Against a stand-in registry (tests/registry_helpers.py): no Schema Registry server can run
here (docs/pipeline.md, "Stream changes into Kafka")."""

from __future__ import annotations

from common.kafka.topic_reader import read_topic
from contract.codecs.serde import CONFLUENT_MAGIC, ConfluentRegistry, RecordDecoder
from spark_jobs.merge_job import MergeJob
from tests.producer_helpers import read_events, run_until_caught_up, start_at_current
from tests.registry_helpers import StandInRegistry, self_signed_cert
from tests.sink_helpers import pg_sink_rows


def test_the_producer_and_the_merge_job_speak_to_the_registry(stack, merge_config, test_db, tmp_path):
    cfg = merge_config
    cert, key = self_signed_cert(tmp_path)
    with StandInRegistry(user_info="cdc:s3cret", tls=(cert, key), fail_first=1) as reg:
        cfg.kafka.schema_registry_url = reg.url
        cfg.kafka.schema_registry_client = {"basic.auth.user.info": "cdc:s3cret", "ssl.ca.location": str(cert),
                                            "retries.wait.ms": 10}
        cfg.sinks.mysql.enabled = False
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR(20), qty INT)")
        cfg.source.include_databases = [test_db]
        start_at_current(cfg)
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.executemany("INSERT INTO t VALUES (%s, %s, %s)", [(i, f"n{i}", i) for i in range(40)])
            cur.execute("UPDATE t SET qty = qty + 100 WHERE id < 10")
            cur.execute("DELETE FROM t WHERE id >= 35")
        run_until_caught_up(cfg)

        topic = f"{cfg.kafka.topic_prefix}.{test_db}.t"
        registry = ConfluentRegistry(reg.url, cfg.kafka.schema_registry_client)
        events = read_events(cfg, topic, RecordDecoder(registry=registry))
        assert len(events) == 55 and {e[2]["op"] for e in events} == {"c", "u", "d"}
        assert {f"{topic}-key", f"{topic}-value"} <= set(reg.subjects)
        raw = list(read_topic(cfg.kafka.bootstrap_servers, topic))
        assert all(m.value()[:1] == CONFLUENT_MAGIC and m.key()[:1] == CONFLUENT_MAGIC for m in raw)

        assert MergeJob(cfg).run(available_now=True) == 0
        rows = pg_sink_rows(cfg, test_db, "t", ["id"])
        assert rows == {(i,): {"id": i, "name": f"n{i}", "qty": i + (100 if i < 10 else 0)} for i in range(35)}
        assert any(status == 503 for _, _, status in reg.requests)  # (retried)

        # A column added: the producer registers a new version of the subject; the merge job
        # reads every record with the subject's newest version (as the _schemas topic path
        # reads with the table's newest schema), and the sink gets the column.
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("ALTER TABLE t ADD COLUMN note VARCHAR(10) NULL")
            cur.execute("UPDATE t SET note = 'x' WHERE id < 3")
        run_until_caught_up(cfg)
        assert len(reg.subjects[f"{topic}-value"]) == 2
        assert MergeJob(cfg).run(available_now=True) == 0
        rows = pg_sink_rows(cfg, test_db, "t", ["id"])
        assert {k: r["note"] for k, r in rows.items() if r["note"]} == {(0,): "x", (1,): "x", (2,): "x"}
        assert len(rows) == 35
