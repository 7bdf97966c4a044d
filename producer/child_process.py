"""The producer's helper processes: a fresh interpreter, its arguments on stdin, a pipe back.

The binlog reader (:mod:`producer.binlog.process`) and the snapshot's chunk read processes
(:mod:`producer.snapshot.chunk_process`) do pure-Python work (decoding binlog rows, parsing
and encoding SELECT results) that would otherwise share one core with the producer's own
encoding and producing, under one GIL.  Each runs in a child that is:

* a fresh interpreter: not fork (no threads, locks or Kafka sockets inherited), not
  multiprocessing's spawn (that re-runs the caller's main script);
* given the parent's import path (a JSON line on stdin), then its pickled arguments;
* no orphan: a session of its own, so a Ctrl-C or a stop sent to the parent's group stops
  the parent only (which then ends the child); on Linux the kernel kills it when the
  parent dies, even by SIGKILL (``PR_SET_PDEATHSIG``); and it exits when its pipe breaks.
"""

from __future__ import annotations

import ctypes
import json
import os
import pickle
import signal
import subprocess
import sys
import traceback
from typing import Any

_PR_SET_PDEATHSIG = 1


def spawn(entry: str, fds: tuple[int, ...], args: tuple) -> subprocess.Popen:
    """Start ``entry`` (``module:function``, called without arguments) in a child that
    inherits ``fds``; ``args`` (with the parent's pid appended) wait for it on its stdin
    (:func:`child_args`)."""
    module, func = entry.split(":")
    boot = (f"import json, sys; sys.path[:] = json.loads(sys.stdin.buffer.readline()); "
            f"from {module} import {func}; {func}()")
    process = subprocess.Popen([sys.executable, "-c", boot], stdin=subprocess.PIPE, pass_fds=fds,
                               close_fds=True, start_new_session=True)
    try:
        with process.stdin as stdin:
            stdin.write(json.dumps(sys.path).encode() + b"\n")
            pickle.dump((*args, os.getpid()), stdin, pickle.HIGHEST_PROTOCOL)
    except BaseException:
        process.kill()
        process.wait()
        raise
    return process


def child_args() -> tuple:
    """In the child: the arguments :func:`spawn` was given; from now on the child dies
    with its parent."""
    *args, parent_pid = pickle.load(sys.stdin.buffer)
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass  # not Linux: a broken pipe still ends the child at its next send
    if os.getppid() != parent_pid:
        os._exit(0)  # the parent died before the signal was armed
    return tuple(args)


def pickled_error(exc: BaseException, where: str) -> bytes:
    """``("error", exc)`` pickled for the parent, with the child's traceback as a note
    (``where``: which process); an exception that cannot be rebuilt travels as a
    RuntimeError with its message."""
    note = f"in the {where} process:\n" + "".join(traceback.format_exception(exc)).rstrip()
    exc.add_note(note)
    try:
        data = pickle.dumps(("error", exc), pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # some exceptions pickle but cannot be rebuilt
    except Exception:  # noqa: BLE001 - fall back to the message
        fallback: Any = RuntimeError(f"{where}: {type(exc).__name__}: {exc}")
        fallback.add_note(note)
        data = pickle.dumps(("error", fallback), pickle.HIGHEST_PROTOCOL)
    return data
