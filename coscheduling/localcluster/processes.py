"""Processes the local cluster starts: free loopback ports, start times (a live process
told from a recycled pid), children that die with their parent, log tails for errors."""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path

from coscheduling.ops.procstat import start_ticks

__all__ = [
    "ClusterStartError",
    "child_setup",
    "free_ports",
    "log_tail",
    "pid_alive",
    "process_start_time",
    "threads_stopped",
    "wait_gone",
]

PR_SET_PDEATHSIG = 1
EPHEMERAL_RANGE = Path("/proc/sys/net/ipv4/ip_local_port_range")
MIN_PORT = 10000


class ClusterStartError(RuntimeError):
    """A component exited or did not become ready in time."""


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_ports(count: int) -> list[int]:
    """Distinct free loopback ports below the kernel's ephemeral range.

    Outgoing connections take their source ports from the ephemeral range, so a port
    picked there could be taken (e.g. by the apiserver's own etcd connections) before
    the component binds it, or while a component is stopped for a fault-injection test.
    """
    first_ephemeral = int(EPHEMERAL_RANGE.read_text().split()[0])
    rng = random.SystemRandom()
    ports: list[int] = []
    for _ in range(1000):
        port = rng.randrange(MIN_PORT, max(first_ephemeral, MIN_PORT + 1000))
        if port not in ports and _bindable(port):
            ports.append(port)
            if len(ports) == count:
                return ports
    raise ClusterStartError(
        f"no {count} free loopback ports between {MIN_PORT} and {first_ephemeral}"
    )


def log_tail(path: Path, lines: int = 40) -> str:
    """The last lines of a log, for an error message."""
    try:
        content = path.read_text(errors="replace").splitlines()
    except FileNotFoundError:
        return "(no log file)"
    return "\n".join(content[-lines:])


def process_start_time(pid: int) -> int | None:
    """Kernel start time of `pid` (field 22 of /proc/<pid>/stat), or None if it is gone.

    Stored next to the pid, it tells a live process from a recycled pid.
    """
    return start_ticks(pid)


def threads_stopped(pid: int) -> bool:
    """True when every thread of `pid` is stopped by a signal (state T in its stat)."""
    states = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):  # a thread may end while we read
            stat = (task / "stat").read_text()
            states.append(stat[stat.rindex(")") + 2])
    return bool(states) and all(state == "T" for state in states)


def pid_alive(pid: int) -> bool:
    """True unless the process is gone or a zombie (dead but not yet reaped)."""
    return process_start_time(pid) is not None


def wait_gone(pid: int, timeout: float) -> bool:
    """Wait up to `timeout` seconds for `pid` to end; True if it did."""
    deadline = time.monotonic() + timeout
    while pid_alive(pid):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def child_setup(die_with_parent: bool) -> Callable[[], None] | None:
    """preexec_fn that makes the kernel SIGKILL the child when its parent dies.

    PR_SET_PDEATHSIG fires when the *thread* that forked the child exits, so start
    clusters from a long-lived thread (normally the main one).
    """
    if not die_with_parent:
        return None
    parent = os.getpid()
    prctl = ctypes.CDLL(None, use_errno=True).prctl

    def setup() -> None:
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return setup
