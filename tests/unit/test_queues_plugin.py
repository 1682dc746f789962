"""Proportion and DRF in the real scheduler (in-memory cluster): admission by share,
borrowing, capability, a missing queue, queue status, and the order DRF gives gangs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from coscheduling.api.membership import GROUP_NAME_ANNOTATION
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import parse_pod
from coscheduling.api.queues import parse_queue
from coscheduling.core.eventhandlers import QueueEvents
from coscheduling.groups import kubebatch, volcano
from coscheduling.plugins.drf import DRF
from coscheduling.plugins.proportion import Proportion
from tests.simulation import SimCluster


def _proportion(sim: SimCluster) -> Proportion:
    plugin = sim.scheduler.framework.instances["Proportion"]
    assert isinstance(plugin, Proportion)
    return plugin


def _queue(sim: SimCluster, name: str, weight: int = 1, **spec: Any) -> None:
    QueueEvents(sim.scheduler, _proportion(sim)).on_add(
        parse_queue({"metadata": {"name": name}, "spec": {"weight": weight, **spec}}))


def _gangs(sim: SimCluster, queue: str, count: int, size: int = 2, cpu: str = "1") -> None:
    for g in range(count):
        group = f"{queue}-g{g}"
        sim.add_group(group, size, queue=queue)
        for i in range(size):
            sim.add_pod(f"{group}-{i}", group=group, cpu=cpu, memory="0")


def _bound(sim: SimCluster, queue: str) -> int:
    return sum(1 for p in sim.scheduler.cache.pods()
               if p.node_name and p.membership.name.startswith(f"{queue}-"))


def test_queues_asking_for_more_than_the_cluster_end_at_their_deserved_share(
        sim: SimCluster) -> None:
    for n in range(3):
        sim.add_node(f"n{n}", cpu="4")
    for name, weight in (("a", 1), ("b", 2), ("c", 3)):
        _queue(sim, name, weight)
    for name in ("a", "b", "c"):  # queue a's backlog arrives first: it still gets 1/6
        _gangs(sim, name, 4)
    sim.run()
    assert {q: _bound(sim, q) for q in "abc"} == {"a": 2, "b": 4, "c": 6}
    proportion = _proportion(sim)
    proportion.housekeeping(0.0)
    assert proportion.statuses["b"] == {"deserved": {"cpu": "4"}, "allocated": {"cpu": "4"},
                                        "pending": 2, "running": 2}


def test_a_queue_alone_borrows_the_whole_cluster(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="6")
    _queue(sim, "a", 1)
    _queue(sim, "idle", 5)
    _gangs(sim, "a", 4)
    sim.run()
    assert _bound(sim, "a") == 6


def test_capability_caps_a_queue(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="8")
    _queue(sim, "a", 1, capability={"cpu": "3"})
    _queue(sim, "b", 1)
    _gangs(sim, "a", 3)
    sim.run()
    assert _bound(sim, "a") == 2
    result = sim.scheduler.schedule_one(timeout=0.01)
    assert result is None or "capability" in result.status.message


def test_room_nobody_under_its_share_asks_for_is_borrowed(sim: SimCluster) -> None:
    """b's share is 4 but it asks for 1: a may borrow up to what b leaves."""
    sim.add_node("n0", cpu="8")
    _queue(sim, "a", 1)
    _queue(sim, "b", 1)
    _gangs(sim, "b", 1, size=1)
    _gangs(sim, "a", 4)
    sim.run()
    assert (_bound(sim, "a"), _bound(sim, "b")) == (6, 1)


def test_a_gang_naming_a_missing_queue_waits_until_it_exists(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="4")
    _queue(sim, "other")
    _gangs(sim, "late", 1)
    result = sim.scheduler.schedule_one(timeout=1)
    assert result is not None and 'Queue "late" not found' in result.status.message
    sim.run()
    assert _bound(sim, "late") == 0
    _queue(sim, "late")
    sim.run()
    assert _bound(sim, "late") == 2


