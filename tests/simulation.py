"""An in-memory cluster around the real scheduler, for unit tests of gang behaviour.

Everything is the production code (framework, plugins, queue, cache, event handlers)
except the Bind plugin, which records the binding and feeds it back as a watch event
would. Each bind also checks the invariants at the moment it happens.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from coscheduling.api.nodes import Node, parse_node
from coscheduling.api.podgroups import PodGroup, parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config import parse_config
from coscheduling.core.eventhandlers import NodeEvents, PodEvents, PodGroupEvents
from coscheduling.core.scheduler import Scheduler
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import BindPlugin
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.framework.status import Status
from coscheduling.plugins.registry import default_registry

GROUP_LABEL = "group.batch.scheduler.tencent.com"


class Violation(AssertionError):
    pass


class SimCluster:
    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        registry = default_registry()
        sim = self

        class RecordingBinder(BindPlugin):
            name = "RecordingBinder"

            def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
                pass

            def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
                return sim._bind(pod, node_name)

        registry.register("RecordingBinder", RecordingBinder)
        doc: dict[str, Any] = {
            "apiVersion": "config.batch.scheduler.tencent.com/v1",
            "kind": "SchedulerConfiguration",
            "podInitialBackoffSeconds": 0.01,
            "podMaxBackoffSeconds": 0.05,
            "plugins": {"bind": {"disabled": [{"name": "*"}],
                                 "enabled": [{"name": "RecordingBinder"}]}},
        }
        for key, value in (config or {}).items():
            if key == "plugins":  # the recording binder stays, whatever else a test enables
                doc[key] = {**value, **doc[key]}
            else:
                doc[key] = value
        self.evictions = RecordingEvictor(self)
        self.scheduler = Scheduler(parse_config(doc, registry), registry, client=None,
                                   evictor=self.evictions)
        self.pods = PodEvents(self.scheduler)
        self.nodes = NodeEvents(self.scheduler)
        self.groups = PodGroupEvents(self.scheduler)
        self.bound: dict[str, str] = {}
        self.bind_count: dict[str, int] = {}
        self.violations: list[str] = []
        self._lock = threading.Lock()
        self._seq = 0

    # -- objects ---------------------------------------------------------------------------
    def add_node(self, name: str, cpu: str = "8", memory: str = "32Gi", pods: int = 110,
                 labels: Mapping[str, str] | None = None, **extra: str) -> Node:
        node = node_record(name, cpu, memory, pods, labels, **extra)
        self.nodes.on_add(node)
        return node

    def delete_node(self, node: Node) -> None:
        self.nodes.on_delete(node)

    def add_group(self, name: str, min_member: int, namespace: str = "ns",
                  max_schedule_time: str | None = None, created: str = "",
                  topology: Mapping[str, Any] | None = None,
                  **more_spec: Any) -> PodGroup:
        spec: dict[str, Any] = {"minMember": min_member, **more_spec}
        if topology is not None:
            spec["topology"] = dict(topology)
        if max_schedule_time:
            spec["maxScheduleTime"] = max_schedule_time
        self._seq += 1
        group = group_record(name, namespace, spec, self._seq, created)
        self.groups.on_add(group)
        return group

    def add_pod(self, name: str, cpu: str = "1", group: str = "", priority: int = 0,
                namespace: str = "ns", memory: str = "1Gi",
                requests: Mapping[str, str] | None = None, never_preempt: bool = False,
                labels: Mapping[str, str] | None = None,
                annotations: Mapping[str, str] | None = None,
                spec: Mapping[str, Any] | None = None, **extra: str) -> Pod:
        """A pod asking for cpu, memory and ``extra``, or exactly ``requests`` if given;
        ``spec`` adds fields to its spec."""
        self._seq += 1
        labels = {**(labels or {}), **({GROUP_LABEL: group} if group else {})}
        asked = dict(requests) if requests is not None else {"cpu": cpu, "memory": memory,
                                                             **extra}
        pod = pod_record(name, namespace, self._seq, labels=labels, requests=asked, spec={
            **(spec or {}), "priority": priority,
            "preemptionPolicy": "Never" if never_preempt else "PreemptLowerPriority"},
            annotations=annotations)
        self.pods.on_add(pod)
        return pod

    def delete_pod(self, key: str) -> None:
        pod = self.scheduler.cache.pod(key)
        if pod is not None:
            self.pods.on_delete(pod)
            with self._lock:
                self.bound.pop(key, None)

    # -- binding ---------------------------------------------------------------------------
    def _bind(self, pod: Pod, node_name: str) -> Status:
        s = self.scheduler
        with s.cache.lock:
            self._check_release(pod)
            with self._lock:
                self.bind_count[pod.key] = self.bind_count.get(pod.key, 0) + 1
                if self.bind_count[pod.key] > 1:
                    self.violations.append(f"{pod.key} bound twice")
                self.bound[pod.key] = node_name
            bound = dataclasses.replace(pod, node_name=node_name)
            self.pods.on_update(pod, bound)
            self._check_nodes()
        return Status()

    def _check_release(self, pod: Pod) -> None:
        """A gang member may be bound only once minMember of its gang were released."""
        if not pod.group_key:
            return
        group = self.scheduler.listers.podgroup(pod.group_key)
        if group is None:
            return
        s = self.scheduler
        released = sum(
            1 for m in s.cache.group_pods(pod.group_key)
            if m.node_name or (s.cache.is_assumed(m.key) and s.waiting_pods.get(m.key) is None)
        )
        if released < group.min_member:
            self.violations.append(
                f"{pod.key} bound with only {released}/{group.min_member} of its gang released")

    def _check_nodes(self) -> None:
        for info in self.scheduler.cache.nodes():
            node = info.node
            assert node is not None
            for resource, amount in info.requested.items():
                if amount > node.allocatable.get(resource, 0):
                    self.violations.append(f"node {info.name} over-committed on {resource}")
            if len(info.pods) > node.allowed_pods:
                self.violations.append(f"node {info.name} has too many pods")

    # -- running ---------------------------------------------------------------------------
    def run(self, idle_rounds: int = 3, max_seconds: float = 30.0) -> None:
        """Schedule until nothing is left to try (waiting pods may still wait); evicted pods
        finish terminating whenever the loop is idle, as their kubelets would."""
        deadline = time.monotonic() + max_seconds
        idle = 0
        while idle < idle_rounds and time.monotonic() < deadline:
            result = self.scheduler.schedule_one(timeout=0.02)
            if result is not None:
                idle = 0
                continue
            self.settle()
            if self.evictions.finish():
                idle = 0
                continue
            counts = self.scheduler.queue.counts()
            idle = idle + 1 if counts["active"] + counts["backoff"] == 0 else 0
        self.settle()

    def settle(self) -> None:
        """Wait for queued binding work to finish."""
        pool = self.scheduler._pool
        pool.submit(lambda: None).result(timeout=10)
        for _ in range(3):
            futures = [pool.submit(lambda: None) for _ in range(pool._max_workers)]
            for future in futures:
                future.result(timeout=10)

    def bound_in_group(self, group: str, namespace: str = "ns") -> int:
        key = f"{namespace}/{group}"
        return sum(1 for p in self.scheduler.cache.group_pods(key) if p.node_name)

    def close(self) -> None:
        self.scheduler.stop()


def normalized_scores(plugin: Any, nodes: Iterable[NodeInfo], pod: Pod) -> dict[str, int]:
    """One PreFilter + Score plugin's normalized scores for ``pod`` on ``nodes``, as a
    profile's Score step sees them ({} when its PreFilter says Score may be skipped)."""
    state = CycleState()
    plugin.pre_filter(state, pod)
    if plugin.name in state.skip_score:
        return {}
    raw = {info.name: plugin.score(state, pod, info) for info in nodes}
    plugin.normalize_scores(state, pod, raw)
    return dict(raw)


