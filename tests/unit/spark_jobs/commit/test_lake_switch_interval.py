"""The switch interval lowered while any lake committer commits (``SwitchInterval``)."""

from __future__ import annotations

import sys
import threading

from spark_jobs.commit.lake_committer import SwitchInterval


def test_lowered_while_any_holder_is_inside_and_restored_after_the_last():
    before = sys.getswitchinterval()
    switch = SwitchInterval()
    first_in, second_out, done = threading.Event(), threading.Event(), threading.Event()
    during = []

    def other():
        with switch.lowered(0.0002):
            first_in.set()
            second_out.wait(10)
            during.append(sys.getswitchinterval())  # the first left: still lowered, this one is inside
        done.set()

    t = threading.Thread(target=other)
    with switch.lowered(0.0005):
        t.start()
        first_in.wait(10)
        assert sys.getswitchinterval() == 0.0005  # (the first holder's; the second keeps it)
    second_out.set()
    done.wait(10)
    t.join()
    assert during == [0.0005]
    assert sys.getswitchinterval() == before
    with switch.lowered(before * 10):  # never raised
        assert sys.getswitchinterval() == before
    assert sys.getswitchinterval() == before
