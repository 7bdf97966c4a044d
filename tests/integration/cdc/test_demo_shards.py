"""`make demo-shards` (``cdc demo --shards``) runs end to end: four shards on two servers
merged into one table with a column mapping (region, shard), pessimistic DDL coordination,
consistency report (exit code 0 only when the merged targets equal the union of the shards)."""

import re

from cdc.demo_shards import run_shards_demo
from cdc.stack.kafka_broker import node_pids
from cdc.stack.manager import read_stack
from cdc.stack.process import pid_alive


def test_shards_demo_runs_and_is_consistent(tmp_path, capsys):
    state = tmp_path / "demo"
    assert run_shards_demo(state, rows=3000) == 0
    out = " ".join(capsys.readouterr().out.split())  # (the console wraps long lines)
    assert "consistent: the merged targets equal the union of the four shards" in out and "INCONSISTENT" not in out
    held = re.search(r"held at once by the pessimistic route: ([\d,]+)", out)
    assert held and int(held.group(1).replace(",", "")) > 0, out  # rows waited for the last shard's DDL
    for shard in ("east/shop_01.orders", "east/shop_02.orders", "west/shop_03.orders", "west/shop_04.orders"):
        assert shard in out
        # the column mapping's values, found in the target by verify, shown with each shard
        assert f"column mapping: {shard} -> shop.orders: region='{shard[:4]}', shard='{shard[10:12]}'" in out, out
    assert re.search(r"target columns: __source, __db, __table, region, shard, id\b", out), out
    data = read_stack(state.resolve())
    pids = [s["pid"] for s in (data["mysql"], data["postgres"], *data["sources"])] + node_pids(data["kafka"])
    assert not any(pid_alive(p) for p in pids)
