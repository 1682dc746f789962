"""One background thread for the API writes of scale-ups and node guards, so that the
scheduling cycle and housekeeping (which run under the cache lock) never wait on them."""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class ApiWorker:
    """Runs submitted jobs in order on a daemon thread, started on first use."""

    def __init__(self, name: str = "provisioning") -> None:
        self._jobs: queue.Queue[Callable[[], None]] = queue.Queue()
        self._name = name
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, job: Callable[[], None]) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name=self._name,
                                                daemon=True)
                self._thread.start()
        self._jobs.put(job)

    def idle(self) -> bool:
        """No job is queued or running (tests and housekeeping wait for this)."""
        return self._jobs.unfinished_tasks == 0

    def _run(self) -> None:
        while True:
            job = self._jobs.get()
            try:
                job()
            except Exception:  # one failed write must not stop the others
                log.exception("provisioning job failed")
            finally:
                self._jobs.task_done()
