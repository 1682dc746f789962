"""A stand-in for the cluster-autoscaler, in the open, for the scale-up tests.

The real autoscaler (k8s.io/autoscaler/cluster-autoscaler) is not served by the Go module
proxy this project builds from, so it cannot be built here. This stand-in keeps the
autoscaler's side of the contracts the scheduler relies on, and nothing more:

- ProvisioningRequests (``autoscaling.x-k8s.io/v1``) of the atomic class: the pods of all
  podSets go first on the room the ready nodes have free, the rest on new nodes of the
  first node group whose template holds them, within the group's maximum; all of them or
  none (``Failed``, with the reason). Then ``Accepted`` and ``Provisioned``, as the
  autoscaler reports them. The new nodes join before the answer, or, given a ``join``
  event, only once it is set (after the answer: a cloud's nodes take a while to boot).
- Scale-down: a node of a group with no pod bound, past ``unneeded_seconds``, above the
  group's minimum, is deleted, unless it carries
  ``cluster-autoscaler.kubernetes.io/scale-down-disabled: "true"``.

Nodes are API objects without kubelets, as in the other integration tests.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from coscheduling.api.quantity import parse_resource_list
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.provisioning.guard import SCALE_DOWN_DISABLED
from coscheduling.provisioning.requests import API, ATOMIC_CLASS, PLURAL, request_state
from tests.integration.kube import wait_until

GROUP_LABEL = "autoscaler.test/node-group"
CRD_NAME = f"{PLURAL}.autoscaling.x-k8s.io"


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def provisioning_request_crd() -> dict[str, Any]:
    """The ProvisioningRequest kind as the autoscaler serves it (written here: spec typed,
    status left open, the status subresource on)."""
    podset = {"type": "object", "required": ["podTemplateRef", "count"], "properties": {
        "podTemplateRef": {"type": "object", "properties": {"name": {"type": "string"}}},
        "count": {"type": "integer", "format": "int32", "minimum": 1}}}
    spec = {"type": "object", "required": ["podSets", "provisioningClassName"], "properties": {
        "podSets": {"type": "array", "minItems": 1, "maxItems": 32, "items": podset},
        "provisioningClassName": {"type": "string"},
        "parameters": {"type": "object", "additionalProperties": {"type": "string"}}}}
    schema = {"type": "object", "required": ["spec"], "properties": {
        "spec": spec,
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME},
        "spec": {"group": "autoscaling.x-k8s.io", "scope": "Namespaced",
                 "names": {"plural": PLURAL, "singular": "provisioningrequest",
                           "kind": "ProvisioningRequest", "listKind": "ProvisioningRequestList",
                           "shortNames": ["provreq", "provreqs"]},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "subresources": {"status": {}},
                               "schema": {"openAPIV3Schema": schema}}]},
    }


def install_provisioning_crd(kube: KubeClient) -> None:
    """Create the CRD (once per control plane) and wait until it is served."""
    try:
        kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    provisioning_request_crd())
    except ApiError as err:
        if not err.conflict:
            raise

    def served() -> bool:
        try:
            kube.get(f"/apis/{API}/{PLURAL}")
        except ApiError:
            return False
        return True

    wait_until(served, timeout=30, what="ProvisioningRequests to be served")


@dataclass
class NodeGroup:
    """A node group: the template every node of it is made from, and its sizes."""

    name: str
    allocatable: dict[str, str]
    min_size: int = 0
    max_size: int = 10
    labels: dict[str, str] = field(default_factory=dict)

    def amounts(self) -> dict[str, int]:
        return parse_resource_list({"pods": "110", **self.allocatable})


@dataclass
class Decision:
    """What the stand-in did with one request (for the tests to read)."""

    request: str
    state: str
    nodes: list[str] = field(default_factory=list)
    message: str = ""


def _requests(obj: dict[str, Any]) -> dict[str, int]:
    """A pod's (or template's) requests: its containers' summed, plus one pod."""
    total: dict[str, int] = {"pods": 1}
    for container in (obj.get("spec") or {}).get("containers") or ():
        for name, amount in parse_resource_list(
                (container.get("resources") or {}).get("requests") or {}).items():
            total[name] = total.get(name, 0) + amount
    return total


