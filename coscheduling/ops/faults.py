"""Deterministic fault injection, for the crash and fencing tests: one point, named by the
environment variable COSCHEDULING_FAULT, read once when the scheduler starts.

  after-bind:K        the process dies (os._exit, as kill -9 would leave it) right after the
                      K-th successful bind of one gang: a release cut off part-way, on purpose.
  stop-before-bind:K  the process stops itself (SIGSTOP) right before its K-th bind request,
                      after every check of its own: a paused leader, resumed by the test.
  election-error:K    the K-th request of the leader election (a Lease read or write) raises
                      OverflowError, as a huge Content-Length once did in the client: the
                      election thread must end leadership and the process.

Without the variable nothing is wrapped: the bind path costs nothing more.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import threading
from collections import Counter
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

ENV = "COSCHEDULING_FAULT"
POINTS = ("after-bind", "stop-before-bind", "election-error")
EXIT_CODE = 137  # what a shell reports for a process killed by SIGKILL


class FaultError(ValueError):
    """COSCHEDULING_FAULT names no known point."""


@dataclass
class Fault:
    point: str
    count: int
    _reached: int = 0  # times the point was reached
    _gang_binds: Counter[str] = field(default_factory=Counter)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    # Set by SIGCONT: a stop injected here holds its thread until the process is continued.
    _continued: threading.Event = field(default_factory=threading.Event)
    _watching: bool = False

    @classmethod
    def parse(cls, value: str) -> Fault:
        point, _, count = value.partition(":")
        if point not in POINTS or not count.isdigit() or int(count) < 1:
            raise FaultError(f"{ENV}={value!r}: give one of {', '.join(POINTS)} with a count "
                             "of at least 1, e.g. after-bind:2")
        return cls(point, int(count))

    def before_bind(self) -> None:
        if self.point != "stop-before-bind":
            return
        with self._lock:
            self._reached += 1
            fire = self._reached == self.count
        if fire:
            print(f"coscheduling: fault {self.point}:{self.count}: stopping", file=sys.stderr,
                  flush=True)
            # kill() does not stop the calling thread at once: the kernel may pick another
            # thread to take the stop, and this one would send its bind request meanwhile
            # (seen: a Binding written while the process stopped). Wait for the SIGCONT.
            self._continued.clear()
            os.kill(os.getpid(), signal.SIGSTOP)
            if self._watching:
                self._continued.wait()

    def watch_continue(self) -> None:
        """Install the SIGCONT handler a stop waits for (call from the main thread)."""
        if self.point == "stop-before-bind":
            signal.signal(signal.SIGCONT, lambda signum, frame: self._continued.set())
            self._watching = True

    def before_lease_request(self) -> None:
        if self.point != "election-error":
            return
        with self._lock:
            self._reached += 1
            fire = self._reached == self.count
        if fire:
            print(f"coscheduling: fault {self.point}:{self.count}: raising OverflowError",
                  file=sys.stderr, flush=True)
            raise OverflowError(f"fault {self.point}:{self.count}")

    def after_bind(self, group_key: str) -> None:
        if self.point != "after-bind" or not group_key:
            return
        with self._lock:
            self._gang_binds[group_key] += 1
            fire = self._gang_binds[group_key] == self.count
        if fire:
            print(f"coscheduling: fault {self.point}:{self.count}: exiting after bind "
                  f"{self.count} of gang {group_key}", file=sys.stderr, flush=True)
            os._exit(EXIT_CODE)


def from_environment() -> Fault | None:
    """The fault COSCHEDULING_FAULT names, if any (FaultError naming it when malformed)."""
    value = os.environ.get(ENV, "")
    if not value:
        return None
    fault = Fault.parse(value)
    log.warning("fault injection on: %s=%s", ENV, value)
    if threading.current_thread() is threading.main_thread():
        fault.watch_continue()
    return fault
