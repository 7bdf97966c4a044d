"""Starting, finding and stopping the stack's own server processes."""

from __future__ import annotations

import os
import random
import signal
import socket
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from cdc.errors import StackError
from common.processes import pid_alive


#: How many ports below the kernel's ephemeral range the servers' ports are drawn from.
SERVER_PORTS = 12_000
_PORTS = random.SystemRandom()  # (not the random module's state, which tests seed)


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing is bound to right now, below the kernel's
    ephemeral range: a port in that range may be taken, while its server is down, by any
    client's connection as its own end; and a client reconnecting to a server that is down
    can be handed the server's own port and connect to itself (seen in `make chaos`: a
    Kafka node's port, drawn from that range, answered six seconds after the node was
    killed, and the node could not start again)."""
    low = _ephemeral_low()
    first = max(1024, low - SERVER_PORTS)
    for _ in range(200) if low - first >= 100 else ():
        port = _PORTS.randrange(first, low)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:  # (no room below the range)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(host: str, port: int, timeout: float = 0.5) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def port_listener(port: int) -> str:
    """Who listens on TCP ``port`` (``"pid N: command line"``), as far as /proc tells; ""
    when nothing does or it cannot be told."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if len(f) > 9 and f[3] == "0A" and int(f[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(f"socket:[{f[9]}]")
    if not inodes:
        return ""
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if any(os.readlink(fd) in inodes for fd in (proc / "fd").iterdir()):
                return f"pid {proc.name}: {pid_cmdline(int(proc.name))[:300]}"
        except OSError:
            continue
    return "a process this user cannot see"


def pid_cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def spawn(argv: Sequence[str], log_path: Path, *, env: dict[str, str] | None = None,
          cwd: Path | None = None, user: str | None = None) -> int:
    """Start a server detached from this process (own session); return its pid."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    argv = list(argv)
    if user is not None and os.geteuid() == 0:
        # setpriv execs (no intermediate process), so the pid we record is the server's.
        argv = ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=env, cwd=cwd, start_new_session=True, close_fds=True)
    return proc.pid


def wait_until(check: Callable[[], bool], timeout: float, what: str, *, pid: int | None = None,
               log_path: Path | None = None, interval: float = 0.1) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        if pid is not None and not pid_alive(pid):
            raise StackError(f"{what} exited while starting{_log_tail(log_path)}")
        time.sleep(interval)
    raise StackError(f"{what} did not become ready within {timeout:.0f}s{_log_tail(log_path)}")


def log_tail(log_path: Path, lines: int = 15) -> list[str]:
    """The last ``lines`` lines of a server's log (read from its last 64 KB: a Kafka node's log
    grows large); OSError when it cannot be read."""
    with open(log_path, "rb") as f:
        f.seek(max(0, f.seek(0, os.SEEK_END) - 64 * 1024))
        return f.read().decode(errors="replace").splitlines()[-lines:]


def _log_tail(log_path: Path | None, lines: int = 15) -> str:
    if log_path is None or not log_path.exists():
        return ""
    return f"; last lines of {log_path}:\n    " + "\n    ".join(log_tail(log_path, lines))


def stop_pid(pid: int | None, must_contain: str, timeout: float = 20.0, sig: int = signal.SIGTERM) -> bool:
    """Stop a process we started: only if its command line still names ``must_contain``
    (so a recycled pid is never touched).  SIGTERM, then SIGKILL.  True if it was running."""
    return bool(stop_pids([(pid, must_contain)], timeout, sig))


def stop_pids(procs: Sequence[tuple[int | None, str]], timeout: float = 20.0, sig: int = signal.SIGTERM) -> list[int]:
    """:func:`stop_pid` of several processes at once (``(pid, must_contain)`` each): the signal
    to all, then a shared ``timeout`` for them to end, then SIGKILL.  The pids that ran."""
    mine = [pid for pid, contains in procs if pid_alive(pid) and contains in pid_cmdline(pid)]
    for pid in mine:
        try:
            os.killpg(os.getpgid(pid), sig)
        except (ProcessLookupError, PermissionError):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in mine):
        time.sleep(0.1)
    for pid in mine:
        if pid_alive(pid):
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        _reap(pid)
    deadline = time.monotonic() + 10.0
    while time.monotonic() < deadline and any(pid_alive(pid) for pid in mine):
        time.sleep(0.05)
    return mine


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass
