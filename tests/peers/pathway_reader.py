"""Pathway's Debezium reader (``pw.io.debezium.read``) on one of our table topics.

Run by tests/integration/producer/test_debezium_json.py with Pathway's interpreter:
``python pathway_reader.py BOOTSTRAP TOPIC OUT.jsonl``.  Pathway keeps the table it rebuilds
from the change events and writes every change of it to ``OUT.jsonl`` (a row with
``diff`` 1 or -1); it runs until killed.  Imports nothing of this project.
"""

import sys

import pathway as pw


class Items(pw.Schema):
    id: int = pw.column_definition(primary_key=True)
    name: str
    qty: int
    price: float
    born: int  # DATETIME(6): io.debezium.time.MicroTimestamp


def main() -> None:
    bootstrap, topic, out = sys.argv[1:4]
    settings = {"bootstrap.servers": bootstrap, "group.id": f"pathway-{topic}", "auto.offset.reset": "earliest",
                "enable.auto.commit": "false"}
    table = pw.io.debezium.read(settings, topic_name=topic, schema=Items, autocommit_duration_ms=100)
    pw.io.jsonlines.write(table, out)
    pw.run(monitoring_level=pw.MonitoringLevel.NONE)


if __name__ == "__main__":
    main()
