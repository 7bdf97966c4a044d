"""The merge job and ``cdc verify`` over topics the producer writes in ``debezium-json``
(Kafka Connect's JsonConverter shape): the sinks build their tables from each record's own
schema, tombstones are passed over, and every sink and the clean changelog equal the source."""

from __future__ import annotations

import json
from pathlib import Path

from cdc.verify import verify
from common.kafka.topic_reader import read_topic
from contract.topics import clean_topic, dlq_topic
from spark_jobs.merge_job import MergeJob
from tests.all_types import MANY_TYPES_COLS, make_many_types_table, many_types_row
from tests.producer_helpers import ProducerThread, run_until_caught_up, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot


def test_merge_job_and_verify_over_a_debezium_json_topic(stack, merge_config, test_db):
    cfg = merge_config
    cfg.producer.format = "debezium-json"
    cfg.source.include_databases = [test_db]
    make_many_types_table(stack, test_db, n=40)  # before the stream: only the snapshot brings these
    start_at_current(cfg)
    with ProducerThread(cfg):
        sid = snapshot(cfg, [f"{test_db}.types"])
        wait_for(lambda: has_notification(cfg, "COMPLETED", id=sid), timeout=120, what="snapshot completed")
        with stack.admin(test_db) as conn, conn.cursor() as cur:
            cur.execute("SET time_zone = '+00:00'")
            cols = ", ".join(MANY_TYPES_COLS)
            cur.executemany(f"INSERT INTO types ({cols}) VALUES ({', '.join(['%s'] * len(MANY_TYPES_COLS))})",
                            [many_types_row(i) for i in range(41, 61)])
            cur.execute("UPDATE types SET vc = CONCAT(vc, ' updated'), d65 = -d65, js = '{\"u\": 1}' "
                        "WHERE id % 3 = 0")
            cur.execute("DELETE FROM types WHERE id % 7 = 0")
            cur.execute("UPDATE types SET id = id + 1 WHERE id IN (100, 500)")  # key changes
    run_until_caught_up(cfg)
    topic = f"{cfg.kafka.topic_prefix}.{test_db}.types"
    raw = list(read_topic(cfg.kafka.bootstrap_servers, topic))
    assert all(m.value() is None or m.value().startswith(b'{"schema":') for m in raw)
    assert any(m.value() is None for m in raw)  # tombstones after the deletes

    assert MergeJob(cfg).run(available_now=True) == 0
    status = json.loads((Path(cfg.state_dir) / "merge-status.json").read_text())
    assert status["totals"]["dead"] == 0 and status["totals"]["emitted"] > 0, status["totals"]
    assert list(read_topic(cfg.kafka.bootstrap_servers, dlq_topic(cfg.kafka.topic_prefix))) == []
    # the clean changelog keeps the records as written (debezium-json)
    clean = list(read_topic(cfg.kafka.bootstrap_servers, clean_topic(cfg.kafka.topic_prefix, test_db, "types")))
    assert clean and all(m.value().startswith(b'{"schema":') for m in clean)

    report = verify(cfg, [f"{test_db}.types"], changelog=True, chunk_size=7)
    (table,) = report.tables
    assert {r.sink for r in table.results} == {"postgres", "mysql", "changelog"}
    for r in table.results:
        assert r.equal, r
    assert table.source_rows == 40 + 20 - len([i for i in range(1, 61) if i * 10 % 7 == 0]) + 1  # (+ the NULL row)
    assert report.equal
