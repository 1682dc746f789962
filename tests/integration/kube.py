"""Helpers for integration tests: objects through the project's own client, waiting, and
an invariant watcher that checks every pod event the API server sends."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from coscheduling import GROUP_LABEL
from coscheduling.api.membership import LABEL_ONLY
from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import parse_pod
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.groups import apis_for_tag, ours

PG_API = "batch.scheduler.tencent.com/v1"


def wait_until(condition: Callable[[], Any], timeout: float = 60.0, interval: float = 0.2,
               what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def pod_body(name: str, *, scheduler: str, cpu: str = "1", memory: str = "128Mi",
             group: str = "", priority_class: str = "", labels: Mapping[str, str] | None = None,
             extra: Mapping[str, str] | None = None, node_name: str = "") -> dict[str, Any]:
    all_labels = dict(labels or {})
    if group:
        all_labels[GROUP_LABEL] = group
    spec: dict[str, Any] = {
        "schedulerName": scheduler,
        "containers": [{"name": "main", "image": "busybox",
                        "resources": {"requests": {"cpu": cpu, "memory": memory, **(extra or {})},
                                      "limits": {"cpu": cpu, "memory": memory, **(extra or {})}}}],
        "terminationGracePeriodSeconds": 0,
    }
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": all_labels}, "spec": spec}


def create_pod(kube: KubeClient, namespace: str, body: Mapping[str, Any]) -> dict[str, Any]:
    return kube.create(f"/api/v1/namespaces/{namespace}/pods", body)


def create_podgroup(kube: KubeClient, namespace: str, name: str, min_member: int,
                    **spec: Any) -> dict[str, Any]:
    body = {"apiVersion": PG_API, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"minMember": min_member, **spec}}
    return kube.create(f"/apis/{PG_API}/namespaces/{namespace}/podgroups", body)


def delete_podgroup(kube: KubeClient, namespace: str, name: str) -> None:
    kube.delete(f"/apis/{PG_API}/namespaces/{namespace}/podgroups/{name}")


def delete_pod(kube: KubeClient, namespace: str, name: str) -> None:
    try:
        kube.request("DELETE", f"/api/v1/namespaces/{namespace}/pods/{name}",
                     body={"gracePeriodSeconds": 0})
    except ApiError as err:
        if not err.not_found:
            raise


def list_pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    return list(kube.get(f"/api/v1/namespaces/{namespace}/pods").get("items") or [])


def placement(kube: KubeClient, namespace: str) -> dict[str, str]:
    """Pod name -> node name ('' when pending)."""
    return {p["metadata"]["name"]: p["spec"].get("nodeName", "")
            for p in list_pods(kube, namespace)}


def bound_count(kube: KubeClient, namespace: str, group: str) -> int:
    return sum(1 for p in list_pods(kube, namespace)
               if (p["metadata"].get("labels") or {}).get(GROUP_LABEL) == group
               and p["spec"].get("nodeName"))


def pod_condition(kube: KubeClient, namespace: str, name: str, kind: str) -> dict[str, Any]:
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return {}


def events_for(kube: KubeClient, namespace: str, name: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{namespace}/events",
                     fieldSelector=f"involvedObject.name={name}").get("items") or []
    return list(items)


def exists(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path)
    except ApiError:
        return False
    return True


def start_waiting_gang(kube: KubeClient, namespace: str, sched: Any, group: str,
                       size: int = 3, **spec: Any) -> list[str]:
    """A gang of ``size`` one-cpu members, scheduled by hand until all but one wait at
    Permit (the scheduler's loop must not be running). Returns the waiting pods' names."""
    create_podgroup(kube, namespace, group, size, **spec)
    for i in range(size):
        create_pod(kube, namespace, pod_body(f"{group}-{i}", scheduler=sched.name,
                                             group=group))
    scheduler = sched.service.scheduler
    key = f"{namespace}/{group}"
    wait_until(lambda: len(scheduler.cache.group_pods(key)) == size,
               what=f"the {size} members of {group} in the scheduler's cache")
    while len([w for w in scheduler.waiting_pods if w.pod.group_key == key]) < size - 1:
        assert scheduler.schedule_one(timeout=5) is not None, "nothing left to schedule"
    return sorted(w.pod.name for w in scheduler.waiting_pods if w.pod.group_key == key)


def create_priority_class(kube: KubeClient, name: str, value: int) -> None:
    try:
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses",
                    {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": name}, "value": value})
    except ApiError as err:
        if not err.conflict:
            raise


class InvariantWatcher:
    """Watches every pod (and reads nodes and PodGroups) and checks, at each event:

    * no node is over-committed by the pods bound to it;
    * no pod changes node once bound (bound twice);
    * no gang is seen bound below minMember unless the scheduler had released at least
      minMember of its members together (binds of a released gang land a few ms apart).
      This needs ``released`` (the in-process scheduler's record); for a scheduler in another
      process only the settled check below applies;
    * at ``check_settled()``: every gang is bound 0 or >= minMember.
    """

    def __init__(self, kube: KubeClient, namespaces: Iterable[str],
                 released: Callable[[str], int] | None = None) -> None:
        self.kube = kube
        self.namespaces = set(namespaces)
        self.released = released
        self.violations: list[str] = []
        self.events = 0
        self._nodes: dict[str, dict[str, int]] = {}
        self._bound: dict[str, tuple[str, dict[str, int], str]] = {}
        self._label_min: dict[str, int] = {}  # label-only groups: the first member's minimum
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> InvariantWatcher:
        self._refresh_nodes()
        listing = self.kube.get("/api/v1/pods")
        self._rv = listing["metadata"]["resourceVersion"]
        for item in listing.get("items") or ():
            self._observe(item, judge_gang=False)  # inherited state, not the scheduler's act
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _refresh_nodes(self) -> None:
        nodes = {}
        for item in self.kube.get("/api/v1/nodes").get("items") or ():
            node = parse_node(item)
            nodes[node.name] = node.allocatable
        self._nodes = nodes

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                for event in self.kube.watch("/api/v1/pods", {"resourceVersion": self._rv}, 5):
                    if self._stop.is_set():
                        return
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if rv:
                        self._rv = rv
                    if event.get("type") == "DELETED":
                        with self._lock:
                            self._bound.pop(_key(obj), None)
                        continue
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._observe(obj)
            except ApiError:
                time.sleep(0.2)

    def _observe(self, obj: dict[str, Any], judge_gang: bool = True) -> None:
        pod = parse_pod(obj)
        if pod.terminal:  # a finished pod's room is free again (kube-scheduler's view too)
            with self._lock:
                self._bound.pop(pod.key, None)
            return
        if not pod.node_name:
            return
        with self._lock:
            self.events += 1
            previous = self._bound.get(pod.key)
            if previous is not None and previous[0] != pod.node_name:
                self.violations.append(f"{pod.key} moved from {previous[0]} to {pod.node_name}")
            self._bound[pod.key] = (pod.node_name, pod.requests, pod.group_key)
            if pod.membership.min_available:
                self._label_min.setdefault(pod.group_key, pod.membership.min_available)
            self._check_node(pod.node_name)
            # A terminating pod's events (its deletion, its eviction) say nothing about a
            # bind: a gang is judged on pods that are bound and staying.
            if (judge_gang and pod.group_key and pod.namespace in self.namespaces
                    and self.released and not pod.deleting):
                self._check_gang(pod.group_key)

    def _check_node(self, node_name: str) -> None:
        if node_name not in self._nodes:
            self._refresh_nodes()
        alloc = self._nodes.get(node_name)
        if alloc is None:
            return  # the node is gone (an earlier test's); nothing can be over-committed
        used: dict[str, int] = {}
        count = 0
        for node, requests, _ in self._bound.values():
            if node == node_name:
                count += 1
                for name, amount in requests.items():
                    used[name] = used.get(name, 0) + amount
        for name, amount in used.items():
            if amount > alloc.get(name, 0):
                self.violations.append(f"node {node_name} over-committed: {name} {amount} > "
                                       f"{alloc.get(name, 0)}")
        if count > alloc.get("pods", 0):
            self.violations.append(f"node {node_name} has {count} pods > {alloc.get('pods')}")

    def _min_member(self, group_key: str) -> int:
        """minMember of a gang of any kind: its object's, or a label-only group's label."""
        rest = group_key.split("/", 1)[1]
        if rest.partition("@")[2] == LABEL_ONLY:
            return self._label_min.get(group_key, 0)
        group = self._group(group_key)
        return group.min_member if group is not None else 0

    def _group(self, group_key: str) -> PodGroup | None:
        namespace, rest = group_key.split("/", 1)
        name, _, tag = rest.partition("@")
        for api in apis_for_tag(tag):
            try:
                raw = self.kube.get(f"/apis/{api.api_version}/namespaces/{namespace}/"
                                    f"{api.plural}/{name}")
            except ApiError:
                continue
            return api.parse(raw)
        return None

    def _check_gang(self, group_key: str) -> None:
        bound = sum(1 for _, _, g in self._bound.values() if g == group_key)
        minimum = self._min_member(group_key)
        if bound >= minimum:
            return
        released = self.released(group_key) if self.released is not None else 0
        if released < minimum:
            self.violations.append(
                f"gang {group_key} seen with {bound}/{minimum} bound and only {released} "
                "released by the scheduler")

    def check_settled(self) -> None:
        for namespace in self.namespaces:
            counts: dict[str, int] = {}
            for item in list_pods(self.kube, namespace):
                pod = parse_pod(item)
                if pod.group_key and pod.node_name:
                    counts[pod.group_key] = counts.get(pod.group_key, 0) + 1
                    if pod.membership.min_available:
                        self._label_min.setdefault(pod.group_key, pod.membership.min_available)
            for group_key, bound in counts.items():
                minimum = self._min_member(group_key)
                if 0 < bound < minimum:
                    self.violations.append(f"gang {group_key} settled with "
                                           f"{bound}/{minimum} bound")
            self._check_subgroups(namespace)
        assert not self.violations, self.violations

    def _check_subgroups(self, namespace: str) -> None:
        """Every subgroup of a gang of subgroups is bound 0 or >= its own minMember."""
        bound: Counter[tuple[str, str]] = Counter()
        groups: dict[str, PodGroup | None] = {}
        for item in list_pods(self.kube, namespace):
            pod = parse_pod(item)
            if not pod.group_key or not pod.node_name:
                continue
            if pod.group_key not in groups:
                groups[pod.group_key] = self._group(pod.group_key)
            group = groups[pod.group_key]
            if group is not None and group.subgroups is not None:
                name = group.subgroups.name_of(pod.labels, pod.membership.role)
                bound[(pod.group_key, name)] += bool(name)
        for (group_key, name), count in bound.items():
            group = groups[group_key]
            subs = group.subgroups if group is not None else None
            found = subs.get(name) if subs is not None else None
            if found is not None and 0 < count < found.min_member:
                self.violations.append(f"subgroup {name} of {group_key} settled with "
                                       f"{count}/{found.min_member} bound")


def _key(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace')}/{meta.get('name')}"


def podgroups_path(namespace: str) -> str:
    return ours.API.path.replace("/podgroups", f"/namespaces/{namespace}/podgroups")
