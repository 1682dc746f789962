"""PodGroup status and conditions, pod events and conditions, metrics, explain (issue 6)."""

from __future__ import annotations

import re
import threading
import urllib.request
from collections.abc import Callable
from itertools import pairwise
from typing import Any

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.groupstatus import _without_times
from coscheduling.commands.explain import explain
from tests.integration.kube import (
    PG_API,
    bound_count,
    create_pod,
    create_podgroup,
    delete_pod,
    events_for,
    placement,
    pod_body,
    pod_condition,
    start_waiting_gang,
    wait_until,
)

StartScheduler = Callable[..., Any]


def _group(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"/apis/{PG_API}/namespaces/{namespace}/podgroups/{name}")


def _status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(_group(kube, namespace, name).get("status") or {})


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or () if c["type"] == kind), {})


class GroupWatch:
    """Records every version of one PodGroup the API server sends (each status write)."""

    def __init__(self, kube: KubeClient, namespace: str, name: str) -> None:
        self.versions: list[dict[str, Any]] = []
        self._stop = threading.Event()
        raw = _group(kube, namespace, name)
        self._rv = raw["metadata"]["resourceVersion"]
        self.versions.append(raw)
        self._path = f"/apis/{PG_API}/namespaces/{namespace}/podgroups"
        self._kube, self._name = kube, name
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                query = {"resourceVersion": self._rv,
                         "fieldSelector": f"metadata.name={self._name}"}
                for event in self._kube.watch(self._path, query, 2):
                    obj = event.get("object") or {}
                    if event.get("type") == "MODIFIED":
                        self.versions.append(obj)
                        self._rv = obj["metadata"]["resourceVersion"]
                    if self._stop.is_set():
                        return
            except ApiError:
                pass

    @property
    def phases(self) -> list[str]:
        seen: list[str] = []
        for version in self.versions:
            phase = (version.get("status") or {}).get("phase")
            if phase and (not seen or seen[-1] != phase):
                seen.append(phase)
        return seen

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


def _set_phase(kube: KubeClient, namespace: str, name: str, phase: str) -> None:
    kube.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
               {"status": {"phase": phase}})