def test_volcano_and_kube_batch_podgroups_name_queues_the_same_way(sim: SimCluster) -> None:
    """spec.queue of the other producers' PodGroups (coscheduling.groups) is read as ours."""
    for n in range(3):
        sim.add_node(f"n{n}", cpu="4")
    for name, weight in (("a", 1), ("b", 2), ("c", 3)):
        _queue(sim, name, weight)
    for queue, api in (("a", volcano.API), ("b", kubebatch.API), ("c", volcano.API)):
        for g in range(4):
            group = f"{queue}-g{g}"
            sim.groups.on_add(api.parse({
                "metadata": {"name": group, "namespace": "ns", "uid": group},
                "spec": {"minMember": 2, "queue": queue}}))
            for i in range(2):
                sim.pods.on_add(parse_pod({
                    "metadata": {"name": f"{group}-{i}", "namespace": "ns",
                                 "uid": f"{group}-{i}",
                                 "annotations": {GROUP_NAME_ANNOTATION: group}},
                    "spec": {"schedulerName": "batch-scheduler", "containers": [
                        {"name": "c", "resources": {"requests": {"cpu": "1"}}}]}}))
    sim.run()
    assert {q: _bound(sim, q) for q in "abc"} == {"a": 2, "b": 4, "c": 6}


@pytest.mark.parametrize(
    ("spec", "queue"), [({"minMember": 1}, "default"), ({"minMember": 1, "queue": "q-1"}, "q-1")])
def test_podgroup_queue(spec: dict[str, Any], queue: str) -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"}, "spec": spec})
    assert group.valid and group.queue == queue


def test_podgroup_bad_queue_is_named() -> None:
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 1, "queue": "Not_A_Name"}})
    assert group.errors == ("spec.queue: 'Not_A_Name' is not a valid Queue name",)


@pytest.mark.parametrize(("drf", "bound"), [(True, (2, 2)), (False, (4, 0))])
def test_drf_orders_a_gang_holding_little_before_one_holding_much(
        drf: bool, bound: tuple[int, int]) -> None:
    """Gang "big" (older) holds 2 of 4 cpu and has two surplus members pending; gang "new"
    holds nothing: with DRF, "new" goes first and takes the last 2 cpu; without it (a profile
    that disables it) the order is as before (age) and big's surplus takes them."""
    disabled = {} if drf else {"plugins": {"preFilter": {"disabled": [{"name": "DRF"}]}}}
    sim = SimCluster(disabled)
    try:
        _drf_scenario(sim, drf, bound)
    finally:
        sim.close()


def _drf_scenario(sim: SimCluster, drf: bool, bound: tuple[int, int]) -> None:
    sim.add_node("n0", cpu="4")
    sim.add_group("big", 2)
    for i in range(2):
        sim.add_pod(f"big-{i}", group="big", memory="0")
    sim.run()
    assert sim.bound_in_group("big") == 2
    assert isinstance(sim.scheduler.framework.instances.get("DRF"), DRF) == drf
    sim.scheduler.refresh_queue_order()  # what housekeeping does once a second
    sim.add_group("new", 2)
    for i in range(2, 4):  # surplus members of big, queued before the new gang's
        sim.add_pod(f"big-{i}", group="big", memory="0")
    for i in range(2):
        sim.add_pod(f"new-{i}", group="new", memory="0")
    sim.run()
    assert (sim.bound_in_group("big"), sim.bound_in_group("new")) == bound


def test_drf_gang_priority_and_members_by_priority(sim: SimCluster) -> None:
    """The gang with the higher-priority member goes first as a whole; inside a gang the
    higher-priority member is tried first."""
    sim.add_group("low", 1)
    sim.add_group("high", 2)
    sim.add_pod("low-0", group="low", priority=5)
    sim.add_pod("high-0", group="high", priority=1)
    sim.add_pod("high-1", group="high", priority=10)
    key = sim.scheduler.framework.queue_sort.sort_key
    pods = {p.name: p for p in sim.scheduler.cache.pods()}
    order = sorted(pods, key=lambda name: key(pods[name]))
    assert order == ["high-1", "high-0", "low-0"]


def _reclaim_cluster(sim: SimCluster, reclaimable: bool = True) -> None:
    """Queue a alone fills 8 cpu with four 2-cpu gangs; then queue b's gangs arrive."""
    sim.add_node("n0", cpu="8")
    _queue(sim, "a", 1, reclaimable=reclaimable)
    _queue(sim, "b", 1)
    _gangs(sim, "a", 4)
    sim.run()
    assert _bound(sim, "a") == 8
    _gangs(sim, "b", 3)
    sim.run()