def gang_of_three_on_three_nodes(config: Mapping[str, Any]) -> tuple[int, int, list[str]]:
    """A gang of three 1-cpu members on three empty 8-cpu nodes, under ``config``: (members
    bound, nodes they use, invariant violations), for tests of how a profile places a gang."""
    sim = SimCluster(config)
    try:
        for i in range(3):
            sim.add_node(f"n{i}", cpu="8")
        sim.add_group("g", 3)
        for i in range(3):
            sim.add_pod(f"p{i}", group="g")
        sim.run()
        return sim.bound_in_group("g"), len(set(sim.bound.values())), list(sim.violations)
    finally:
        sim.close()


class RecordingEvictor:
    """Preemption's writes in the simulation: victims are recorded, and checked at once
    against the gang rule (a gang keeps minMember bound members or loses them all); their
    deletion finishes when the loop is next idle, as a kubelet would finish it."""

    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.by: list[tuple[str, list[str]]] = []  # (preemptor, victim keys), in order
        self.nominated: dict[str, str] = {}
        self._pending: list[str] = []
        self._lock = threading.Lock()
        self.refused: set[str] = set()  # victims whose eviction the API server will refuse

    def evict(self, victims: Sequence[Pod], preemptor: str) -> None:
        refused = [p for p in victims if p.key in self.refused]
        keys = sorted(p.key for p in victims if p.key not in self.refused)
        with self._lock:
            self.by.append((preemptor, keys))
            self._pending += keys
        self._check_gangs(victims)
        for pod in refused:
            self.refused.discard(pod.key)  # once: the next eviction of it goes through
            self.sim.scheduler.ledger.failed(pod)

    def nominate(self, pod: Pod, node_name: str) -> None:
        self.nominated[pod.key] = node_name

    @property
    def victims(self) -> list[str]:
        return [key for _, keys in self.by for key in keys]

    def _check_gangs(self, victims: Sequence[Pod]) -> None:
        s = self.sim.scheduler
        gone = {p.key for p in victims}
        for group_key in {p.group_key for p in victims if p.group_key}:
            group = s.listers.podgroup(group_key)
            if group is None:
                continue
            bound = [m for m in s.cache.group_pods(group_key) if m.node_name]
            left = [m for m in bound if m.key not in gone]
            if 0 < len(left) < group.min_member:
                self.sim.violations.append(
                    f"preemption left {group_key} with {len(left)}/{group.min_member} bound")

    def finish(self) -> bool:
        """Delete the evicted pods that are still there; True if any was."""
        with self._lock:
            pending, self._pending = self._pending, []
        for key in pending:
            self.sim.delete_pod(key)
        return bool(pending)