def test_gang_status_goes_pending_scheduled_running_finished(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("obs-life", cpu="8")
    create_podgroup(kube, namespace, "life", 3)
    wait_until(lambda: _status(kube, namespace, "life").get("phase") == "PreScheduling",
               what="PreScheduling while no member exists")
    watch = GroupWatch(kube, namespace, "life")
    try:
        for i in range(3):
            create_pod(kube, namespace, pod_body(f"life-{i}", scheduler=sched.name,
                                                 group="life"))
        wait_until(lambda: _status(kube, namespace, "life").get("phase") == "Scheduled",
                   what="Scheduled")
        status = _status(kube, namespace, "life")
        assert status["scheduled"] == 3 and status["running"] == 0
        assert _condition(status, "Scheduled")["status"] == "True"
        for i in range(3):
            _set_phase(kube, namespace, f"life-{i}", "Running")
        wait_until(lambda: _status(kube, namespace, "life").get("running") == 3, what="running")
        assert _status(kube, namespace, "life")["phase"] == "Running"
        for i in range(3):
            _set_phase(kube, namespace, f"life-{i}", "Succeeded")
        wait_until(lambda: _status(kube, namespace, "life").get("phase") == "Finished",
                   what="Finished")
        status = _status(kube, namespace, "life")
        assert status["succeeded"] == 3 and status["running"] == 0 and status["scheduled"] == 3
    finally:
        watch.stop()
    phases = watch.phases
    order = [p for p in phases if p in ("Scheduled", "Running", "Finished")]
    assert order == ["Scheduled", "Running", "Finished"], phases
    assert phases[0] in ("PreScheduling", "Pending", "Scheduling"), phases


def test_timeout_conditions_events_and_pod_conditions(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    make_node("obs-to", cpu="4")
    sched = start_scheduler(start=False)
    sched.start(loops=False)
    scheduler = sched.service.scheduler
    waiting = start_waiting_gang(kube, namespace, sched, "slow", 3, maxScheduleTime="3s")
    assert len(waiting) == 2
    delete_pod(kube, namespace, ({"slow-0", "slow-1", "slow-2"} - set(waiting)).pop())
    # While waiting: PodScheduled=False/Unschedulable and a Waiting event on the members.
    condition = wait_until(lambda: pod_condition(kube, namespace, waiting[0], "PodScheduled"),
                           timeout=10, what="the waiting member's condition")
    assert condition["status"] == "False" and condition["reason"] == "Unschedulable"
    # The count is the one when this member started waiting (1/3 or 2/3 ready).
    assert re.search(r"waiting for [12] more members of PodGroup \S+/slow, [12]/3 ready",
                     condition["message"]), condition["message"]
    wait_until(lambda: any(e["reason"] == "Waiting" for e in events_for(kube, namespace,
                                                                       waiting[0])),
               timeout=10, what="a Waiting event")
    # After the deadline: TimedOut (with how many waited), Frozen, Unschedulable.
    status = wait_until(
        lambda: (s := _status(kube, namespace, "slow")) and _condition(s, "TimedOut") and s,
        timeout=15, what="a TimedOut condition")
    timed_out = _condition(status, "TimedOut")
    assert timed_out["status"] == "True"
    assert "2 members were waiting when maxScheduleTime (3s) ran out" in timed_out["message"]
    assert _condition(status, "Frozen")["status"] == "True"
    # What blocks it now: the deleted member was not replaced.
    assert "2 of minMember 3 exist" in _condition(status, "Unschedulable")["message"]
    for name in waiting:
        wait_until(lambda n=name: any(
            e["reason"] == "FailedScheduling" and ("timed out" in e["message"]
                                                   or "rejected with its gang" in e["message"])
            for e in events_for(kube, namespace, n)), timeout=10, what="rejection event")
    # The metrics agree with what happened.
    scheduler.start_loops()
    metrics = _scrape(sched)
    assert _value(metrics, "coscheduling_gangs_timed_out_total") == 1
    assert _value(metrics, 'scheduler_schedule_attempts_total{result="scheduled"') >= 2
    assert _value(metrics, 'scheduler_permit_wait_duration_seconds_count{result="rejected"}') == 2


def test_failed_scheduling_counts_nodes_by_reason(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node("obs-small", cpu="2")
    make_node("obs-tainted", cpu="64", taints=[{"key": "dedicated", "value": "gpu",
                                                "effect": "NoSchedule"}])
    create_pod(kube, namespace, pod_body("big", scheduler=sched.name, cpu="16"))
    condition = wait_until(lambda: pod_condition(kube, namespace, "big", "PodScheduled"),
                           what="the condition")
    nodes = sched.service.scheduler.cache.node_count()
    assert condition["message"].startswith(f"0/{nodes} nodes are available: ")
    assert "1 Insufficient cpu" in condition["message"]
    assert "1 node(s) had untolerated taint {dedicated: gpu}" in condition["message"]
    wait_until(lambda: any(e["reason"] == "FailedScheduling" and e["type"] == "Warning"
                           for e in events_for(kube, namespace, "big")), what="the event")
    # An unschedulable gang says how many members cannot be placed and why.
    create_podgroup(kube, namespace, "wide", 3)
    for i in range(3):
        create_pod(kube, namespace, pod_body(f"wide-{i}", scheduler=sched.name, cpu="1500m",
                                             group="wide"))
    pattern = r"2/3 members of the gang cannot be placed \(1 placed or reserved\)"
    message = wait_until(
        lambda: re.search(pattern, m := _condition(_status(kube, namespace, "wide"),
                                                   "Unschedulable").get("message", "")) and m,
        what="the gang's Unschedulable condition with counts")
    assert "Insufficient cpu" in message
    text = explain(kube, namespace, "wide")
    print(text)
    for i in range(3):
        assert f"wide-{i}" in text
    assert "Unschedulable" in text and "Waiting for: 3 more members" in text


def test_gang_of_200_costs_a_bounded_number_of_status_writes(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """Status writes are coalesced: never two for one group within the writer's interval
    (1 s, on its own clock), and only when the status changed. Checked write by write, so
    the test does not depend on how fast this machine binds 200 pods; 200 unmerged writes
    would break both rules."""
    sched = start_scheduler()
    for i in range(2):
        make_node(f"obs-big-{i}", cpu="128", pods=110)
    create_podgroup(kube, namespace, "big", 200)
    watch = GroupWatch(kube, namespace, "big")
    try:
        for i in range(200):
            create_pod(kube, namespace, pod_body(f"big-{i}", scheduler=sched.name, cpu="100m",
                                                 memory="16Mi", group="big"))
        wait_until(lambda: bound_count(kube, namespace, "big") == 200, timeout=120,
                   what="200 bound")
        wait_until(lambda: _status(kube, namespace, "big").get("scheduled") == 200,
                   what="status caught up")
    finally:
        watch.stop()
    writer = sched.service.status_writer
    assert writer is not None
    times = [at for key, at in writer.history if key == f"{namespace}/big"]
    writes = len(watch.versions) - 1
    assert writes == len(times) >= 1, f"{writes} writes seen, {len(times)} made"
    gaps = [later - earlier for earlier, later in pairwise(times)]
    assert all(gap >= writer.min_interval for gap in gaps), gaps
    statuses = [_without_times(v["status"]) for v in watch.versions[1:]]
    assert all(a != b for a, b in pairwise(statuses)), watch.phases
    assert len(set(placement(kube, namespace).values())) == 2


def _scrape(sched: Any) -> str:
    port = sched.service.http.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    for path, code in (("/healthz", 200), ("/readyz", 200)):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            assert response.status == code
    return text


def _value(metrics: str, prefix: str) -> float:
    total = 0.0
    found = False
    for line in metrics.splitlines():
        if line.startswith(prefix) and not line.startswith("#"):
            total += float(line.rsplit(" ", 1)[1])
            found = True
    assert found, f"{prefix} not in metrics"
    return total
