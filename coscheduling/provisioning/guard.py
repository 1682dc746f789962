"""Scale-down guard: nodes a gang is being placed on carry the annotation with which the
cluster-autoscaler leaves a node alone; the scheduler sets it and clears it again.

A gang's claims, its members waiting at Permit and its reservation are room the API server
does not show as used (no pod is bound there yet), so the autoscaler would count such a
node as empty and remove it under the gang. Only annotations this scheduler set are
cleared (a second annotation says so): one set by an administrator stays.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any, Protocol

from coscheduling.cluster.client import ApiError
from coscheduling.provisioning.worker import ApiWorker

SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
GUARDED_BY = "batch.scheduler.tencent.com/scale-down-guard"


class NodeApi(Protocol):
    def get(self, path: str, **query: Any) -> dict[str, Any]: ...
    def patch(self, path: str, body: Any, *, kind: str = "merge") -> dict[str, Any]: ...


def _annotations(node: dict[str, Any]) -> dict[str, str]:
    return dict((node.get("metadata") or {}).get("annotations") or {})


class ScaleDownGuard:
    """Keeps the annotation on exactly the nodes it is told are held by gangs."""

    def __init__(self, api: NodeApi, worker: ApiWorker) -> None:
        self.api = api
        self.worker = worker
        self._lock = threading.Lock()
        self._marked: set[str] | None = None  # None: not yet read from the API server
        self._busy = False

    def marked(self) -> set[str]:
        with self._lock:
            return set(self._marked or ())

    def update(self, held: Iterable[str]) -> None:
        """Mark ``held`` nodes and unmark the rest (queued: runs on the worker)."""
        wanted = set(held)
        with self._lock:
            if self._busy:
                return  # the next housekeeping tries again with fresh numbers
            if self._marked is not None and wanted == self._marked:
                return
            self._busy = True
        self.worker.submit(lambda: self._apply(wanted))

    def _apply(self, wanted: set[str]) -> None:
        try:
            if self._marked is None:
                self._adopt()
            with self._lock:
                marked = set(self._marked or ())
            for name in sorted(wanted - marked):
                self._mark(name)
            for name in sorted(marked - wanted):
                self._unmark(name)
        finally:
            with self._lock:
                self._busy = False

    def _adopt(self) -> None:
        """Nodes marked by an earlier run of this scheduler are this run's to clear."""
        nodes = self.api.get("/api/v1/nodes").get("items") or []
        found = {n["metadata"]["name"] for n in nodes if GUARDED_BY in _annotations(n)}
        with self._lock:
            self._marked = found

    def _mark(self, name: str) -> None:
        try:
            node = self.api.get(f"/api/v1/nodes/{name}")
            if _annotations(node).get(SCALE_DOWN_DISABLED) == "true":
                return  # somebody else's: it is protected already and stays theirs
            self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": {
                SCALE_DOWN_DISABLED: "true", GUARDED_BY: "true"}}})
        except ApiError as err:
            if err.not_found:
                return
            raise
        with self._lock:
            assert self._marked is not None
            self._marked.add(name)

    def _unmark(self, name: str) -> None:
        try:
            self.api.patch(f"/api/v1/nodes/{name}", {"metadata": {"annotations": {
                SCALE_DOWN_DISABLED: None, GUARDED_BY: None}}})
        except ApiError as err:
            if not err.not_found:
                raise
        with self._lock:
            assert self._marked is not None
            self._marked.discard(name)