def _fits(free: dict[str, int], need: dict[str, int]) -> bool:
    return all(free.get(name, 0) >= amount for name, amount in need.items())


def _take(free: dict[str, int], need: dict[str, int]) -> None:
    for name, amount in need.items():
        free[name] = free.get(name, 0) - amount


def _live(pod: dict[str, Any]) -> bool:
    return bool(pod["spec"].get("nodeName")) and \
        (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")


class StandInAutoscaler:
    """Scans every ``interval`` seconds, as the autoscaler's loop does (see the module)."""

    def __init__(self, kube: KubeClient, groups: list[NodeGroup], *,
                 unneeded_seconds: float = 1.0, booking_seconds: float = 600.0,
                 interval: float = 0.5, join: threading.Event | None = None) -> None:
        self.kube = kube
        self.join = join
        self._joining: list[tuple[NodeGroup, str]] = []  # answered, waiting for ``join``
        self.groups = {g.name: g for g in groups}
        self.unneeded_seconds = unneeded_seconds
        self.booking_seconds = booking_seconds  # its own new nodes stay this long, booked
        self.interval = interval
        self.decisions: dict[str, Decision] = {}
        self.created: dict[str, float] = {}
        self.removed: list[str] = []
        self.scans = 0
        self._unneeded: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInAutoscaler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        for name in self.created:
            try:
                self.kube.delete(f"/api/v1/nodes/{name}")
            except ApiError as err:
                if not err.not_found:
                    raise

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.step()
            except ApiError:
                continue  # an object changed under us: the next scan sees the new state
            self.scans += 1

    def step(self) -> None:
        nodes = self.kube.get("/api/v1/nodes").get("items") or []
        pods = [p for p in self.kube.get("/api/v1/pods").get("items") or () if _live(p)]
        for request in self.kube.get(f"/apis/{API}/{PLURAL}").get("items") or ():
            meta = request["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if key not in self.decisions and request_state(request).state == "Pending":
                self.decisions[key] = self._provision(request, nodes, pods)
        if self._joining and self.join is not None and self.join.is_set():
            for group, name in self._joining:
                self._make_node(group, name)
            self._joining = []
        self._scale_down(nodes, pods)

    # -- scale-up ------------------------------------------------------------------------
    def _provision(self, request: dict[str, Any], nodes: list[dict[str, Any]],
                   pods: list[dict[str, Any]]) -> Decision:
        meta, spec = request["metadata"], request["spec"]
        name = meta["name"]
        if spec.get("provisioningClassName") != ATOMIC_CLASS:
            return self._answer(request, Decision(name, "Failed", message="unknown class"))
        wanted = []
        for podset in spec["podSets"]:
            template = self.kube.get(f"/api/v1/namespaces/{meta['namespace']}/podtemplates/"
                                     f"{podset['podTemplateRef']['name']}")
            wanted += [_requests(template["template"])] * int(podset["count"])
        free = self._free_room(nodes, pods)
        planned: list[tuple[NodeGroup, dict[str, int]]] = []
        for need in wanted:
            spot = next((room for room in free.values() if _fits(room, need)), None) \
                or next((room for _, room in planned if _fits(room, need)), None)
            if spot is None:
                group = self._group_for(need, nodes, planned)
                if isinstance(group, str):
                    return self._answer(request, Decision(name, "Failed", message=group))
                spot = group.amounts()
                planned.append((group, spot))
            _take(spot, need)
        taken = {n["metadata"]["name"] for n in nodes}
        made = [(group, self._name_for(group, taken)) for group, _ in planned]
        decision = Decision(name, "Provisioned", [node for _, node in made],
                            f"provisioned {len(made)} node(s)")
        if self.join is not None:
            self._joining += made
            return self._answer(request, decision)
        for group, node in made:
            self._make_node(group, node)
        return self._answer(request, decision)

    def _free_room(self, nodes: list[dict[str, Any]],
                   pods: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
        free = {n["metadata"]["name"]: parse_resource_list(n["status"].get("allocatable") or {})
                for n in nodes if not n["spec"].get("unschedulable")
                and not n["spec"].get("taints")}
        for pod in pods:
            room = free.get(pod["spec"]["nodeName"])
            if room is not None:
                _take(room, _requests(pod))
        return free

    def _group_for(self, need: dict[str, int], nodes: list[dict[str, Any]],
                   planned: list[tuple[NodeGroup, dict[str, int]]]) -> NodeGroup | str:
        """The first group that holds ``need`` below its maximum, or why none does."""
        full = []
        for group in self.groups.values():
            if not _fits(group.amounts(), need):
                continue
            size = sum(1 for n in nodes if self._group_of(n) == group.name) + \
                sum(1 for g, _ in planned if g is group)
            if size < group.max_size:
                return group
            full.append(f"{group.name} is at its maximum size {group.max_size}")
        return "; ".join(full) or f"no node group can hold a pod requesting {need}"

    def _name_for(self, group: NodeGroup, taken: set[str]) -> str:
        taken.update(self.created, self.removed, (name for _, name in self._joining))
        index = next(i for i in range(1, 1000) if f"{group.name}-{i}" not in taken)
        taken.add(f"{group.name}-{index}")
        return f"{group.name}-{index}"

    def _make_node(self, group: NodeGroup, name: str) -> None:
        resources = {"pods": "110", **group.allocatable}
        now = time.time()
        node = self.kube.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                                  GROUP_LABEL: group.name, **group.labels}},
            "status": {"capacity": resources, "allocatable": resources, "conditions": [{
                "type": "Ready", "status": "True", "reason": "KubeletReady",
                "message": "made by the stand-in autoscaler", "lastHeartbeatTime": _stamp(now),
                "lastTransitionTime": _stamp(now)}]}})
        self.created[name] = now
        if node["spec"].get("taints"):  # the not-ready taint admission adds on create
            self.kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": None}})

    def _answer(self, request: dict[str, Any], decision: Decision) -> Decision:
        now = _stamp(time.time())
        conditions = [{"type": "Accepted", "status": "True", "reason": "Accepted",
                       "message": "accepted by the stand-in autoscaler",
                       "lastTransitionTime": now}]
        conditions.append({"type": decision.state, "status": "True",
                           "reason": "NotProvisioned" if decision.state == "Failed"
                           else "Provisioned", "message": decision.message,
                           "lastTransitionTime": now})
        meta = request["metadata"]
        self.kube.patch(f"/apis/{API}/namespaces/{meta['namespace']}/{PLURAL}/"
                        f"{meta['name']}/status", {"status": {"conditions": conditions}})
        return decision

    # -- scale-down ----------------------------------------------------------------------
    def _group_of(self, node: dict[str, Any]) -> str:
        return str((node["metadata"].get("labels") or {}).get(GROUP_LABEL, ""))

    def _scale_down(self, nodes: list[dict[str, Any]], pods: list[dict[str, Any]]) -> None:
        busy = {p["spec"]["nodeName"] for p in pods}
        now = time.time()
        for node in nodes:
            name, group = node["metadata"]["name"], self.groups.get(self._group_of(node))
            annotations = node["metadata"].get("annotations") or {}
            if group is None or name in busy or annotations.get(SCALE_DOWN_DISABLED) == "true" \
                    or now - self.created.get(name, 0.0) < self.booking_seconds:
                self._unneeded.pop(name, None)
                continue
            since = self._unneeded.setdefault(name, now)
            size = sum(1 for n in nodes if self._group_of(n) == group.name)
            if now - since >= self.unneeded_seconds and size > group.min_size:
                self.kube.delete(f"/api/v1/nodes/{name}")
                self.removed.append(name)
                self._unneeded.pop(name, None)
                return  # one at a time: the sizes above are now stale
