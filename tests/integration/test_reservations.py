"""Reservations and backfill against the real API server (issue 24): a large gang is not
starved by a stream of small jobs; higher priorities, other pools and jobs that end in time
still run; maxReservationSeconds lets the room go; a restart rebuilds the reservation.

There are no kubelets: ``StandInKubelet`` does what they would, in the open: a bound pod is
marked Running (with its startTime) and Succeeded once its runtime has passed."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from typing import Any

import pytest

from coscheduling.api.runtimes import EXPECTED_RUNTIME_ANNOTATION
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    create_priority_class,
    events_for,
    list_pods,
    placement,
    pod_body,
    wait_until,
)

StartScheduler = Callable[..., Any]
PG = "/apis/batch.scheduler.tencent.com/v1/namespaces/{ns}/podgroups/{name}"
URGENT = "reservation-urgent"
# The mechanics of holding room, on gangs of 4 that reserve at once, with only the
# runtime-based backfill (the defaults' rules have tests of their own at the end).
MECHANICS = {"pluginConfig": [{"name": "Coscheduling", "args": {
    "reserveFromMembers": 1, "lendReclaimable": False}}]}


class StandInKubelet:
    """Marks bound pods Running, then Succeeded after ``runtimes[name]`` seconds (pods not
    listed run until deleted)."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.runtimes: dict[str, float] = {}
        self.started: dict[str, float] = {}
        self.finished: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> StandInKubelet:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.wait(0.1):
            try:
                self.step()
            except ApiError:
                continue  # a pod deleted under us: the next step sees the new state

    def step(self) -> None:
        now = time.time()
        for pod in list_pods(self.kube, self.namespace):
            name = pod["metadata"]["name"]
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if not (pod.get("spec") or {}).get("nodeName") or phase in ("Succeeded", "Failed"):
                continue
            if name not in self.started:
                self.started[name] = now
                self._status(name, {"phase": "Running", "startTime": _stamp(now)})
            elif name in self.runtimes and now - self.started[name] >= self.runtimes[name]:
                self._status(name, {"phase": "Succeeded"})
                self.finished.append(name)

    def _status(self, name: str, status: Mapping[str, Any]) -> None:
        self.kube.patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}/status",
                        {"status": dict(status)})


def _on(kube: KubeClient, namespace: str, name: str) -> str:
    """The node the pod is bound to ("" while pending)."""
    return placement(kube, namespace).get(name, "")


