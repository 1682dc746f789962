"""Placing a gang as one: seed 004's binpack, gang locality, topology domains.

Every test runs the real scheduler on an in-memory cluster (tests/simulation.py).
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.config import ConfigError, parse_config
from coscheduling.framework.status import Code
from coscheduling.plugins.registry import default_registry
from tests.simulation import SimCluster, gang_of_three_on_three_nodes

RACK = "example.com/rack"
ZONE = "topology.kubernetes.io/zone"

# examples/binpack-config.yaml's scoring: seed 004's RequestedToCapacityRatio.
BINPACK: dict[str, Any] = {
    "plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 100}]}},
    "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": "cpu", "weight": 1}, {"name": "nvidia.com/gpu", "weight": 1}],
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                               {"utilization": 100, "score": 10}]}}}}],
}


def _seed004(sim: SimCluster, order: list[str]) -> None:
    """Seed 004's gang as the API server stores it: limits only, so requests = limits; the
    parameter server asks for 1 cpu, each worker for 1 nvidia.com/gpu and nothing else."""
    sim.add_group("tf-smoke-gpu", 5)
    for name in order:
        asked = {"cpu": "1"} if name == "ps-0" else {"nvidia.com/gpu": "1"}
        sim.add_pod(name, group="tf-smoke-gpu", requests=asked)


@pytest.mark.parametrize("cpu", ["8", "200"])
@pytest.mark.parametrize("round_", range(10))
def test_seed004_gang_lands_on_one_node_whatever_the_order(round_: int, cpu: str) -> None:
    """The parameter server asks for no GPU, so GPUs are left out of its score: before the
    fix it saw a tie (claims counted no non-zero cpu) and could land apart from the workers.
    With 200-cpu nodes, cpu usage rounds to the same utilization on both nodes, so only the
    gang-locality tie-break keeps the gang together."""
    sim = SimCluster(BINPACK)
    try:
        sim.add_node("seed004-a", cpu=cpu, **{"nvidia.com/gpu": "4"})
        sim.add_node("seed004-b", cpu=cpu, **{"nvidia.com/gpu": "4"})
        order = ["ps-0", *(f"worker-{i}" for i in range(4))]
        random.Random(round_).shuffle(order)
        _seed004(sim, order)
        sim.run()
        assert sim.bound_in_group("tf-smoke-gpu") == 5
        assert len(set(sim.bound.values())) == 1, sim.bound
        assert not sim.violations
    finally:
        sim.close()


def test_ties_break_toward_the_gangs_own_nodes(sim: SimCluster) -> None:
    """Tiny members on huge nodes: LeastAllocated scores every node alike, so only the
    locality tie-break decides, and the gang stays on one node."""
    for i in range(5):
        sim.add_node(f"n{i}", cpu="1000", memory="4Ti")
    sim.add_group("g", 4)
    for i in range(4):
        sim.add_pod(f"p{i}", cpu="1m", memory="1Mi", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 4
    assert set(sim.bound.values()) == {"n0"}  # deterministic: the first in node order


@pytest.mark.parametrize(("weight", "nodes_used"), [(None, 3), (1, 1), (10, 1)])
def test_gang_locality_score_packs_a_gang_against_least_allocated(
        weight: int | None, nodes_used: int) -> None:
    config: dict[str, Any] = {}
    if weight is not None:
        config["plugins"] = {"score": {"enabled": [{"name": "GangLocality",
                                                    "weight": weight}]}}
    bound, used, _ = gang_of_three_on_three_nodes(config)
    assert bound == 3
    assert used == nodes_used


def _racks(sim: SimCluster) -> None:
    """Rack r1: two 4-cpu nodes; rack r2: two 8-cpu nodes; both in zone z1. Rack r3: one
    16-cpu node in zone z2. A node with no rack label in z2."""
    for name, cpu, rack, zone in (("r1-a", "4", "r1", "z1"), ("r1-b", "4", "r1", "z1"),
                                  ("r2-a", "8", "r2", "z1"), ("r2-b", "8", "r2", "z1"),
                                  ("r3-a", "16", "r3", "z2")):
        sim.add_node(name, cpu=cpu, labels={RACK: rack, ZONE: zone})
    sim.add_node("loose", cpu="64", labels={ZONE: "z2"})


def _gang(sim: SimCluster, name: str, size: int, cpu: str, mode: str,
          keys: list[str]) -> None:
    sim.add_group(name, size, topology={"mode": mode, "keys": keys})
    for i in range(size):
        sim.add_pod(f"{name}-{i}", cpu=cpu, memory="1Gi", group=name)


def _racks_of(sim: SimCluster, group: str) -> set[str]:
    return {sim.bound[f"ns/{group}-{i}"].rsplit("-", 1)[0]
            for i in range(sim.bound_in_group(group))}


def test_required_gang_lands_in_the_only_rack_that_holds_it(sim: SimCluster) -> None:
    for name, cpu, rack in (("r1-a", "4", "r1"), ("r1-b", "4", "r1"), ("r2-a", "8", "r2"),
                            ("r2-b", "8", "r2"), ("r3-a", "8", "r3")):
        sim.add_node(name, cpu=cpu, labels={RACK: rack})
    _gang(sim, "g", 4, "3", "Required", [RACK])
    sim.run()
    # 3-cpu members: r1 holds two, r2 four, r3 two: only r2 can hold the gang.
    assert sim.bound_in_group("g") == 4
    assert _racks_of(sim, "g") == {"r2"}


def test_the_tightest_rack_that_fits_wins(sim: SimCluster) -> None:
    for name, rack in (("a-1", "a"), ("a-2", "a"), ("b-1", "b")):
        sim.add_node(name, cpu="8", labels={RACK: rack})
    _gang(sim, "g", 2, "3", "Required", [RACK])
    sim.run()
    # Both racks hold the gang; rack b keeps 2 cpu free after it, rack a 10.
    assert _racks_of(sim, "g") == {"b"}


def test_required_gang_that_fits_no_rack_waits_whole_and_says_why(sim: SimCluster) -> None:
    _racks(sim)
    _gang(sim, "g", 6, "3", "Required", [RACK])
    sim.run()
    assert sim.bound_in_group("g") == 0
    assert not any(info.claims for info in sim.scheduler.cache.nodes())
    gang = sim.scheduler.framework.instances["Coscheduling"].manager.gangs[  # type: ignore[attr-defined]
        "ns/g"]
    assert gang.last_failure == (
        f"topology Required: no domain of {RACK} can hold the gang's 6 missing members, "
        f"which need cpu 18, memory 6Gi; the largest, {RACK}=r2, has cpu 16, memory 64Gi free")


def test_preferred_gang_that_fits_no_rack_is_placed_anywhere(sim: SimCluster) -> None:
    _racks(sim)
    _gang(sim, "g", 6, "3", "Preferred", [RACK])
    sim.run()
    assert sim.bound_in_group("g") == 6


def test_two_level_keys_take_the_rack_when_one_fits_and_the_zone_otherwise(
        sim: SimCluster) -> None:
    _racks(sim)
    _gang(sim, "small", 2, "3", "Required", [RACK, ZONE])
    sim.run()
    assert len(_racks_of(sim, "small")) == 1
    # Seven 3-cpu members: no rack holds them (r3 holds 5); zone z1 (r1 + r2) holds 6,
    # zone z2 (r3 + the unlabelled-rack node) holds 26: the gang goes to z2, whole.
    _gang(sim, "big", 7, "3", "Required", [RACK, ZONE])
    sim.run()
    assert sim.bound_in_group("big") == 7
    nodes = {sim.bound[f"ns/big-{i}"] for i in range(7)}
    assert nodes <= {"r3-a", "loose"}, nodes
    assert not sim.violations


def test_nodes_without_the_label_belong_to_no_domain(sim: SimCluster) -> None:
    sim.add_node("labelled", cpu="2", labels={RACK: "r1"})
    sim.add_node("bare", cpu="64")
    _gang(sim, "g", 2, "2", "Required", [RACK])
    sim.run()
    assert sim.bound_in_group("g") == 0


def test_later_members_join_the_gangs_domain(sim: SimCluster) -> None:
    _racks(sim)
    _gang(sim, "g", 2, "3", "Required", [RACK])
    sim.run()
    first = _racks_of(sim, "g")
    assert len(first) == 1
    sim.add_pod("g-2", cpu="1", group="g")  # a surplus member
    sim.run()
    assert _racks_of(sim, "g") == first


@pytest.mark.parametrize(("topology", "message"), [
    ("rack", "spec.topology: must be an object"),
    ({"keys": []}, "spec.topology.keys: must be a non-empty list"),
    ({"mode": "Sometimes", "keys": [RACK]}, "spec.topology.mode: must be Required or Preferred"),
    ({"keys": [RACK, RACK]}, "spec.topology.keys[1]: 'example.com/rack' is listed twice"),
    ({"keys": ["bad key"]}, "spec.topology.keys[0]: 'bad key' is not a valid label key"),
    ({"keys": [RACK], "level": 1}, "spec.topology.level: unknown field"),
    ({"keys": [f"k{i}" for i in range(9)]}, "spec.topology.keys: at most 8 keys"),
])
def test_topology_validation_names_the_field(topology: object, message: str) -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 2, "topology": topology}})
    assert not group.valid
    assert any(e.startswith(message) for e in group.errors), group.errors


def test_topology_defaults_to_required() -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 2, "topology": {"keys": [RACK, ZONE]}}})
    assert group.valid and group.topology is not None
    assert group.topology.required and group.topology.keys == (RACK, ZONE)


def test_coscheduling_at_prefilter_needs_its_filter() -> None:
    doc = {"apiVersion": "config.batch.scheduler.tencent.com/v1",
           "kind": "SchedulerConfiguration",
           "plugins": {"filter": {"disabled": [{"name": "Coscheduling"}]}}}
    with pytest.raises(ConfigError, match=r"plugins\.filter"):
        parse_config(doc, default_registry())


def test_a_claim_weighs_in_scoring_with_the_non_zero_cpu_of_its_pod(sim: SimCluster) -> None:
    """An assumed best-effort pod counts 100m cpu in scoring; so must a claim for one."""
    sim.add_node("n", cpu="8")
    pod = sim.add_pod("p", requests={"nvidia.com/gpu": "1"})
    info = sim.scheduler.cache.node("n")
    assert info is not None
    assert info.nonzero_used(cpu=True) == 0
    sim.scheduler.cache.claim(pod, "n")
    assert info.nonzero_used(cpu=True) == 100
    assert info.nonzero_used(cpu=True, excluding=pod.key) == 0  # its own claim is its room


def test_a_member_whose_domain_lost_its_room_fails_the_gangs_attempt_whole(
        sim: SimCluster) -> None:
    """The gang is claimed into rack r1 (r2 is too small for both). One member waits at
    Permit; then r1's node shrinks, so the other no longer fits there. Rack r2 has room for
    it, but it is outside the gang's domain: the member finds no node and the gang's attempt
    fails as a whole (the waiting member is let go too), rather than being split."""
    sim.add_node("r1-a", cpu="4", labels={RACK: "r1"})
    sim.add_node("r2-a", cpu="2", labels={RACK: "r2"})
    _gang(sim, "g", 2, "2", "Required", [RACK])
    first = sim.scheduler.schedule_one(timeout=1)
    assert first is not None and first.status.code == Code.WAIT, first
    assert first.node_name == "r1-a"
    shrunk = parse_node({"metadata": {"name": "r1-a", "uid": "r1-a", "resourceVersion": "2",
                                      "labels": {"kubernetes.io/hostname": "r1-a", RACK: "r1"}},
                         "status": {"allocatable": {"cpu": "2", "memory": "32Gi",
                                                    "pods": "110"}}})
    old = sim.scheduler.cache.node("r1-a")
    assert old is not None and old.node is not None
    sim.nodes.on_update(old.node, shrunk)
    second = sim.scheduler.schedule_one(timeout=1)
    assert second is not None and second.pod_key != first.pod_key
    assert second.status.code == Code.UNSCHEDULABLE
    message = second.status.message
    assert f"node(s) outside the gang's topology domain {RACK}=r1" in message, message
    gang = sim.scheduler.framework.instances["Coscheduling"].manager.gangs[  # type: ignore[attr-defined]
        "ns/g"]
    assert (gang.rejections, gang.domain) == (1, None)
    assert gang.last_failure == f"member {second.pod_key.split('/')[1]} could not be placed"
    sim.settle()
    assert sim.scheduler.waiting_pods.get(first.pod_key) is None
    assert not sim.scheduler.cache.is_assumed(first.pod_key)
    sim.run()
    assert sim.bound_in_group("g") == 0  # no rack holds both any more: never split
