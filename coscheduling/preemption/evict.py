"""Preemption's writes: victims get the DisruptionTarget condition, a graceful delete and a
Preempted event naming the preemptor; the preemptor gets status.nominatedNodeName."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from typing import TYPE_CHECKING, Protocol

from coscheduling.api.times import format_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient, q

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.cluster.reporter import Reporter

log = logging.getLogger(__name__)

RETRY_DELAYS = (0.5, 1.0, 2.0, 4.0)
"""Waits before sending an eviction again that the API server did not answer (0, 429, 5xx)."""


class Evictor(Protocol):
    def evict(self, victims: Sequence[Pod], preemptor: str) -> None:
        """Evict one preemption's ``victims`` (gracefully) for ``preemptor`` ("pod ns/x" or
        "gang ns/g"), without waiting for the writes: called under the cache lock."""

    def nominate(self, pod: Pod, node_name: str) -> None:
        """Tell the world which node ``pod`` waits for."""


class ApiEvictor:
    """Writes through the API server, as kube-scheduler's DefaultPreemption does."""

    def __init__(self, client: KubeClient, reporter: Reporter | None, component: str,
                 executor: Executor, failed: Callable[[Pod], None] | None = None) -> None:
        self.client = client
        self.reporter = reporter
        self.component = component
        self.executor = executor
        # Told of a victim whose eviction could not be sent: it keeps running, so its room
        # is not the preemptor's after all.
        self.failed = failed

    def evict(self, victims: Sequence[Pod], preemptor: str) -> None:
        # One victim per task, so a preemption's victims go in parallel (as kube-scheduler
        # evicts them) and its preemptor does not wait on their writes one after another.
        for pod in victims:
            self.executor.submit(self._evict_one, pod, preemptor)

    def _evict_one(self, pod: Pod, preemptor: str) -> None:
        path = f"/api/v1/namespaces/{q(pod.namespace)}/pods/{q(pod.name)}"
        condition = {
            "type": "DisruptionTarget", "status": "True",
            "reason": "PreemptionByScheduler",
            "message": f"{self.component}: preempting to accommodate {preemptor}",
            "lastTransitionTime": format_rfc3339(time.time()),
        }
        for delay in (*RETRY_DELAYS, None):
            try:
                self.client.patch(f"{path}/status", {"status": {"conditions": [condition]}},
                                  kind="strategic")
                # Graceful: the pod's own terminationGracePeriodSeconds; the uid guards
                # against deleting a new pod of the same name.
                self.client.request("DELETE", path, body={"preconditions": {"uid": pod.uid}})
                break
            except ApiError as err:
                if err.not_found or err.conflict:
                    return  # gone already, or a new pod of that name: nothing to evict
                unanswered = err.status in (0, 429) or err.status >= 500
                if not unanswered or delay is None:
                    log.warning("evicting %s for %s failed: %s", pod.key, preemptor, err)
                    if self.failed is not None:
                        self.failed(pod)
                    return
                time.sleep(delay)
        if self.reporter is not None:
            self.reporter.event(pod, "Normal", "Preempted", f"Preempted by {preemptor}")

    def nominate(self, pod: Pod, node_name: str) -> None:
        path = f"/api/v1/namespaces/{q(pod.namespace)}/pods/{q(pod.name)}/status"
        try:
            self.client.patch(path, {"status": {"nominatedNodeName": node_name}})
        except ApiError as err:
            if not err.not_found:
                log.warning("nominating %s for %s failed: %s", node_name, pod.key, err)
