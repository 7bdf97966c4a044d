"""The stack's processes: their ports, drawn below the kernel's ephemeral range (free_port), who
listens on one (port_listener), and when a stopped process is gone (pid_alive)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from cdc.stack.process import _ephemeral_low, free_port, pid_alive, port_listener
from tests.producer_helpers import wait_for


def test_server_ports_lie_below_the_ephemeral_range_and_are_free():
    low = _ephemeral_low()
    ports = [free_port() for _ in range(200)]
    assert all(1024 <= p < low for p in ports)  # no client's connection can be handed one of them
    assert len(set(ports)) > 150  # drawn, not one port over and over
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[0]))  # nothing holds it



def test_the_process_listening_on_a_port_is_named():
    with socket.socket() as s:
        s.bind(("127.0.0.1", free_port()))
        port = s.getsockname()[1]
        assert port_listener(port) == ""  # bound, not listening
        s.listen()
        assert port_listener(port).startswith(f"pid {os.getpid()}: ")
    assert port_listener(port) == ""


def test_a_process_whose_main_thread_ended_is_alive_until_its_last_thread_ends():
    # As a killed JVM: the main thread a zombie at once, the others still ending (and holding
    # the process's sockets).  The main thread ends with the exit system call (60 on x86-64);
    # the other one reads its standard input, so it ends when the test closes that, not on a clock.
    code = ("import ctypes, sys, threading\n"
            "threading.Thread(target=sys.stdin.read).start()\n"
            "ctypes.CDLL(None).syscall(60, 0)\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE)
    try:
        wait_for(lambda: _state(proc.pid) == "Z", timeout=60, interval=0.02, what="the main thread a zombie")
        assert len(os.listdir(f"/proc/{proc.pid}/task")) > 1  # ... its other thread still there ...
        assert pid_alive(proc.pid)  # ... and the process is not gone
        proc.stdin.close()  # (the other thread ends)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert not pid_alive(proc.pid)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().split(") ", 1)[1][0]
