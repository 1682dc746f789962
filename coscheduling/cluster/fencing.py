"""Leader fencing by the API server: a leader's Bindings say who sent them, and the
ValidatingAdmissionPolicy in deploy/40-fencing.yaml lets a Binding through only while that
name holds the leader Lease.

A local check cannot fence: a leader paused (stopped, starved, swapped out) after its last
check and before its request reaches the API server would bind after a new leader took over.
The API server checks at the moment of the bind, against the Lease as it is then, so a
deposed leader's late Binding is refused however long it was paused.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import KubeClient
from coscheduling.faults import Fault

# Copied onto the pod by the API server with the Binding, so it also records who bound it.
LEADER_ANNOTATION = "batch.scheduler.tencent.com/bound-by"


class BindingClient(KubeClient):
    """The scheduler's client when its Bindings are fenced (``leader`` set) or a fault is
    injected around them (``fault``); otherwise the plain KubeClient is used."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.leader = ""  # the leader identity Bindings carry
        self.fault: Fault | None = None
        self.group_of: Callable[[str, str], str] = lambda namespace, name: ""

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        if self.fault is not None:
            self.fault.before_bind()
        super().bind(namespace, name, uid, node_name)
        if self.fault is not None:
            self.fault.after_bind(self.group_of(namespace, name))

    def request(self, method: str, path: str, *, body: Any = None,
                **kwargs: Any) -> dict[str, Any]:
        if self.leader and method == "POST" and path.endswith("/binding") \
                and isinstance(body, dict):
            meta = dict(body.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   LEADER_ANNOTATION: self.leader}
            body = {**body, "metadata": meta}
        return super().request(method, path, body=body, **kwargs)
