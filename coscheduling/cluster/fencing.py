"""Leader fencing by the API server: a leader's Bindings say who sent them, and the
ValidatingAdmissionPolicy in deploy/40-fencing.yaml lets a Binding through only while that
name holds the leader Lease.

A local check cannot fence: a leader paused (stopped, starved, swapped out) after its last
check and before its request reaches the API server would bind after a new leader took over.
The API server checks at the moment of the bind, against the Lease as it is then, so a
deposed leader's late Binding is refused however long it was paused.

"As it is then" means as the API server's own cache of policy parameters has it, which
trails the Lease by the time a watch event takes to arrive (seen: over a third of a second
on a loaded machine). A new leader therefore binds nothing until a probe Binding of its own
is admitted (``wait_admitted``): from then on the cache names it, so a deposed leader's late
Binding can no longer pass.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections.abc import Callable
from typing import Any

from coscheduling.cluster.client import ApiError, KubeClient, binding_body, binding_path, q
from coscheduling.ops.faults import Fault

log = logging.getLogger(__name__)

# Copied onto the pod by the API server with the Binding, so it also records who bound it.
LEADER_ANNOTATION = "batch.scheduler.tencent.com/bound-by"


WRITES = frozenset({"POST", "PUT", "PATCH", "DELETE"})


class BindingClient(KubeClient):
    """The scheduler's client when its Bindings are fenced (``leader`` set) or a fault is
    injected around them (``fault``); otherwise the plain KubeClient is used."""

    def __init__(self, *args: Any, fault: Fault | None = None, leader: str = "",
                 group_of: Callable[[str, str], str] | None = None,
                 holds_lease: Callable[[], bool] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # With leader election: every write but the Lease's own waits for this to say the
        # replica holds the lease (the API server's policy fences what slips past it).
        self.holds_lease = holds_lease
        self.leader = leader  # the leader identity Bindings carry ("": not fenced)
        self.fault = fault
        # (namespace, pod name) -> its gang, for a fault that counts a gang's binds.
        self.group_of = group_of or (lambda namespace, name: "")

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        path = binding_path(namespace, name)
        self._check_lease("POST", path)  # the last check before the request goes out:
        if self.fault is not None:  # a replica paused here is what the API server fences
            self.fault.before_bind()
        self._send("POST", path, body=binding_body(namespace, name, uid, node_name))
        if self.fault is not None:
            self.fault.after_bind(self.group_of(namespace, name))

    def request(self, method: str, path: str, *, body: Any = None,
                **kwargs: Any) -> dict[str, Any]:
        if self.fault is not None and "/leases/" in path:
            self.fault.before_lease_request()
        self._check_lease(method, path)
        return self._send(method, path, body=body, **kwargs)

    def _check_lease(self, method: str, path: str) -> None:
        if self.holds_lease is not None and method in WRITES and \
                "/leases" not in path and not self.holds_lease():
            raise ApiError(403, f"not sent: {method} {path}: this replica does not hold the "
                              "leader lease")

    def _send(self, method: str, path: str, *, body: Any = None,
              **kwargs: Any) -> dict[str, Any]:
        if self.leader and method == "POST" and path.endswith("/binding") \
                and isinstance(body, dict):
            meta = dict(body.get("metadata") or {})
            meta["annotations"] = {**(meta.get("annotations") or {}),
                                   LEADER_ANNOTATION: self.leader}
            body = {**body, "metadata": meta}
        return super().request(method, path, body=body, **kwargs)


def wait_admitted(client: BindingClient, namespace: str, still_leading: Callable[[], bool],
                  interval: float = 0.1) -> bool:
    """Block until the API server's fencing policy admits this replica's Bindings (True), or
    leadership is lost first (False). The probe is a dry-run Binding of a pod that does not
    exist: admission runs before the pod is looked up, so "not found" means admitted, and a
    cluster without the policy answers so at once."""
    probe = f"coscheduling-fencing-probe-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": probe},
            "target": {"apiVersion": "v1", "kind": "Node", "name": probe}}
    started = time.monotonic()
    warned = False
    while still_leading():
        try:
            client.request("POST", f"/api/v1/namespaces/{q(namespace)}/pods/{probe}/binding",
                           query={"dryRun": "All"}, body=body)
        except ApiError as err:
            fenced_out = err.status == 403 and "ValidatingAdmissionPolicy" in str(err)
            unanswered = err.status in (0, 429) or err.status >= 500  # admission unknown
            if not (fenced_out or unanswered):
                return True  # admitted, then not found (or refused by something else)
            if not warned and time.monotonic() - started > 5:
                log.warning("the fencing policy does not admit this leader yet: %s", err)
                warned = True
            time.sleep(interval)
            continue
        return True
    return False
