"""Spark's streaming checkpoint of a session from ``build_session`` is written through
Hadoop's ``FileSystem`` API (``CHECKPOINT_FILE_MANAGER``): the ``FileContext`` API Spark
takes by default spawns a ``readlink`` process per path it looks at on a local disk.

Seen from outside Spark, through public interfaces only: a process of its own builds the
session and runs two streaming queries on a local checkpoint (Spark's public DataFrame API),
the first as the session is built, the second with Spark's default manager set through
``spark.conf``.  Its ``PATH`` starts with a ``readlink`` that notes each path it is asked
about, so the test sees which checkpoint spawned ``readlink`` processes; Linux's inotify
(through ``ctypes``) shows how the first checkpoint's files came to be on disk."""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import shutil
import struct
import subprocess
import sys
from pathlib import Path

from spark_jobs.spark_session import CHECKPOINT_FILE_MANAGER, build_session
from tests.producer_helpers import ROOT

#: Spark's default manager (``CheckpointFileManager.create`` without the setting), for the control run.
FILE_CONTEXT_MANAGER = "org.apache.spark.sql.execution.streaming.checkpointing.FileContextBasedCheckpointFileManager"

IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_NONBLOCK = 0x40, 0x80, 0x100, 0o4000


class _Inotify:
    """Linux's inotify through libc (``inotify(7)``): creations and renames in some directories."""

    def __init__(self, dirs: list[Path]) -> None:
        self.libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
        self.fd = self.libc.inotify_init1(IN_NONBLOCK)
        assert self.fd >= 0, os.strerror(ctypes.get_errno())
        self.dirs = {}
        for d in dirs:
            wd = self.libc.inotify_add_watch(self.fd, str(d).encode(), IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO)
            assert wd >= 0, os.strerror(ctypes.get_errno())
            self.dirs[wd] = d.name

    def events(self) -> list[tuple[str, str, int, str]]:
        """What happened since: (directory, "create" | "from" | "to", rename cookie, name)."""
        buf = b""
        while True:
            try:
                buf += os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
        os.close(self.fd)
        out, p = [], 0
        kinds = {IN_CREATE: "create", IN_MOVED_FROM: "from", IN_MOVED_TO: "to"}
        while p < len(buf):
            wd, mask, cookie, n = struct.unpack_from("iIII", buf, p)
            name = buf[p + 16:p + 16 + n].rstrip(b"\0").decode()
            p += 16 + n
            out.append((self.dirs[wd], kinds[mask & (IN_CREATE | IN_MOVED_FROM | IN_MOVED_TO)], cookie, name))
        return out


def _child(argv: list[str]) -> None:
    """In the process of its own: the session, then one query per checkpoint (``argv``: the
    input directory, the checkpoint as built, the control's checkpoint)."""
    source, built, control = argv
    spark = build_session(master="local[1]", app_name="test-checkpoint-file-manager")

    def run(checkpoint: str) -> None:
        query = (spark.readStream.schema("value string").text(source).writeStream.format("noop")
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination()

    managers = [spark.conf.get(CHECKPOINT_FILE_MANAGER[0], None)]
    run(built)
    spark.conf.set(CHECKPOINT_FILE_MANAGER[0], FILE_CONTEXT_MANAGER)
    managers.append(spark.conf.get(CHECKPOINT_FILE_MANAGER[0]))
    run(control)
    spark.stop()
    print(json.dumps(managers))


def test_a_local_checkpoint_is_written_through_the_file_system_api_atomically(tmp_path: Path):
    source, built, control, bin_dir = (tmp_path / d for d in ("in", "built", "control", "bin"))
    for d in (source, built / "offsets", built / "commits", control, bin_dir):
        d.mkdir(parents=True)
    (source / "rows.txt").write_text("a\nb\n")
    asked = tmp_path / "readlink.log"
    readlink = bin_dir / "readlink"
    readlink.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> '{asked}'\nexec '{shutil.which('readlink')}' \"$@\"\n")
    readlink.chmod(0o755)
    watch = _Inotify([built, built / "offsets", built / "commits"])

    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "tests.integration.spark_jobs.test_checkpoint_file_manager",
                          str(source), str(built), str(control)], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    events = watch.events()
    managers = json.loads(out.stdout.strip().splitlines()[-1])
    assert managers == [CHECKPOINT_FILE_MANAGER[1], FILE_CONTEXT_MANAGER]

    # which API: the built session's checkpoint spawned no readlink, Spark's default spawned them
    # (readlink is asked about a path as Hadoop names it: file:/...)
    paths = asked.read_text().split() if asked.exists() else []
    assert not [p for p in paths if str(built) in p], paths
    assert [p for p in paths if str(control) in p], "the control run spawned no readlink: the probe sees nothing"

    # atomically: each log file was written under a temporary name, then renamed to its own,
    # never created under it
    for log in ("offsets", "commits"):
        assert (built / log / "0").read_text().startswith("v1\n")
        mine = [(kind, cookie, name) for d, kind, cookie, name in events if d == log]
        assert ("create", "0") not in [(kind, name) for kind, _, name in mine], mine
        [(_, cookie, _)] = [e for e in mine if e[0] == "to" and e[2] == "0"]
        [temp] = [name for kind, c, name in mine if kind == "from" and c == cookie]
        assert temp.startswith(".0.") and temp.endswith(".tmp") and ("create", 0, temp) in mine, mine
        assert not [p for p in (built / log).iterdir() if p.name.endswith(".tmp")]
    assert ("create", "metadata") not in [(kind, name) for d, kind, _, name in events if d == "built"], events


if __name__ == "__main__":
    _child(sys.argv[1:])
