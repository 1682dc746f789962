"""Where start-up time goes: the phases from process start to scheduling, logged once.

The process's own start (imports included) is read from /proc, so the first phase covers the
interpreter and every import before the first line of the command runs.
"""

from __future__ import annotations

import logging
import os
import time

from coscheduling.ops.procstat import start_ticks

log = logging.getLogger(__name__)


def process_age() -> float | None:
    """Seconds since this process started (Linux: /proc/self/stat), None elsewhere."""
    try:
        started = start_ticks()
        if started is None:
            return None
        return time.clock_gettime(time.CLOCK_BOOTTIME) - started / os.sysconf("SC_CLK_TCK")
    except (ValueError, IndexError, AttributeError):
        return None


class StartupClock:
    """Named phases of start-up, each the time since the previous mark."""

    def __init__(self, first_phase: str = "interpreter and imports") -> None:
        age = process_age()
        now = time.monotonic()
        self._start = now - age if age is not None else now
        self._last = self._start
        self.phases: list[tuple[str, float]] = []
        self.mark(first_phase)

    def mark(self, phase: str) -> None:
        """``phase`` ended now."""
        now = time.monotonic()
        self.phases.append((phase, now - self._last))
        self._last = now

    @property
    def elapsed(self) -> float:
        return self._last - self._start

    def summary(self) -> str:
        parts = ", ".join(f"{name} {seconds:.2f}" for name, seconds in self.phases)
        return f"{self.elapsed:.2f} s from process start ({parts})"