def node_record(name: str, cpu: str = "8", memory: str = "32Gi", pods: int = 110,
                labels: Mapping[str, str] | None = None, **extra: str) -> Node:
    """A node as the nodes informer would deliver it."""
    alloc = {"cpu": cpu, "memory": memory, "pods": str(pods), **extra}
    return parse_node({"metadata": {"name": name, "uid": name, "resourceVersion": "1",
                                    "labels": {"kubernetes.io/hostname": name,
                                               **(labels or {})}},
                       "status": {"allocatable": alloc}})


def group_record(name: str, namespace: str, spec: Mapping[str, Any], seq: int,
                 created: str = "") -> PodGroup:
    """A PodGroup as its informer would deliver it (``seq`` orders creation times)."""
    return parse_podgroup({
        "metadata": {"name": name, "namespace": namespace, "uid": f"g-{name}",
                     "resourceVersion": str(seq), "creationTimestamp": created or _stamp(seq)},
        "spec": dict(spec),
    })


def pod_record(name: str, namespace: str, seq: int, *, labels: Mapping[str, str],
               requests: Mapping[str, str], spec: Mapping[str, Any] | None = None,
               annotations: Mapping[str, str] | None = None) -> Pod:
    """A pod of this scheduler as the pods informer would deliver it; ``spec`` adds fields
    (``nodeName`` makes it a bound pod)."""
    return parse_pod({
        "metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}",
                     "labels": dict(labels), "resourceVersion": str(seq),
                     "annotations": dict(annotations or {}),
                     "creationTimestamp": _stamp(seq)},
        "spec": {**(spec or {}), "schedulerName": "batch-scheduler",
                 "containers": [{"name": "c", "resources": {"requests": dict(requests)}}]},
    })


def _stamp(seq: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(1_700_000_000 + seq))
