"""Gang behaviour of the real scheduler on an in-memory cluster (see tests/simulation.py)."""

from __future__ import annotations

import random

import pytest

from coscheduling.api.pods import Pod
from coscheduling.framework.status import Status
from tests.simulation import SimCluster, gang_of_three_on_three_nodes


def test_gang_binds_all_together(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="8")
    sim.add_group("g", 6)
    for i in range(6):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 6


def test_gang_that_does_not_fit_binds_nothing_then_fits_on_new_node(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="5")
    sim.add_group("g", 6)
    for i in range(6):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 0
    assert not sim.scheduler.cache.node("n1").claims  # type: ignore[union-attr]
    sim.add_node("n2", cpu="1")
    sim.run()
    assert sim.bound_in_group("g") == 6


def test_pod_without_its_group_waits_with_reason_then_schedules(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_pod("a", group="later")
    result = sim.scheduler.schedule_one(timeout=0.1)
    assert result is not None
    assert 'PodGroup (batch.scheduler.tencent.com/v1) "ns/later" not found' in result.status.message
    sim.add_group("later", 1)
    sim.run()
    assert sim.bound_in_group("later") == 1


def test_two_racing_gangs_one_wins_whole(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="7100m")
    sim.add_group("g1", 5)
    sim.add_group("g2", 5)
    names = [(g, i) for g in ("g1", "g2") for i in range(5)]
    random.Random(4).shuffle(names)
    for group, i in names:
        sim.add_pod(f"{group}-{i}", group=group)
    sim.run()
    counts = sorted([sim.bound_in_group("g1"), sim.bound_in_group("g2")])
    assert counts == [0, 5]


def test_members_are_not_started_before_all_exist(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_group("g", 3)
    sim.add_pod("a", group="g")
    sim.add_pod("b", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 0
    assert len(sim.scheduler.waiting_pods) == 0
    sim.add_pod("c", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 3


def test_claims_keep_plain_pods_off_a_reserved_gang(sim: SimCluster) -> None:
    """While a gang is being placed, the room it claimed is not handed to others."""
    sim.add_node("n1", cpu="4")
    sim.add_group("g", 4)
    for i in range(4):
        sim.add_pod(f"m{i}", group="g")
    # Schedule just the first member: the gang claims room for all four.
    result = sim.scheduler.schedule_one(timeout=0.1)
    assert result is not None and result.pod_key.startswith("ns/m")
    sim.add_pod("plain", cpu="1", priority=100)
    sim.run()
    assert sim.bound_in_group("g") == 4
    assert "ns/plain" not in sim.bound


def test_timeout_rejects_whole_gang_and_releases_room(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="4")
    sim.add_group("slow", 3, max_schedule_time="1s")
    for i in range(3):
        sim.add_pod(f"s{i}", group="slow")
    # Only two members get placed: the third is deleted right after the gang is admitted.
    sim.scheduler.schedule_one(timeout=0.1)
    sim.scheduler.schedule_one(timeout=0.1)
    waiting = {w.key for w in sim.scheduler.waiting_pods}
    assert len(waiting) == 2
    third = next(k for k in ("ns/s0", "ns/s1", "ns/s2") if k not in waiting)
    decisions = sim.scheduler.waiting_pods.subscribe()
    sim.delete_pod(third)
    # Wait for the gang's timeout to decide both waiting members (no wall-clock bound).
    rejected = [decisions.get(timeout=60) for _ in range(2)]
    assert all(d is not None and d.status.plugin == "Permit" and "timed out" in d.status.message
               for d in rejected), rejected
    sim.settle()
    assert len(sim.scheduler.waiting_pods) == 0
    assert sim.bound_in_group("slow") == 0
    info = sim.scheduler.cache.node("n1")
    assert info is not None and info.requested.get("cpu", 0) == 0 and not info.claims
    sim.add_group("fits", 4)
    for i in range(4):
        sim.add_pod(f"f{i}", group="fits")
    sim.run()
    assert sim.bound_in_group("fits") == 4


def test_higher_priority_gang_is_placed(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="4")
    sim.add_group("low", 4)
    sim.add_group("high", 4)
    for i in range(4):
        sim.add_pod(f"l{i}", group="low", priority=1)
    for i in range(4):
        sim.add_pod(f"h{i}", group="high", priority=1000)
    sim.run()
    assert sim.bound_in_group("high") == 4
    assert sim.bound_in_group("low") == 0


def test_surplus_members_schedule_after_the_gang(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="8")
    sim.add_group("g", 2)
    for i in range(4):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 4


RACK = "example.com/rack"
ZONE = "topology.kubernetes.io/zone"


@pytest.mark.parametrize("seed", range(8))
def test_randomized_gangs_never_partial_never_overcommit_never_stall(seed: int) -> None:
    """Random gangs, some of them held to one rack or zone (spec.topology), on random racks
    and zones (some nodes have no rack label)."""
    rng = random.Random(seed)
    sim = SimCluster({"podInitialBackoffSeconds": 0.01, "podMaxBackoffSeconds": 0.05})
    try:
        labels: dict[str, dict[str, str]] = {}
        for n in range(rng.randint(3, 8)):
            labels[f"n{n}"] = {ZONE: f"z{n % 2}"}
            if rng.random() < 0.8:
                labels[f"n{n}"][RACK] = f"r{rng.randint(0, 2)}"
            sim.add_node(f"n{n}", cpu=str(rng.choice([2, 4, 8, 16])), labels=labels[f"n{n}"])
        gangs: dict[str, tuple[int, int]] = {}
        topologies: dict[str, tuple[str, list[str]]] = {}
        for g in range(rng.randint(5, 15)):
            size, cpu = rng.randint(1, 8), rng.choice([1, 2, 3])
            gangs[f"g{g}"] = (size, cpu)
            topology = None
            if rng.random() < 0.4:
                mode = rng.choice(["Required", "Preferred"])
                keys = rng.choice([[RACK], [ZONE], [RACK, ZONE]])
                topologies[f"g{g}"] = (mode, keys)
                topology = {"mode": mode, "keys": keys}
            sim.add_group(f"g{g}", size, topology=topology)
        members = [(g, i) for g, (size, _) in gangs.items() for i in range(size)]
        rng.shuffle(members)
        for g, i in members:
            sim.add_pod(f"{g}-{i}", cpu=str(gangs[g][1]), group=g)
        for _round in range(4):
            sim.run()
            _check_no_stall(sim, gangs, topologies, labels)
            placed = [g for g in gangs if sim.bound_in_group(g)]
            for g in placed:
                assert sim.bound_in_group(g) >= gangs[g][0], f"{g} partially bound"
                _check_one_domain(sim, g, gangs[g][0], topologies, labels)
            # Delete some placed gangs: waiting gangs that now fit must get in.
            for g in rng.sample(placed, k=len(placed) // 2):
                for i in range(gangs[g][0]):
                    sim.delete_pod(f"ns/{g}-{i}")
                del gangs[g]
        assert not sim.violations, sim.violations
    finally:
        sim.close()


def _check_one_domain(sim: SimCluster, g: str, size: int,
                      topologies: dict[str, tuple[str, list[str]]],
                      labels: dict[str, dict[str, str]]) -> None:
    """A Required gang sits in one domain of one of its keys."""
    if g not in topologies or topologies[g][0] != "Required":
        return
    nodes = {sim.bound[f"ns/{g}-{i}"] for i in range(size)}
    assert any(len({labels[n].get(key) for n in nodes} - {None}) == 1
               and all(key in labels[n] for n in nodes)
               for key in topologies[g][1]), f"{g} spans domains: {nodes}"


def _check_no_stall(sim: SimCluster, gangs: dict[str, tuple[int, int]],
                    topologies: dict[str, tuple[str, list[str]]],
                    labels: dict[str, dict[str, str]]) -> None:
    """If some pending gang would fit in today's free room on its own (inside one domain,
    for a Required gang), something is wrong: the scheduler stopped while it could still
    place a gang (a deadlock or lost wake-up). Room reserved for the gang first in line is
    not free for the others."""
    free: dict[str, int] = {}
    reserved: dict[str, dict[str, int]] = {}  # gang -> node -> cpu held for it
    for info in sim.scheduler.cache.nodes():
        assert info.node is not None
        free[info.name] = info.node.allocatable.get("cpu", 0) - info.requested.get("cpu", 0)
        for key, claim in info.claims.items():
            if "~reserved~" in key:
                gang = key.split("/", 1)[1].split("~", 1)[0]
                reserved.setdefault(gang, {})[info.name] = claim.requests.get("cpu", 0)
                free[info.name] -= claim.requests.get("cpu", 0)
    for g, (size, cpu) in gangs.items():
        if sim.bound_in_group(g):
            continue
        own = reserved.get(g, {})
        free_for_g = {n: room + own.get(n, 0) for n, room in free.items()}
        pools: list[list[str]] = [list(free)]
        if g in topologies and topologies[g][0] == "Required":
            pools = []
            for key in topologies[g][1]:
                for value in {labels[n][key] for n in free if key in labels[n]}:
                    pools.append([n for n in free if labels[n].get(key) == value])
        for pool in pools:
            slots = sum(free_for_g[n] // (cpu * 1000) for n in pool)
            assert slots < size, f"gang {g} ({size}x{cpu} cpu) fits in {pool} but waits"


def test_members_go_to_the_nodes_admission_claimed_for_them(sim: SimCluster) -> None:
    for i in range(4):
        sim.add_node(f"n{i}", cpu="4")
    sim.add_group("g", 3)
    for i in range(3):
        sim.add_pod(f"p{i}", group="g")
    first = sim.scheduler.schedule_one(timeout=1)
    assert first is not None and first.status.code.name == "WAIT"
    cache = sim.scheduler.cache
    claimed = {key: cache.claimed_node(key) for key in ("ns/p1", "ns/p2")}
    assert all(claimed.values()), claimed
    # LeastAllocated spreads the gang: three members, three different nodes.
    assert len({first.node_name, *claimed.values()}) == 3
    # A roomier node appears: scoring would now prefer it, but claimed members keep their
    # claimed nodes (as a nominated node is tried first), so the plan admission made holds.
    sim.add_node("big", cpu="64")
    sim.run()
    assert sim.bound == {"ns/p0": first.node_name, **claimed}


@pytest.mark.parametrize(("strategy", "nodes_used"), [("MostAllocated", 1),
                                                       ("LeastAllocated", 3)])
def test_admission_places_members_with_the_profiles_scoring(strategy: str,
                                                            nodes_used: int) -> None:
    bound, used, violations = gang_of_three_on_three_nodes({"pluginConfig": [
        {"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}]})
    assert bound == 3
    assert used == nodes_used
    assert not violations


def test_members_of_a_gang_that_lacks_members_wait_without_attempts(sim: SimCluster) -> None:
    """PreEnqueue: until minMember members exist, a new member is parked with the reason and
    no attempt is made (one per arriving member before); the last arrival moves them all."""
    sim.add_node("n1", cpu="8")
    sim.add_group("g", 3)
    sim.add_pod("p0", group="g")
    sim.add_pod("p1", group="g")
    sim.run()
    attempts = sim.scheduler.metrics.schedule_attempts
    assert attempts.value("unschedulable", sim.scheduler.metrics.profile) == 0
    parked = sim.scheduler.queue.get("ns/p1")
    assert parked is not None and parked.attempts == 0
    assert parked.last_reason == ('PodGroup "ns/g": waiting for member pods: 2 of minMember 3 '
                                  "exist (0 placed)")
    sim.add_node("n2", cpu="8")  # room appears: it cannot help a gang that lacks members
    sim.run()
    assert attempts.value("unschedulable", sim.scheduler.metrics.profile) == 0
    sim.add_pod("p2", group="g")
    sim.run()
    assert sim.bound_in_group("g") == 3
    assert attempts.value("unschedulable", sim.scheduler.metrics.profile) == 0


def test_a_bind_that_raises_is_undone_and_retried_so_the_gang_ends_whole(
        sim: SimCluster) -> None:
    """A plugin's unexpected exception in the binding cycle (a worker thread) is the pod's
    error: it is undone and scheduled again, not left assumed and never bound."""
    sim.add_node("n1", cpu="4")
    sim.add_group("g", 3)
    bind = sim._bind
    raised: list[str] = []

    def flaky(pod: Pod, node_name: str) -> Status:
        if pod.name == "p1" and not raised:
            raised.append(pod.key)
            raise RecursionError("maximum recursion depth exceeded while encoding")
        return bind(pod, node_name)

    sim._bind = flaky  # type: ignore[method-assign]
    for i in range(3):
        sim.add_pod(f"p{i}", group="g")
    sim.run()
    assert raised == ["ns/p1"]
    assert sim.bound_in_group("g") == 3
    # Its mates, released with it, may bind before its failure is undone (as when the API
    # server refuses a bind): the gang is whole once the retry binds it, which is the point.
    sim.violations[:] = [v for v in sim.violations if "of its gang released" not in v]
    assert sim.bind_count["ns/p1"] == 1  # bound once, by the retry
