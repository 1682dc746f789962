"""Scheduling cycles that gRPC callers drive, and the routing of their Permit decisions.

A pod a caller reserved waits at Permit in the scheduler's own WaitingPods (so its gang
counts it and releases it with the others), but what happens after the decision is the
caller's: the scheduler must not bind it, nor undo it on its own. WaitingPods has one
decision callback, the scheduler's; it is wrapped once per scheduler so decisions on remote
pods are recorded here and every other decision goes on to the scheduler unchanged.

Lock order: the callback runs under the WaitingPods lock (from the permit timer, or inside
a cache-locked call), so this module's own lock is taken last and nothing is called while
holding it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coscheduling.framework.cycle_state import CycleState, settle
from coscheduling.framework.status import Code, Status

if TYPE_CHECKING:

    from coscheduling.api.pods import Pod
    from coscheduling.core.scheduler import Scheduler
    from coscheduling.framework.waiting import WaitingPod


@dataclass
class RemoteCycle:
    """One pod between a caller's Reserve and its Unreserve or PostBind."""

    pod: Pod
    node_name: str
    state: CycleState = field(default_factory=CycleState)
    permit: Status | None = None  # what Permit answered
    decision: Status | None = None  # what became of it while it waited
    touched: float = 0.0  # the last call about it, or its decision (RemoteCycles.clock)
    owner: str = ""  # the caller that reserved it (its identity): only it may go on or undo

    @property
    def waiting(self) -> bool:
        return self.permit is not None and self.permit.code == Code.WAIT and self.decision is None

    def settle(self) -> None:
        """Write into the cycle state what the in-process binding cycle would have written
        after the decision, so Unreserve treats the gang as it does in process."""
        if self.decision is not None:
            settle(self.state, self.decision)


class RemoteCycles:
    """The remote cycles of one scheduler, shared by every gRPC server attached to it."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._lock = threading.Lock()
        self._cycles: dict[str, RemoteCycle] = {}
        self._metrics = scheduler.metrics
        self.clock: Callable[[], float] = time.monotonic  # for reservation expiry
        scheduler.waiting_pods.add_interceptor(self._intercept)
        self._servers = 0  # running servers; the last one to stop undoes what is left

    def _intercept(self, waiting: WaitingPod) -> bool:
        """Decisions on pods a remote caller reserved are the caller's (True); the rest go
        on to the scheduler's binding cycle."""
        with self._lock:
            cycle = self._cycles.get(waiting.key)
            remote = cycle is not None and cycle.pod.uid == waiting.pod.uid
            if cycle is not None and remote:
                cycle.decision = waiting.decision or Status.error("no decision")
                cycle.touched = self.clock()  # the caller's time to act starts now
        if not remote:
            return False
        decision = waiting.decision
        result = "allowed" if decision is not None and decision.ok else "rejected"
        self._metrics.observe_permit_wait(result, waiting.decided_at - waiting.since)
        return True

    def attach(self) -> None:
        with self._lock:
            self._servers += 1

    def detach(self) -> bool:
        """One server stopped; True when it was the last one."""
        with self._lock:
            self._servers -= 1
            return self._servers == 0

    def add(self, cycle: RemoteCycle) -> None:
        with self._lock:
            self._cycles[cycle.pod.key] = cycle

    def get(self, key: str) -> RemoteCycle | None:
        with self._lock:
            return self._cycles.get(key)

    def pop(self, key: str) -> RemoteCycle | None:
        with self._lock:
            return self._cycles.pop(key, None)

    def pod_keys(self) -> list[str]:
        with self._lock:
            return list(self._cycles)


_INSTALL_LOCK = threading.Lock()


def remote_cycles(scheduler: Scheduler) -> RemoteCycles:
    """The scheduler's RemoteCycles, made (and its decision callback wrapped) on first use.

    Found through the interceptor it installed, so it lives exactly as long as the scheduler.
    """
    with _INSTALL_LOCK:
        for interceptor in scheduler.waiting_pods.interceptors:
            installed = getattr(interceptor, "__self__", None)
            if isinstance(installed, RemoteCycles):
                return installed
        return RemoteCycles(scheduler)
