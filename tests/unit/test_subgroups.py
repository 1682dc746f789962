"""Gangs of gangs and gangs that change size (issue 26), on the in-memory cluster: per-role
minimums, minGroups of subgroups placed whole, a subgroup per rack, elastic minMember, and
preemption that gives up a surplus subgroup whole."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling.api.podgroups import SUBGROUP_LABEL, SubGroup, parse_podgroup
from coscheduling.groups import volcano
from coscheduling.plugins.coscheduling.plugin import Coscheduling
from tests.simulation import SimCluster

ROLES = [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 4}]
REPLICAS = [{"name": f"r{i}", "minMember": 2} for i in range(3)]


@pytest.fixture
def sim() -> Iterator[SimCluster]:
    cluster = SimCluster()
    yield cluster
    assert cluster.violations == []
    cluster.close()


def _group(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "g", "namespace": "ns"}, "spec": spec}


def _member(sim: SimCluster, name: str, sub: str, cpu: str = "1", group: str = "g",
            priority: int = 0) -> None:
    sim.add_pod(name, cpu=cpu, group=group, labels={SUBGROUP_LABEL: sub}, priority=priority)


def _ps_and_three_workers(sim: SimCluster) -> None:
    """One parameter server and 3 of the 4 workers the roles need: nothing binds."""
    _member(sim, "ps-0", "ps")
    for i in range(3):
        _member(sim, f"worker-{i}", "worker")
    sim.run()
    assert sim.bound == {}


def _bound(sim: SimCluster, prefix: str) -> list[str]:
    return sorted(k.split("/")[1] for k in sim.bound if k.split("/")[1].startswith(prefix))


# -- the model --------------------------------------------------------------------------

def test_subgroups_are_read_with_their_minimums_and_topology() -> None:
    group = parse_podgroup(_group({"minMember": 4, "minGroups": 2, "subGroups": [
        {**REPLICAS[0], "topology": {"keys": ["rack"]}}, *REPLICAS[1:]]}))
    assert group.errors == ()
    assert group.subgroups is not None and group.subgroups.min_groups == 2
    assert [s.name for s in group.subgroups.listed] == ["r0", "r1", "r2"]
    assert group.subgroups.listed[0].topology is not None
    roles = parse_podgroup(_group({"minMember": 5, "subGroups": ROLES}))
    assert roles.subgroups is not None and roles.subgroups.min_groups == 2


@pytest.mark.parametrize(("spec", "error"), [
    ({"minMember": 2, "minGroups": 1}, "spec.minGroups: needs spec.subGroups"),
    ({"minMember": 2, "subGroups": []}, "spec.subGroups: must be a list of 1 to 64"),
    ({"minMember": 5, "subGroups": [{"name": "ps", "minMember": 0}]},
     "spec.subGroups[0].minMember: must be >= 1, got 0"),
    ({"minMember": 5, "subGroups": [{"name": "Bad Name!", "minMember": 1}]},
     "spec.subGroups[0].name: must be a label value"),
    ({"minMember": 5, "subGroups": [ROLES[0], ROLES[0]]},
     "spec.subGroups[1].name: 'ps' is listed twice"),
    ({"minMember": 5, "subGroups": [{"name": "ps", "minMember": 1, "size": 2}]},
     "spec.subGroups[0].size: unknown field"),
    ({"minMember": 5, "subGroups": [{"name": "ps", "minMember": 1, "topology": {}}]},
     "spec.subGroups[0].topology.keys: must be a non-empty list"),
    ({"minMember": 4, "minGroups": 4, "subGroups": REPLICAS},
     "spec.minGroups: 4 is more than the 3 subGroups"),
    ({"minMember": 3, "subGroups": ROLES},
     "spec.minMember: 3 is less than the 5 members its smallest 2 subGroups need"),
])
def test_bad_subgroups_name_the_field(spec: dict[str, Any], error: str) -> None:
    errors = parse_podgroup(_group(spec)).errors
    assert any(e.startswith(error) for e in errors), errors


def test_volcano_task_minimums_and_subgroup_policy_map_onto_subgroups() -> None:
    tasks = volcano.parse({"metadata": {"name": "g", "namespace": "ns"}, "spec": {
        "minMember": 5, "minTaskMember": {"ps": 1, "worker": 4}}})
    assert tasks.errors == () and tasks.subgroups is not None
    assert tasks.subgroups.listed == (SubGroup("ps", 1), SubGroup("worker", 4))
    assert tasks.subgroups.min_groups == 2
    policy = volcano.parse({"metadata": {"name": "g", "namespace": "ns"}, "spec": {
        "minMember": 4, "subGroupPolicy": [{"name": "replica", "subGroupSize": 2,
                                            "minSubGroups": 2, "matchLabelKeys": ["idx"]}]}})
    assert policy.errors == () and policy.subgroups is not None
    assert policy.subgroups.name_of({"idx": "1"}, "") == "1"
    assert policy.subgroups.get("1") == SubGroup("1", 2)
    assert policy.subgroups.name_of({}, "") == ""


# -- per-role minimums ------------------------------------------------------------------

def test_a_role_short_of_its_minimum_holds_the_gang_back_whatever_the_total(
        sim: SimCluster) -> None:
    for i in range(3):
        sim.add_node(f"n{i}", cpu="2")
    sim.add_group("g", 5, subGroups=ROLES)
    _member(sim, "ps-0", "ps")
    _member(sim, "chief", "chief")  # in no subgroup: it counts toward minMember only
    for i in range(3):
        _member(sim, f"worker-{i}", "worker")
    sim.run()
    assert sim.bound == {}  # 5 members, but 3 of the 4 workers
    _member(sim, "worker-3", "worker")
    sim.run()
    assert len(sim.bound) == 6


def test_roles_ps_1_worker_4_bind_together_once_the_fourth_worker_exists(
        sim: SimCluster) -> None:
    sim.add_node("n0", cpu="5")
    sim.add_group("g", 5, subGroups=ROLES)
    _ps_and_three_workers(sim)
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    status = plugin.status_of("ns/g")
    assert status is not None
    conditions = {c["type"]: c["message"] for c in status.status["conditions"]}
    assert "worker 3/4" in conditions["Unschedulable"], conditions
    assert status.status["subGroups"][1] == {"name": "worker", "minMember": 4, "members": 3,
                                             "scheduled": 0, "running": 0}
    _member(sim, "worker-3", "worker")
    sim.run()
    assert len(sim.bound) == 5


# -- gangs of gangs -----------------------------------------------------------------------

def test_min_groups_of_subgroups_run_whole_never_half_a_subgroup(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="5")  # room for 2 subgroups of 2 and one pod more
    sim.add_group("g", 4, minGroups=2, subGroups=REPLICAS)
    for replica in range(3):
        for i in range(2):
            _member(sim, f"r{replica}-{i}", f"r{replica}")
    sim.run()
    assert len(sim.bound) == 4
    by_replica = {name[:2] for name in _bound(sim, "r")}
    assert len(by_replica) == 2
    assert all(len(_bound(sim, r)) == 2 for r in by_replica)
    sim.add_node("n1", cpu="2")
    sim.run()
    assert len(sim.bound) == 6


def test_each_subgroup_in_one_rack_and_the_job_in_one_zone(sim: SimCluster) -> None:
    for name, zone in (("a", "z1"), ("b", "z1"), ("c", "z2")):
        for i in range(2):
            sim.add_node(f"{name}{i}", cpu="1", labels={"rack": name, "zone": zone})
    rack: dict[str, Any] = {"mode": "Required", "keys": ["rack"]}
    subs = [{**r, "topology": rack} for r in REPLICAS[:2]]
    sim.add_group("g", 4, subGroups=subs, topology={"mode": "Required", "keys": ["zone"]})
    for replica in range(2):
        for i in range(2):
            _member(sim, f"r{replica}-{i}", f"r{replica}")
    sim.run()
    assert len(sim.bound) == 4
    racks = {r: {sim.bound[f"ns/r{r}-{i}"][0] for i in range(2)} for r in range(2)}
    assert all(len(v) == 1 for v in racks.values()), racks
    assert racks[0] != racks[1]
    assert {n[0] for n in sim.bound.values()} == {"a", "b"}  # zone z1


def test_a_subgroup_that_fits_no_rack_waits_whole_and_says_which(sim: SimCluster) -> None:
    for i in range(2):
        sim.add_node(f"a{i}", cpu="1", labels={"rack": "a"})
        sim.add_node(f"b{i}", cpu="1", labels={"rack": "b"})
    rack = {"mode": "Required", "keys": ["rack"]}
    sim.add_group("g", 3, subGroups=[{"name": "big", "minMember": 3, "topology": rack}])
    for i in range(3):
        _member(sim, f"big-{i}", "big")
    sim.run()
    assert sim.bound == {}
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    gang = plugin.manager.gangs["ns/g"]
    assert "subgroup big: topology Required: no domain of rack" in gang.last_failure


# -- elastic size -----------------------------------------------------------------------

def test_a_lowered_minimum_lets_a_waiting_gang_run_at_once(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="3")
    sim.add_group("g", 4)
    for i in range(4):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert sim.bound == {}
    sim.add_group("g", 2)  # the same group, minMember lowered
    sim.run()
    assert len(sim.bound) == 3


def test_a_raised_minimum_evicts_nothing_running(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="3")
    sim.add_group("g", 3)
    for i in range(3):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert len(sim.bound) == 3
    sim.add_group("g", 5)
    sim.add_pod("p3", group="g")
    sim.run()
    assert len(sim.bound) == 3 and sim.evictions.by == []


def test_a_lowered_role_minimum_is_re_evaluated(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="4")
    sim.add_group("g", 5, subGroups=ROLES)
    _ps_and_three_workers(sim)
    sim.add_group("g", 4, subGroups=[ROLES[0], {"name": "worker", "minMember": 3}])
    sim.run()
    assert len(sim.bound) == 4


# -- preemption ---------------------------------------------------------------------------

def test_preemption_takes_a_surplus_subgroup_whole(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="6")
    sim.add_group("g", 4, minGroups=2, subGroups=REPLICAS)
    for replica in range(3):
        for i in range(2):
            _member(sim, f"r{replica}-{i}", f"r{replica}")
    sim.run()
    assert len(sim.bound) == 6
    sim.add_pod("urgent", cpu="1", priority=100)
    sim.run()
    evicted = [k for _, keys in sim.evictions.by for k in keys]
    assert len(evicted) == 2 and evicted[0][:5] == evicted[1][:5], evicted
    assert "ns/urgent" in sim.bound
