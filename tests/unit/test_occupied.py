"""occupiedBy: one controller's pods own a gang; nobody else's (nor a bare pod) may join it,
including before the first status write, and the owner is never left unwritten (issue 13)."""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.framework.status import Code
from coscheduling.plugins.coscheduling.status import occupied_by
from tests.simulation import GROUP_LABEL, SimCluster

JOB_A = ("job-a", "uid-a")
JOB_B = ("job-b", "uid-b")


def _pod(name: str, owner: tuple[str, str] | None, created: int, node: str = "") -> Pod:
    meta: dict[str, Any] = {
        "name": name, "namespace": "ns", "uid": f"u-{name}",
        "labels": {GROUP_LABEL: "g"}, "resourceVersion": str(created),
        "creationTimestamp": f"2026-01-01T00:00:{created:02d}Z"}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner[0],
                                    "uid": owner[1], "controller": True}]
    spec: dict[str, Any] = {"schedulerName": "batch-scheduler", "containers": [
        {"name": "c", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]}
    if node:
        spec["nodeName"] = node
    return parse_pod({"metadata": meta, "spec": spec})


def _group(occupied: str = "") -> Any:
    return parse_podgroup({"metadata": {"name": "g", "namespace": "ns", "uid": "g",
                                        "resourceVersion": "1",
                                        "creationTimestamp": "2026-01-01T00:00:00Z"},
                           "spec": {"minMember": 2},
                           "status": {"occupiedBy": occupied} if occupied else {}})


@pytest.mark.parametrize(("occupied", "members", "expected"), [
    ("", [], ""),
    ("", [("a", JOB_A, 1, "")], ""),  # nothing placed yet
    ("", [("a", JOB_A, 1, "n1")], "Job/job-a/uid-a"),
    # two owners placed before the first write: the oldest member's owner, not "" for good
    ("", [("b", JOB_B, 2, "n1"), ("a", JOB_A, 1, "n1")], "Job/job-a/uid-a"),
    ("", [("bare", None, 1, "n1"), ("b", JOB_B, 2, "n1")], "Job/job-b/uid-b"),
    ("", [("bare", None, 1, "n1")], ""),
    ("Job/job-b/uid-b", [("a", JOB_A, 1, "n1")], "Job/job-b/uid-b"),  # kept once written
])
def test_occupant_of_a_group(occupied: str, members: list[Any], expected: str) -> None:
    pods = [_pod(name, owner, created, node) for name, owner, created, node in members]
    assert occupied_by(_group(occupied), pods, lambda p: bool(p.node_name)) == expected


def _run_one(sim: SimCluster, key: str) -> Any:
    """Schedule exactly ``key``: the other queued pods step aside for one cycle."""
    queue = sim.scheduler.queue
    aside = [q.pod for p in sim.scheduler.cache.group_pods("ns/g")
             if p.key != key and (q := queue.get(p.key)) is not None]
    for pod in aside:
        queue.delete(pod.key)
    result = sim.scheduler.schedule_one(timeout=1)
    for pod in aside:
        queue.add(pod)
    assert result is not None and result.pod_key == key
    return result


def test_a_bare_pod_cannot_join_an_occupied_group(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.groups.on_add(_group("Job/job-a/uid-a"))
    sim.pods.on_add(_pod("bare", None, 1))
    result = _run_one(sim, "ns/bare")
    assert result.status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "is occupied by Job/job-a/uid-a" in result.status.message
    assert "belongs to no controller" in result.status.message


def test_a_second_owner_is_refused_before_the_first_status_write(sim: SimCluster) -> None:
    """Job A's member is placed (waiting at Permit) and no status was written yet: Job B's
    pod is refused already, from what the scheduler itself holds."""
    sim.add_node("n1")
    sim.groups.on_add(_group())
    sim.pods.on_add(_pod("a0", JOB_A, 1))
    sim.pods.on_add(_pod("a1", JOB_A, 2))
    first = _run_one(sim, "ns/a0")
    assert first.status.code == Code.WAIT
    sim.pods.on_add(_pod("b0", JOB_B, 3))
    refused = _run_one(sim, "ns/b0")
    assert refused.status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert "is occupied by Job/job-a/uid-a; this pod belongs to Job/job-b/uid-b" \
        in refused.status.message
    allowed = _run_one(sim, "ns/a1")
    assert allowed.status.code == Code.SUCCESS
    sim.settle()
    assert sorted(sim.bound) == ["ns/a0", "ns/a1"]