def _stamp(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def kubelet(kube: KubeClient, namespace: str) -> Iterator[StandInKubelet]:
    with StandInKubelet(kube, namespace) as standin:
        yield standin


def _job(kube: KubeClient, namespace: str, scheduler: str, name: str, *, cpu: str = "1",
         runtime: str = "", selector: Mapping[str, str] | None = None,
         priority_class: str = "") -> None:
    body = pod_body(name, scheduler=scheduler, cpu=cpu, priority_class=priority_class)
    if runtime:
        body["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: runtime}
    if selector:
        body["spec"]["nodeSelector"] = dict(selector)
    create_pod(kube, namespace, body)


def _gang(kube: KubeClient, namespace: str, scheduler: str, name: str, size: int, *,
          selector: Mapping[str, str] | None = None, **spec: Any) -> None:
    create_podgroup(kube, namespace, name, size, **spec)
    for i in range(size):
        body = pod_body(f"{name}-{i}", scheduler=scheduler, group=name)
        if selector:
            body["spec"]["nodeSelector"] = dict(selector)
        create_pod(kube, namespace, body)


def _status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(PG.format(ns=namespace, name=name)).get("status") or {}


def _reserved(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(_status(kube, namespace, name).get("reservation") or {})


def _fill(kube: KubeClient, namespace: str, scheduler: str, kubelet: StandInKubelet,
          prefix: str, count: int, runtime: float | None = None, annotate: bool = False,
          selector: Mapping[str, str] | None = None) -> list[str]:
    names = [f"{prefix}-{i}" for i in range(count)]
    for name in names:
        if runtime is not None:
            kubelet.runtimes[name] = runtime
        _job(kube, namespace, scheduler, name, selector=selector,
             runtime=f"{int(runtime)}s" if annotate and runtime else "")
    wait_until(lambda: all(placement(kube, namespace).get(n) for n in names),
               what=f"{prefix} jobs bound")
    return names


def test_a_gang_is_not_starved_by_a_stream_of_small_jobs(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    """The issue's scenario: one 4-cpu node, 1-cpu jobs of 3 s arriving every 0.6 s, a gang
    of 4 x 1 cpu created 2 s in. The gang runs within a few job runtimes, whole. With the
    defaults: a gang asking for the whole cluster reserves at once (reserveFromShare)."""
    sched = start_scheduler()
    make_node(f"res-{uuid.uuid4().hex[:6]}", cpu="4")
    started = time.monotonic()
    gang_at = None
    for i in range(100):
        name = f"job-{i}"
        kubelet.runtimes[name] = 3.0
        _job(kube, namespace, sched.name, name)
        if gang_at is None and time.monotonic() - started >= 2.0:
            _gang(kube, namespace, sched.name, "big", 4)
            gang_at = time.monotonic()
        if gang_at is not None and bound_count(kube, namespace, "big") == 4:
            break
        time.sleep(0.6)
    assert gang_at is not None
    assert bound_count(kube, namespace, "big") == 4, "the gang starved behind the stream"
    # Small jobs kept running before the gang's room was all held; after it, they waited.
    assert len(kubelet.finished) >= 4
    events = [e for e in events_for(kube, namespace, "big") if e.get("reason") == "Reserved"]
    assert events, "no Reserved event on the PodGroup"


def test_a_higher_priority_pod_is_bound_at_once_during_a_reservation(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    create_priority_class(kube, URGENT, 1_000_000)
    sched = start_scheduler(MECHANICS)
    _one_core_reserved(kube, namespace, sched.name, make_node, kubelet, "long")
    create_pod(kube, namespace, pod_body("urgent", scheduler=sched.name,
                                         priority_class=URGENT))
    wait_until(lambda: _on(kube, namespace, "urgent"), what="the urgent pod bound")
    assert _reserved(kube, namespace, "big"), "the reservation goes on, re-planned"
    assert bound_count(kube, namespace, "big") == 0
    assert all(_on(kube, namespace, f"long-{i}") for i in (1, 2, 3)), \
        "it took the held core: nothing was evicted"


def _one_core_reserved(kube: KubeClient, namespace: str, scheduler: str, make_node: Any,
                       kubelet: StandInKubelet, prefix: str) -> None:
    """A 4-cpu node full of jobs ``prefix``-0..3, a gang "big" of 4 reserving it, and
    ``prefix``-0 gone: the reservation holds 1 cpu."""
    make_node(f"res-{uuid.uuid4().hex[:6]}", cpu="4")
    _fill(kube, namespace, scheduler, kubelet, prefix, 4)
    _gang(kube, namespace, scheduler, "big", 4)
    wait_until(lambda: _reserved(kube, namespace, "big"), what="a reservation for the gang")
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/{prefix}-0", gracePeriodSeconds=0)
    wait_until(lambda: _held_cpu(kube, namespace, "big") == "1", what="1 cpu held")


def _held_cpu(kube: KubeClient, namespace: str, name: str) -> str:
    nodes = _reserved(kube, namespace, name).get("nodes") or [{}]
    return str((nodes[0].get("held") or {}).get("cpu", "0"))


def test_a_gang_held_to_pool_a_leaves_pool_b_busy_with_small_jobs(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    sched = start_scheduler(MECHANICS)
    pool = f"pool-{uuid.uuid4().hex[:6]}"
    node_a, node_b = f"{pool}-a", f"{pool}-b"
    make_node(node_a, cpu="4", labels={"pool": f"{pool}-a"})
    make_node(node_b, cpu="4", labels={"pool": f"{pool}-b"})
    on_a, on_b = {"pool": f"{pool}-a"}, {"pool": f"{pool}-b"}
    _fill(kube, namespace, sched.name, kubelet, "a", 4, selector=on_a)
    _fill(kube, namespace, sched.name, kubelet, "b", 4, selector=on_b)
    _gang(kube, namespace, sched.name, "big", 4, selector=on_a)
    wait_until(lambda: _reserved(kube, namespace, "big"), what="a reservation")
    assert [n["node"] for n in _reserved(kube, namespace, "big")["nodes"]] == [node_a]
    for i in range(4):  # pool b turns over: its new jobs run at once
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/b-{i}", gracePeriodSeconds=0)
        _job(kube, namespace, sched.name, f"b-next-{i}")
    wait_until(lambda: sum(1 for n in placement(kube, namespace).values() if n == node_b) == 4,
               what="pool b full of new small jobs")
    for i in range(4):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/a-{i}", gracePeriodSeconds=0)
    wait_until(lambda: bound_count(kube, namespace, "big") == 4, what="the gang on pool a")
    assert {placement(kube, namespace)[f"big-{i}"] for i in range(4)} == {node_a}


def test_only_a_job_with_a_known_short_runtime_backfills(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    """The running jobs declare 300 s: a 20 s job may use the held core; a 3000 s job and one
    of unknown runtime wait."""
    sched = start_scheduler(MECHANICS)
    make_node(f"res-{uuid.uuid4().hex[:6]}", cpu="4")
    _fill(kube, namespace, sched.name, kubelet, "run", 4, runtime=300, annotate=True)
    kubelet.runtimes.clear()  # they are deleted by hand below, not finished
    _gang(kube, namespace, sched.name, "big", 4)
    wait_until(lambda: _reserved(kube, namespace, "big").get("estimatedStart"),
               what="a reservation with an estimated start")
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/run-0", gracePeriodSeconds=0)
    wait_until(lambda: _held_cpu(kube, namespace, "big") == "1", what="1 cpu held")
    _job(kube, namespace, sched.name, "long", runtime="3000s")
    _job(kube, namespace, sched.name, "unknown")
    wait_until(lambda: _unschedulable(kube, namespace, "long")
               and _unschedulable(kube, namespace, "unknown"), what="both refused")
    _job(kube, namespace, sched.name, "short", runtime="20s")
    wait_until(lambda: _on(kube, namespace, "short"), what="the short job backfilled")
    assert not _on(kube, namespace, "long")
    assert not _on(kube, namespace, "unknown")


def _unschedulable(kube: KubeClient, namespace: str, name: str) -> bool:
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")
    return any(c.get("type") == "PodScheduled" and c.get("status") == "False"
               for c in (pod.get("status") or {}).get("conditions") or ())


def test_max_reservation_seconds_releases_the_room(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    sched = start_scheduler(MECHANICS)
    make_node(f"res-{uuid.uuid4().hex[:6]}", cpu="4")
    _fill(kube, namespace, sched.name, kubelet, "run", 4)
    _gang(kube, namespace, sched.name, "big", 4, maxReservationSeconds=3)
    wait_until(lambda: _reserved(kube, namespace, "big"), what="a reservation")
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/run-0", gracePeriodSeconds=0)
    _job(kube, namespace, sched.name, "late")
    wait_until(lambda: any(e.get("reason") == "ReservationExpired"
                           for e in events_for(kube, namespace, "big")),
               what="the reservation expired")
    wait_until(lambda: _on(kube, namespace, "late"), what="the late job bound")
    wait_until(lambda: _condition(kube, namespace, "big", "Reserved").get("reason")
               == "ReservationExpired", what="the Reserved condition turned False")
    assert _condition(kube, namespace, "big", "Reserved")["status"] == "False"
    assert not _reserved(kube, namespace, "big")


def _condition(kube: KubeClient, namespace: str, name: str, kind: str) -> dict[str, Any]:
    return next((c for c in _status(kube, namespace, name).get("conditions") or ()
                 if c["type"] == kind), {})


def test_a_restart_rebuilds_the_reservation_and_never_leaves_a_partial_gang(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    sched = start_scheduler(MECHANICS)
    _one_core_reserved(kube, namespace, sched.name, make_node, kubelet, "run")
    sched.close()  # its watcher judges gangs by its own releases: it stops watching too
    again = start_scheduler({**MECHANICS, "schedulerNames": [sched.name]})
    wait_until(lambda: _held_cpu(kube, namespace, "big") == "1",
               what="the reservation rebuilt by the new scheduler")
    text = explain(kube, namespace, "big")
    assert "Reservation since" in text and "cpu 1/4" in text, text
    _job(kube, namespace, again.name, "late")
    for i in range(1, 4):
        kube.delete(f"/api/v1/namespaces/{namespace}/pods/run-{i}", gracePeriodSeconds=0)
    wait_until(lambda: bound_count(kube, namespace, "big") == 4, what="the gang placed whole")
    assert not _on(kube, namespace, "late")


def test_a_malformed_runtime_gets_a_warning_naming_the_annotation(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler(MECHANICS)
    make_node(f"res-{uuid.uuid4().hex[:6]}", cpu="4")
    _job(kube, namespace, sched.name, "odd", runtime="soon")
    wait_until(lambda: any(e.get("reason") == "InvalidAnnotation"
                           and EXPECTED_RUNTIME_ANNOTATION in e.get("message", "")
                           for e in events_for(kube, namespace, "odd")),
               what="a Warning naming the annotation")
    wait_until(lambda: _on(kube, namespace, "odd"), what="the pod still runs")


def test_a_short_job_backfills_beside_a_large_gang_that_still_starts_on_time(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kubelet: StandInKubelet) -> None:
    """The defaults but lendReclaimable on: two 4-cpu nodes busy with 20 s jobs, a gang of 8
    (large enough to reserve at once). A 3 s job uses the core a job left early on the
    reserved nodes and is gone before the others end; then a job of no known end borrows that
    core, and is evicted for the gang once the others have ended; a 600 s job never gets in;
    the gang starts whole."""
    sched = start_scheduler({"pluginConfig": [{"name": "Coscheduling", "args": {
        "lendReclaimable": True}}]})
    nodes = {f"res-{uuid.uuid4().hex[:6]}" for _ in range(2)}
    for node in nodes:
        make_node(node, cpu="4")
    running = _fill(kube, namespace, sched.name, kubelet, "run", 8, runtime=20,
                    annotate=True)
    _gang(kube, namespace, sched.name, "big", 8)
    wait_until(lambda: _reserved(kube, namespace, "big").get("estimatedStart"),
               what="a reservation with an estimated start")
    assert {n["node"] for n in _reserved(kube, namespace, "big")["nodes"]} == nodes
    kube.delete(f"/api/v1/namespaces/{namespace}/pods/run-0", gracePeriodSeconds=0)
    kubelet.runtimes["quick"] = 3.0
    _job(kube, namespace, sched.name, "quick", runtime="3s")
    _job(kube, namespace, sched.name, "slow", runtime="600s")
    wait_until(lambda: _on(kube, namespace, "quick"), what="the short job backfilled")
    assert _on(kube, namespace, "quick") in nodes
    _job(kube, namespace, sched.name, "open")
    wait_until(lambda: _on(kube, namespace, "open"), what="the open-ended job borrowed the core")
    assert _on(kube, namespace, "open") in nodes
    wait_until(lambda: bound_count(kube, namespace, "big") == 8, what="the gang placed whole")
    wait_until(lambda: any(e.get("reason") == "Preempted" and "gang" in e.get("message", "")
                           and "big" in e.get("message", "")
                           for e in events_for(kube, namespace, "open")),
               what="the borrower evicted for the gang")
    finished = kubelet.finished
    assert "quick" in finished, "the backfilled job was still running when the gang started"
    assert finished.index("quick") < max(finished.index(n) for n in running[1:]), \
        "the short job ended before the jobs the gang waited for: it delayed nothing"
    assert not _on(kube, namespace, "slow"), "a job ending after the start took held room"
