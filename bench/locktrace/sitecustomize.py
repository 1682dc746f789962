"""Times every hold of the scheduler cache's lock, for the benchmark only.

The harness puts this folder on a contender's PYTHONPATH when ``BENCH_LOCK_TRACE`` is set
(``python -m bench.run`` with that variable); Python then imports this module at start-up.
It swaps the lock the cache module creates for one that records how long each outermost
hold lasted, and writes the figures to ``cache-lock.json`` in the contender's working
directory (the run's folder) every second. It touches no other lock and works on any commit
whose cache module makes its lock with ``threading.RLock()`` (``coscheduling/cache.py``
before the core package, ``coscheduling/core/cache.py`` after), so two commits compare on
equal terms. Not part of the product: the scheduler never imports it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import json
import sys
import threading
import time
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

CACHE_MODULES = ("coscheduling.core.cache", "coscheduling.cache")
OUTPUT = Path("cache-lock.json")
# Holds at least this long are counted apart (milliseconds).
THRESHOLDS_MS = (1.0, 10.0, 100.0)


class Holds:
    """The figures, shared by every timed lock (one cache lock per process in practice)."""

    def __init__(self) -> None:
        self.count = 0
        self.total = 0.0
        self.longest = 0.0
        self.at_least = dict.fromkeys(THRESHOLDS_MS, 0)

    def add(self, seconds: float) -> None:
        self.count += 1
        self.total += seconds
        self.longest = max(self.longest, seconds)
        for limit in THRESHOLDS_MS:
            if seconds * 1000 >= limit:
                self.at_least[limit] += 1

    def as_dict(self) -> dict[str, Any]:
        return {"holds": self.count, "total_s": round(self.total, 3),
                "longest_ms": round(self.longest * 1000, 3),
                "at_least_ms": {str(k): v for k, v in self.at_least.items()}}


HOLDS = Holds()


class TimedRLock:
    """A re-entrant lock that times its outermost holds. Depth and start are only written
    by the thread that holds it."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._since = 0.0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        got = self._lock.acquire(blocking, timeout)
        if got:
            self._depth += 1
            if self._depth == 1:
                self._since = time.perf_counter()
        return got

    def release(self) -> None:
        self._depth -= 1
        if self._depth == 0:
            HOLDS.add(time.perf_counter() - self._since)
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class _Finder(importlib.abc.MetaPathFinder):
    """After the cache module is executed, its ``threading`` is one whose RLock is timed."""

    def find_spec(self, name: str, path: Sequence[str] | None,
                  target: types.ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if name not in CACHE_MODULES:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        execute = spec.loader.exec_module

        def exec_module(module: types.ModuleType) -> None:
            execute(module)
            shim = types.SimpleNamespace(**vars(threading))
            shim.RLock = TimedRLock
            module.threading = shim  # type: ignore[attr-defined]

        spec.loader.exec_module = exec_module  # type: ignore[method-assign]
        return spec


def _write_every_second() -> None:
    while True:
        time.sleep(1.0)
        OUTPUT.write_text(json.dumps(HOLDS.as_dict()))


sys.meta_path.insert(0, _Finder())
threading.Thread(target=_write_every_second, name="lock-trace", daemon=True).start()
