"""Scheduling gates: a gated member is not a member yet (not counted toward minMember, in
status or in admission), and its gang waits for it without being failed."""

from __future__ import annotations

import dataclasses
from typing import Any

from coscheduling.api import podgroups as pg
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Status
from coscheduling.plugins.coscheduling import Coscheduling
from tests.simulation import GROUP_LABEL, SimCluster


def gated_member(name: str, group: str) -> Pod:
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "labels": {GROUP_LABEL: group}},
        "spec": {"schedulerName": "batch-scheduler",
                 "schedulingGates": [{"name": "example.com/quota"}],
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]},
    })


def gang_plugin(sim: SimCluster) -> Coscheduling:
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    return plugin


def status(sim: SimCluster, group: str) -> dict[str, Any]:
    found = gang_plugin(sim).status_of(f"ns/{group}")
    assert found is not None
    return found.status


def held_by_gates(sim: SimCluster, key: str) -> bool:
    """What the scheduler decides when ``key``'s attempt fails at PreFilter: a gate wait?"""
    plugin = gang_plugin(sim)
    with sim.scheduler.cache.lock:
        pod = sim.scheduler.cache.pod(key)
        assert pod is not None
        status = sim.scheduler.cycles.pre_filter(CycleState(), pod)
        assert not status.ok
        return plugin.held_by_gates(pod, status)


def two_members_and_a_gated_one(sim: SimCluster, min_member: int) -> Pod:
    """Gang g of ``min_member``: members a and b, and c held by a scheduling gate."""
    sim.add_node("n1")
    sim.add_group("g", min_member)
    sim.add_pod("a", group="g")
    sim.add_pod("b", group="g")
    gated = gated_member("c", "g")
    sim.pods.on_add(gated)
    sim.run()
    return gated


def test_gated_member_is_not_counted_and_the_gang_waits_until_it_is_ungated(
        sim: SimCluster) -> None:
    gated = two_members_and_a_gated_one(sim, 3)

    assert sim.bound == {}
    with sim.scheduler.cache.lock:
        counts = gang_plugin(sim).manager.counts("ns/g")
    assert (counts.members, len(counts.pending)) == (2, 2)
    assert sim.scheduler.queue.get(gated.key) is None  # gated pods are not queued
    written = status(sim, "g")
    assert written["phase"] == pg.PHASE_PRE_SCHEDULING
    assert written["conditions"] == [{
        "type": "Unschedulable", "status": "True", "reason": "SchedulingGated",
        "message": "waiting for member pods: 2 of minMember 3 exist (1 more held by "
                   "spec.schedulingGates, not counted)"}]
    # Waiting for members is not a failed attempt: the gang is not frozen, and its members
    # are reported as held by the gates (no FailedScheduling), the gated pod not at all.
    assert gang_plugin(sim).manager.frozen("ns/g") is None
    assert held_by_gates(sim, "ns/a")
    # A failure of anything else is reported as the failure it is, gates or not.
    plugin = gang_plugin(sim)
    other = Status.unschedulable("spec.resourceClaims is not supported",
                                 plugin="UnsupportedFields")
    with sim.scheduler.cache.lock:
        assert not plugin.held_by_gates(sim.scheduler.cache.pod("ns/a"), other)

    sim.pods.on_update(gated, dataclasses.replace(gated, gated=False))
    sim.run()
    assert sorted(sim.bound) == ["ns/a", "ns/b", "ns/c"]
    assert status(sim, "g")["phase"] == pg.PHASE_SCHEDULED


def test_gated_members_beyond_min_member_do_not_hold_the_gang_back(sim: SimCluster) -> None:
    two_members_and_a_gated_one(sim, 2)
    assert sorted(sim.bound) == ["ns/a", "ns/b"]
    with sim.scheduler.cache.lock:
        counts = gang_plugin(sim).manager.counts("ns/g")
    assert (counts.members, counts.placed, counts.pending) == (2, 2, [])


def test_a_gang_short_of_members_that_do_not_exist_yet_is_not_held_by_gates(
        sim: SimCluster) -> None:
    """Gates explain the wait only when the gated members would complete the gang."""
    two_members_and_a_gated_one(sim, 4)
    assert not held_by_gates(sim, "ns/a")
    conditions = status(sim, "g")["conditions"]
    assert [c["reason"] for c in conditions] == ["GangUnschedulable"]
