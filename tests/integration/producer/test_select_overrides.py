"""Debezium's ``snapshot.select.statement.overrides`` on the real stack
(``source.snapshot_select_statement_overrides``, issue 57): the override's WHERE condition in
every chunk SELECT of the table's snapshots, with a signal's ``additional-conditions`` too; a
delete-missing snapshot reads the whole table; a bad override stops the start naming it."""

from __future__ import annotations

import pytest

from common.errors import ConfigError
from producer.app import ProducerApp
from tests.producer_helpers import ProducerThread, read_events, run_sql, start_at_current, wait_for
from tests.snapshot_helpers import has_notification, snapshot


def _reads(config, db: str) -> list[int]:
    return [v["after"]["id"] for _, _, v in read_events(config, f"{config.kafka.topic_prefix}.{db}.orders")
            if v["op"] == "r"]


def test_the_override_condition_filters_every_chunk_of_every_snapshot(stack, config, test_db):
    run_sql(stack, test_db, "CREATE TABLE orders (id INT PRIMARY KEY, status VARCHAR(10), total INT)",
          "INSERT INTO orders VALUES " + ", ".join(f"({i}, '{'archived' if i % 3 == 0 else 'open'}', {i * 10})"
                                                  for i in range(1, 13)))
    config.source.include_databases = [test_db]
    config.snapshot.chunk_size = 2
    config.source.snapshot_select_statement_overrides = {
        f"{test_db}.orders": f"SELECT * FROM `{test_db}`.`orders` WHERE status <> 'archived'"}
    start_at_current(config)
    with ProducerThread(config):
        first = snapshot(config, [f"{test_db}.orders"])
        wait_for(lambda: has_notification(config, "COMPLETED", id=first), 90, what="the first snapshot")
        assert _reads(config, test_db) == [1, 2, 4, 5, 7, 8, 10, 11]
        second = snapshot(config, [f"{test_db}.orders"], where="total > 50")  # and a signal's condition
        wait_for(lambda: has_notification(config, "COMPLETED", id=second), 90, what="the second snapshot")
        assert _reads(config, test_db)[8:] == [7, 8, 10, 11]
        third = snapshot(config, [f"{test_db}.orders"], delete_missing=True)  # the whole table
        wait_for(lambda: has_notification(config, "COMPLETED", id=third), 90, what="the delete-missing snapshot")
        assert _reads(config, test_db)[12:] == list(range(1, 13))


@pytest.mark.parametrize("override, named", [
    ("SELECT id FROM {db}.orders WHERE total > 1", "is not 'SELECT \\* FROM <table> WHERE <condition>'"),
    ("total > (SELECT 1)", "condition refused"),
    ("nope = 1", "condition refused: unknown column"),
])
def test_a_bad_override_stops_the_start_naming_it(stack, config, test_db, override, named):
    run_sql(stack, test_db, "CREATE TABLE orders (id INT PRIMARY KEY, total INT)")
    config.source.include_databases = [test_db]
    config.source.snapshot_select_statement_overrides = {f"{test_db}.orders": override.format(db=test_db)}
    with pytest.raises(ConfigError, match=rf"source\.snapshot_select_statement_overrides\['{test_db}\.orders'\]: .*{named}"):
        ProducerApp(config).run(max_events=1, idle_exit_s=1)
