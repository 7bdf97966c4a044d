"""`make demo` runs end to end and reports consistency (exit code 0 only when consistent).

Here with the lakes on the ``driver`` engine: the secure demo (tests/integration/cdc/test_secure_stack.py)
runs `cdc demo` as `make demo` does, lakes on ``spark``; one demo per engine keeps the suite's time."""

import re

from cdc.demo import run_demo
from cdc.stack.kafka_broker import node_pids
from cdc.stack.manager import read_stack
from cdc.stack.process import pid_alive


def test_demo_runs_and_is_consistent(tmp_path, capsys):
    state = tmp_path / "demo"
    assert run_demo(state, lake_engine="driver") == 0
    out = capsys.readouterr().out
    assert "consistent" in out and "INCONSISTENT" not in out and re.search(r"merged\s+by\s+the\s+driver", out)
    data = read_stack(state.resolve())
    pids = [data["mysql"]["pid"], data["postgres"]["pid"], *node_pids(data["kafka"])]
    assert len(pids) == 3 and not any(pid_alive(p) for p in pids)  # stopped what it started