def test_a_queue_below_its_share_reclaims_whole_gangs(sim: SimCluster) -> None:
    _reclaim_cluster(sim)
    assert (_bound(sim, "a"), _bound(sim, "b")) == (4, 4)
    evicted_gangs = {key.rsplit("-", 1)[0] for key in sim.evictions.victims}
    assert len(evicted_gangs) == 2 and len(sim.evictions.victims) == 4  # two whole gangs
    for group in ("a-g0", "a-g1", "a-g2", "a-g3"):
        assert sim.bound_in_group(group) in (0, 2)  # none left partial
    assert sim.scheduler.metrics.queue_reclaims.value("b") == 2


def test_a_queue_that_is_not_reclaimable_keeps_what_it_borrowed(sim: SimCluster) -> None:
    _reclaim_cluster(sim, reclaimable=False)
    assert (_bound(sim, "a"), _bound(sim, "b")) == (8, 0)
    assert sim.evictions.victims == []


def test_no_reclaim_for_a_gang_that_would_still_not_fit(sim: SimCluster) -> None:
    """b's gang needs 6 cpu: within b's share of 4? No, so nothing is taken for it."""
    sim.add_node("n0", cpu="8")
    _queue(sim, "a", 1)
    _queue(sim, "b", 1)
    _gangs(sim, "a", 4)
    sim.run()
    _gangs(sim, "b", 1, size=6)
    sim.run()
    assert (_bound(sim, "a"), _bound(sim, "b")) == (8, 0)
    assert sim.evictions.victims == []


def test_reclaim_takes_surplus_members_before_a_whole_gang(sim: SimCluster) -> None:
    """a's one gang (minMember 2) fills 8 cpu with 8 members; b's gang of 2 takes two of
    its surplus members, and the gang keeps running."""
    sim.add_node("n0", cpu="8")
    _queue(sim, "a", 1)
    _queue(sim, "b", 1)
    sim.add_group("a-g0", 2, queue="a")
    for i in range(8):
        sim.add_pod(f"a-g0-{i}", group="a-g0", memory="0")
    sim.run()
    _gangs(sim, "b", 1)
    sim.run()
    assert (sim.bound_in_group("a-g0"), _bound(sim, "b")) == (6, 2)
    assert len(sim.evictions.victims) == 2


def test_reclaim_takes_the_lowest_priority_gang_first(sim: SimCluster) -> None:
    sim.add_node("n0", cpu="4")
    _queue(sim, "a", 1)
    _queue(sim, "b", 1)
    for group, priority in (("a-g0", 5), ("a-g1", 1)):
        sim.add_group(group, 2, queue="a")
        for i in range(2):
            sim.add_pod(f"{group}-{i}", group=group, memory="0", priority=priority)
    sim.run()
    _gangs(sim, "b", 1)
    sim.run()
    assert sorted(sim.evictions.victims) == ["ns/a-g1-0", "ns/a-g1-1"]
    assert (sim.bound_in_group("a-g0"), _bound(sim, "b")) == (2, 2)


def test_pods_outside_every_queue_are_not_divided(sim: SimCluster) -> None:
    """4 of 12 cpu are held by a pod without a PodGroup: queues a and b divide the other 8."""
    for n in range(3):
        sim.add_node(f"n{n}", cpu="4")
    sim.add_pod("plain", cpu="4", memory="0")
    sim.run()
    _queue(sim, "a", 1)
    _queue(sim, "b", 1)
    _gangs(sim, "a", 4)
    _gangs(sim, "b", 4)
    sim.run()
    assert (_bound(sim, "a"), _bound(sim, "b")) == (4, 4)
    proportion = _proportion(sim)
    proportion.housekeeping(0.0)
    assert proportion.statuses["a"]["deserved"] == {"cpu": "4"}


MAX_CYCLES = 2000
"""More scheduling cycles than any scenario here needs: a livelock fails, never hangs."""


def _schedule_until(sim: SimCluster, done: Callable[[], bool]) -> None:
    """Run scheduling cycles (evicted pods not finishing) until ``done()``."""
    for _ in range(MAX_CYCLES):
        if done():
            return
        sim.scheduler.schedule_one(timeout=0.02)
    raise AssertionError(f"the scenario did not get there in {MAX_CYCLES} cycles")


def _a_fills_12_cpu(sim: SimCluster, nodes: int, weights: dict[str, int]) -> None:
    """``nodes`` nodes of 4 cpu, the queues at ``weights``, and six gangs of a bound."""
    for n in range(nodes):
        sim.add_node(f"n{n}", cpu="4")
    for name, weight in weights.items():
        _queue(sim, name, weight)
    _gangs(sim, "a", 6)
    sim.run()
    assert _bound(sim, "a") == 12


def _b_claims_before_c_arrives(sim: SimCluster) -> None:
    """a (weight 1) fills 12 cpu; b (weight 2) reclaims 8 of it: four gangs of b claim the
    room of four evicted a-gangs, whose victims are not gone yet."""
    _a_fills_12_cpu(sim, nodes=3, weights={"a": 1, "b": 2, "c": 3})
    _gangs(sim, "b", 6)
    _schedule_until(sim, lambda: len(sim.evictions.by) == 4)


@pytest.mark.parametrize("third_queue_arrives", [True, False])
def test_a_gang_whose_queue_fell_over_its_share_gives_back_unused_claims(
        sim: SimCluster, third_queue_arrives: bool) -> None:
    """c (weight 3) arrives before b's victims are gone, so b's share drops to 4: b's two
    newest claiming gangs give their room to c instead of starting and being evicted at
    once. Without c, b's four gangs all start."""
    _b_claims_before_c_arrives(sim)
    if third_queue_arrives:
        _gangs(sim, "c", 6)
    sim.run()
    assert sim.violations == []
    if not third_queue_arrives:
        assert (_bound(sim, "a"), _bound(sim, "b")) == (4, 8)
        assert len(sim.evictions.victims) == 8
        return
    assert {q: _bound(sim, q) for q in "abc"} == {"a": 2, "b": 4, "c": 6}
    # a gives up 10 cpu (five gangs), b nothing: no gang of b starts only to be evicted.
    assert len(sim.evictions.victims) == 10
    assert all(key.startswith("ns/a-") for key in sim.evictions.victims)
    assert (sim.bound_in_group("b-g0"), sim.bound_in_group("b-g1")) == (2, 2)  # oldest kept


def test_returned_room_goes_to_waiting_gangs_at_once() -> None:
    """The gangs of c that found no room and backed off are tried as soon as b gives its
    claims back, not when their backoff ends: backoff here is an hour, so a pod in backoff
    comes back only when it is activated."""
    sim = SimCluster({"podInitialBackoffSeconds": 3600, "podMaxBackoffSeconds": 3600})
    try:
        _b_claims_before_c_arrives(sim)
        _gangs(sim, "c", 6)
        for _ in range(MAX_CYCLES):  # sim.run, but pods left in backoff do not keep it going
            if sim.scheduler.schedule_one(timeout=0.01) is not None:
                continue
            sim.settle()
            if not sim.evictions.finish():
                break
        else:
            raise AssertionError(f"still scheduling after {MAX_CYCLES} cycles")
        assert sim.violations == []
        assert {q: _bound(sim, q) for q in "abc"} == {"a": 2, "b": 4, "c": 6}
    finally:
        sim.close()


def test_reclaim_spares_running_gangs_while_the_excess_is_in_unstarted_claims(
        sim: SimCluster) -> None:
    """a (1) holds 12 of 16 cpu; b (1) starts two gangs in the free room and two more
    claim a's room, their victims not gone yet. c (2) arrives: shares 4/4/8. b's excess
    (4) is all in the two claiming gangs, which give it back; b's running gangs are no
    victims. c's other 4 cpu come from a."""
    _a_fills_12_cpu(sim, nodes=4, weights={"a": 1, "b": 1, "c": 2})
    _gangs(sim, "b", 4)
    # Two gangs of b started, two claim a's room; a's victims not gone yet.
    _schedule_until(sim, lambda: len(sim.evictions.by) == 2 and _bound(sim, "b") == 4)
    _gangs(sim, "c", 4)
    sim.run()
    assert sim.violations == []
    assert {q: _bound(sim, q) for q in "abc"} == {"a": 4, "b": 4, "c": 8}
    assert len(sim.evictions.victims) == 8
    assert all(key.startswith("ns/a-") for key in sim.evictions.victims)
