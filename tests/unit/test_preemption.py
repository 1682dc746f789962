"""Priority preemption on the real scheduler and an in-memory cluster (tests/simulation.py):
whole gangs or their surplus, never a broken gang, never an eviction for nothing."""

from __future__ import annotations

import dataclasses
import random
import time

import pytest

from coscheduling.api.budgets import parse_budget
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import parse_pod
from coscheduling.framework.metrics import SchedulerMetrics
from tests.simulation import SimCluster

LOW, HIGH = 10, 1000


def _gang(sim: SimCluster, name: str, size: int, min_member: int, cpu: str = "1",
          priority: int = 0, never: bool = False) -> None:
    sim.add_group(name, min_member)
    for i in range(size):
        sim.add_pod(f"{name}-{i}", cpu=cpu, group=name, priority=priority,
                    never_preempt=never)


def test_high_gang_evicts_a_whole_low_gang_never_part_of_it(sim: SimCluster) -> None:
    sim.add_node("n", cpu="4")
    _gang(sim, "low", 4, 4, priority=LOW)
    sim.run()
    assert sim.bound_in_group("low") == 4
    _gang(sim, "high", 2, 2, priority=HIGH)
    sim.run()
    assert sim.bound_in_group("high") == 2
    assert sorted(sim.evictions.victims) == [f"ns/low-{i}" for i in range(4)]
    assert sim.evictions.by[0][0] == "gang ns/high"
    assert sim.evictions.nominated.keys() >= {"ns/high-0", "ns/high-1"}


def test_high_gang_takes_exactly_the_surplus_of_a_low_gang(sim: SimCluster) -> None:
    sim.add_node("n", cpu="6")
    _gang(sim, "low", 6, 2, priority=LOW)
    sim.run()
    assert sim.bound_in_group("low") == 6
    _gang(sim, "high", 2, 2, priority=HIGH)
    sim.run()
    assert sim.bound_in_group("high") == 2
    assert len(sim.evictions.victims) == 2
    assert sim.bound_in_group("low") == 4


def test_no_eviction_for_a_gang_that_would_not_fit_anyway(sim: SimCluster) -> None:
    sim.add_node("n", cpu="4")
    sim.add_pod("system", cpu="2", priority=HIGH * 2)  # not evictable by the gang
    _gang(sim, "low", 2, 2, priority=LOW)
    sim.run()
    _gang(sim, "high", 3, 3, priority=HIGH)
    sim.run()
    assert sim.evictions.by == []
    assert sim.bound_in_group("high") == 0 and sim.bound_in_group("low") == 2


def test_preemption_policy_never_evicts_nothing(sim: SimCluster) -> None:
    sim.add_node("n", cpu="2")
    _gang(sim, "low", 2, 2, priority=LOW)
    sim.add_pod("low-plain", cpu="0", priority=LOW)
    sim.run()
    _gang(sim, "high", 2, 2, priority=HIGH, never=True)
    sim.add_pod("high-plain", cpu="2", priority=HIGH, never_preempt=True)
    sim.run()
    assert sim.evictions.by == []


def test_equal_priority_never_preempts(sim: SimCluster) -> None:
    sim.add_node("n", cpu="2")
    _gang(sim, "a", 2, 2, priority=LOW)
    sim.run()
    _gang(sim, "b", 2, 2, priority=LOW)
    sim.add_pod("c", cpu="1", priority=LOW)
    sim.run()
    assert sim.evictions.by == []


def test_a_plain_pod_evicts_exactly_one_lower_pod(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="2")
    sim.add_node("n2", cpu="2")
    for i in range(4):
        sim.add_pod(f"low-{i}", cpu="1", priority=LOW + i)
    sim.run()
    sim.add_pod("high", cpu="1", priority=HIGH)
    sim.run()
    assert len(sim.evictions.victims) == 1
    assert sim.evictions.victims == ["ns/low-0"]  # the lowest priority goes first
    assert sim.bound["ns/high"] == sim.evictions.nominated["ns/high"]


def test_a_disruption_budget_is_respected_when_another_candidate_exists(
        sim: SimCluster) -> None:
    sim.add_node("n1", cpu="1")
    sim.add_node("n2", cpu="1")
    sim.add_pod("guarded", cpu="1", priority=LOW, labels={"app": "db"})
    sim.add_pod("free", cpu="1", priority=LOW + 1, labels={"app": "web"})
    sim.run()
    sim.scheduler.listers.pdbs["ns/db"] = parse_budget({
        "metadata": {"namespace": "ns", "name": "db"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}},
        "status": {"disruptionsAllowed": 0}})
    sim.add_pod("high", cpu="1", priority=HIGH)
    sim.run()
    # Without the budget the lower-priority "guarded" pod would be the victim.
    assert sim.evictions.victims == ["ns/free"]


def test_a_pod_group_priority_class_sets_the_gangs_priority(sim: SimCluster) -> None:
    sim.scheduler.listers.priority_classes["urgent"] = HIGH
    sim.add_node("n", cpu="2")
    _gang(sim, "low", 2, 2, priority=LOW)
    sim.run()
    group = sim.add_group("urgent-gang", 2)
    group.priority_class_name = "urgent"  # as the PodGroup's spec.priorityClassName
    for i in range(2):
        sim.add_pod(f"urgent-gang-{i}", cpu="1", group="urgent-gang", priority=0)
    sim.run()
    assert sim.bound_in_group("urgent-gang") == 2
    assert sorted(sim.evictions.victims) == ["ns/low-0", "ns/low-1"]


def test_a_gang_below_its_members_priority_is_still_a_victim(sim: SimCluster) -> None:
    """The PodGroup's PriorityClass is the gang's priority even when its pods' own priority
    is higher: no shortcut on the pods' priorities may hide it."""
    sim.scheduler.listers.priority_classes["batch"] = LOW
    sim.add_node("n", cpu="2")
    group = sim.add_group("batch-gang", 2)
    group.priority_class_name = "batch"
    for i in range(2):
        sim.add_pod(f"batch-gang-{i}", cpu="1", group="batch-gang", priority=HIGH * 2)
    sim.run()
    _gang(sim, "high", 2, 2, priority=HIGH)
    sim.run()
    assert sim.bound_in_group("high") == 2
    assert sorted(sim.evictions.victims) == ["ns/batch-gang-0", "ns/batch-gang-1"]


def test_the_freed_room_is_held_for_the_preemptor_gang(sim: SimCluster) -> None:
    """Between eviction and the victims' going, a pod that arrives (even of the victims'
    priority) does not take the room: the gang's members claimed it."""
    sim.add_node("n", cpu="2")
    _gang(sim, "low", 2, 2, priority=LOW)
    sim.run()
    _gang(sim, "high", 2, 2, priority=HIGH)
    result = sim.scheduler.schedule_one(timeout=1)
    assert result is not None and "preempting 2 pod(s)" in result.status.message
    sim.add_pod("sneak", cpu="1", priority=LOW + 1)
    sim.run()
    assert sim.bound_in_group("high") == 2
    assert "ns/sneak" not in sim.bound


def _schedule_until_idle(sim: SimCluster) -> None:
    """Run scheduling cycles while any pod is ready to try, finishing no eviction (a kubelet
    that has not got round to it yet)."""
    while sim.scheduler.schedule_one(timeout=0.05) is not None:
        pass
    sim.settle()


def test_room_handed_over_to_a_preemptor_is_counted_once() -> None:
    """Two gangs preempt on one node before any victim is gone. The second evicts only the
    gang the first left, and once the first gang's own victims are gone it is bound at once,
    while the second's victims still run: their room and the second gang's claims are the
    same room, not twice as much. The backoff is long: the gang's members go back to the
    queue when their victims are gone, not when a backoff ends."""
    sim = SimCluster({"podInitialBackoffSeconds": 30, "podMaxBackoffSeconds": 30})
    try:
        sim.add_node("n", cpu="8")
        _gang(sim, "low-a", 4, 4, priority=LOW)
        _gang(sim, "low-b", 4, 4, priority=LOW)
        sim.run()
        _gang(sim, "high-1", 4, 4, priority=HIGH)
        _schedule_until_idle(sim)
        _gang(sim, "high-2", 4, 4, priority=HIGH)
        _schedule_until_idle(sim)
        by: dict[str, list[str]] = {}
        for preemptor, keys in sim.evictions.by:
            by.setdefault(preemptor, []).extend(keys)
        first, second = by.pop("gang ns/high-1"), by.pop("gang ns/high-2")
        assert not by
        assert len(first) == len(second) == 4 and not set(first) & set(second)

        for key in first:  # only the first gang's victims finish terminating
            sim.delete_pod(key)
        _schedule_until_idle(sim)
        assert sim.bound_in_group("high-1") == 4
        assert sim.bound_in_group("high-2") == 0
        assert not sim.violations

        sim.run()
        assert sim.bound_in_group("high-2") == 4
        assert len(sim.evictions.victims) == 8
        assert not sim.violations
    finally:
        sim.close()


@pytest.mark.parametrize("seed", range(6))
def test_randomized_priorities_never_break_a_gang_nor_evict_for_nothing(seed: int) -> None:
    """Random gangs at random priorities arrive in waves on a small cluster. At every bind
    and every eviction: no gang bound below minMember, no node over-committed, no pod bound
    twice, no gang left below minMember by an eviction (see tests/simulation.py). And each
    eviction is followed by its preemptor's placement."""
    rng = random.Random(seed)
    sim = SimCluster({"podInitialBackoffSeconds": 0.01, "podMaxBackoffSeconds": 0.05})
    try:
        for n in range(rng.randint(2, 4)):
            sim.add_node(f"n{n}", cpu=str(rng.choice([4, 8])))
        gangs: dict[str, tuple[int, int]] = {}
        for wave in range(3):
            for g in range(rng.randint(2, 5)):
                name = f"w{wave}g{g}"
                size = rng.randint(1, 4)
                minimum = rng.randint(1, size)
                gangs[name] = (size, minimum)
                _gang(sim, name, size, minimum, cpu=str(rng.choice([1, 2])),
                      priority=rng.choice([LOW, LOW * 2, HIGH]))
            sim.run()
        assert not sim.violations, sim.violations
        for preemptor, victims in sim.evictions.by:
            assert victims, f"{preemptor} evicted nothing"
            kind, key = preemptor.split(" ")
            if kind == "gang":
                group = key.split("/", 1)[1]
                assert sim.bound_in_group(group) >= gangs[group][1], (
                    f"{preemptor} evicted {victims} but was not placed")
            else:
                assert key in sim.bound, f"{preemptor} evicted {victims} but was not placed"
    finally:
        sim.close()


# -- held slots for a gang's replacement members ----------------------------------------------

def test_a_lost_members_room_is_held_for_its_replacement(sim: SimCluster) -> None:
    sim.add_node("n", cpu="4")
    _gang(sim, "g", 4, 4, priority=LOW)
    sim.run()
    sim.add_pod("plain", cpu="1", priority=LOW)  # waits: the node is full
    sim.run()
    node = sim.bound["ns/g-2"]
    sim.delete_pod("ns/g-2")
    sim.run()
    assert "ns/plain" not in sim.bound  # the held room is not the next pod's
    sim.add_pod("g-2b", cpu="1", group="g", priority=LOW)  # the controller's replacement
    sim.run()
    assert sim.bound["ns/g-2b"] == node
    assert "ns/plain" not in sim.bound


def _record_group_events(sim: SimCluster) -> list[tuple[str, str, str, str]]:
    """(group, type, reason, message) of every event the scheduler posts on a group (the
    simulation has no reporter, so they would go nowhere)."""
    events: list[tuple[str, str, str, str]] = []

    def record(group: PodGroup, kind: str, reason: str, message: str) -> None:
        events.append((group.key, kind, reason, message))

    sim.scheduler.notices.group_event = record  # type: ignore[method-assign]
    return events


def test_an_expired_hold_frees_the_room_with_an_event(sim: SimCluster) -> None:
    events = _record_group_events(sim)
    sim.add_node("n", cpu="2")
    _gang(sim, "g", 2, 2, priority=LOW)
    sim.run()
    sim.add_pod("plain", cpu="1", priority=LOW)
    sim.delete_pod("ns/g-0")
    sim.run()
    assert "ns/plain" not in sim.bound
    assert not [e for e in events if e[2] == "HoldReleased"]
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    with sim.scheduler.cache.lock:
        plugin.housekeeping(time.time() + 31)  # type: ignore[attr-defined]
    sim.run()
    assert "ns/plain" in sim.bound
    released = [e for e in events if e[2] == "HoldReleased"]
    assert len(released) == 1, events
    group, kind, _, message = released[0]
    assert (group, kind) == ("ns/g", "Normal")
    assert "ns/g-0" in message and "node n " in message, message


@pytest.mark.parametrize(("hold_seconds", "lands_on"), [(30, "held"), (0, "empty")])
def test_a_replacement_that_fits_two_nodes_goes_back_to_the_held_one(
        sim: SimCluster, hold_seconds: int, lands_on: str) -> None:
    """The replacement would score better on a large empty node that appeared after the
    gang was placed; the hold sends it back to its lost member's node (without a hold,
    the control case, it goes to the empty one)."""
    sim.add_node("held", cpu="2")
    sim.add_group("g", 2, replacementHoldSeconds=hold_seconds)
    for i in range(2):
        sim.add_pod(f"g-{i}", cpu="1", group="g", priority=LOW)
    sim.run()
    assert sim.bound_in_group("g") == 2
    sim.add_node("empty", cpu="32")
    sim.delete_pod("ns/g-0")
    sim.run()
    sim.add_pod("g-0b", cpu="1", group="g", priority=LOW)
    sim.run()
    assert sim.bound["ns/g-0b"] == lands_on


def test_a_failed_members_room_is_held_for_its_replacement(sim: SimCluster) -> None:
    """A member that Failed (its phase, the pod object still there) loses its room like a
    deleted one: held for the replacement, not the next pod's."""
    sim.add_node("n", cpu="2")
    _gang(sim, "g", 2, 2, priority=LOW)
    sim.run()
    sim.add_pod("plain", cpu="1", priority=LOW)  # waits: the node is full
    sim.run()
    lost = sim.scheduler.cache.pod("ns/g-0")
    assert lost is not None and lost.node_name == "n"
    sim.pods.on_update(lost, dataclasses.replace(lost, phase="Failed"))
    sim.run()
    assert "ns/plain" not in sim.bound
    sim.add_pod("g-0b", cpu="1", group="g", priority=LOW)
    sim.run()
    assert sim.bound["ns/g-0b"] == "n"
    assert "ns/plain" not in sim.bound


def test_no_hold_when_turned_off(sim: SimCluster) -> None:
    sim.add_node("n", cpu="2")
    sim.add_group("off", 2, replacementHoldSeconds=0)
    for i in range(2):
        sim.add_pod(f"off-{i}", cpu="1", group="off", priority=LOW)
    sim.run()
    sim.delete_pod("ns/off-0")
    sim.add_pod("plain", cpu="1", priority=LOW)
    sim.run()
    assert "ns/plain" in sim.bound


def test_no_hold_for_members_preemption_evicted(sim: SimCluster) -> None:
    """The room of a gang evicted by a higher-priority pod is the preemptor's."""
    sim.add_node("n", cpu="2")
    _gang(sim, "g", 2, 2, priority=LOW)
    sim.run()
    sim.add_pod("high", cpu="2", priority=HIGH)
    sim.run()
    assert sorted(sim.evictions.victims) == ["ns/g-0", "ns/g-1"]
    assert "ns/high" in sim.bound
    assert not sim.scheduler.framework.instances["Coscheduling"].manager.holds  # type: ignore[attr-defined]


def test_a_pod_that_cannot_preempt_says_why_in_its_condition(sim: SimCluster) -> None:
    """PostFilter's reasons reach the pod, as kube-scheduler's do: the filter summary and
    what preemption found."""
    sim.add_node("n", cpu="1")
    sim.add_pod("holder", cpu="1", priority=HIGH)
    sim.run()
    sim.add_pod("late", cpu="1", priority=LOW)
    result = sim.scheduler.schedule_one(timeout=1)
    assert result is not None and result.pod_key == "ns/late"
    assert result.status.message.startswith("0/1 nodes are available: ")
    assert "preemption: no node where evicting lower-priority pods makes room" in \
        result.status.message


def test_counters_without_labels_are_exported_at_zero() -> None:
    text = SchedulerMetrics().exposition()
    assert "\ncoscheduling_gang_preemptions_total 0\n" in text
    assert "\nscheduler_preemption_attempts_total 0\n" in text


def test_a_victim_whose_eviction_failed_keeps_its_room_and_is_evicted_again(
        request: pytest.FixtureRequest) -> None:
    """The API server refuses one victim's eviction: it keeps running, so the preemptor
    does not take its room, and does not wait for it for ever either: its attempt fails,
    and (once its freeze is over, none here) it preempts again, that victim included, and
    is bound once the victims are gone."""
    sim = SimCluster({"pluginConfig": [{"name": "Coscheduling",
                                        "args": {"freezeSeconds": 0}}]})
    request.addfinalizer(sim.close)
    sim.add_node("n", cpu="2")
    _gang(sim, "low", 2, 2, priority=LOW)
    sim.run()
    sim.evictions.refused.add("ns/low-0")
    _gang(sim, "high", 2, 2, priority=HIGH)
    _schedule_until_idle(sim)
    assert sim.bound_in_group("high") == 0
    assert not sim.scheduler.ledger.evicted(sim.scheduler.cache.pod("ns/low-0"))
    sim.run()
    assert sim.bound_in_group("high") == 2
    assert sorted(set(sim.evictions.victims)) == ["ns/low-0", "ns/low-1"]
    assert not sim.violations


def _bound(sim: SimCluster, name: str, node: str, cpu: str, priority: int) -> None:
    """A plain pod already running on ``node`` (as another scheduler left it)."""
    sim.pods.on_add(parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"nodeName": node, "priority": priority, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}))


def _high(sim: SimCluster, name: str, cpu: str, selector: dict[str, str] | None = None) -> None:
    sim.pods.on_add(parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "creationTimestamp": "2026-01-02T00:00:00Z"},
        "spec": {"schedulerName": "batch-scheduler", "priority": HIGH,
                 "nodeSelector": selector or {},
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}}))


def test_a_plain_preemptors_nominated_room_is_not_taken_by_a_lower_pod(
        sim: SimCluster) -> None:
    sim.add_node("n", cpu="2")
    _bound(sim, "low-a", "n", "1", LOW)
    _bound(sim, "low-b", "n", "1", LOW + 1)
    _high(sim, "high", "1")
    _schedule_until_idle(sim)
    assert sim.evictions.victims == ["ns/low-a"]
    sim.add_pod("sneak", cpu="1", priority=LOW)  # arrives while the victim terminates
    _schedule_until_idle(sim)
    sim.run()
    assert sim.bound.get("ns/high") == "n"
    assert "ns/sneak" not in sim.bound
    assert sim.evictions.victims == ["ns/low-a"]


def test_victims_only_where_evicting_lets_every_filter_pass(sim: SimCluster) -> None:
    """The cheaper victim is on a node the preemptor's selector refuses: evicting there
    would be for nothing, so the victim is taken where the preemptor can go."""
    sim.add_node("a", cpu="1", labels={"disk": "ssd"})
    sim.add_node("b", cpu="1", labels={"disk": "hdd"})
    _bound(sim, "on-a", "a", "1", LOW + 5)
    _bound(sim, "on-b", "b", "1", LOW)  # the lower priority: the pick without the selector
    _high(sim, "high", "1", selector={"disk": "ssd"})
    sim.run()
    assert sim.evictions.victims == ["ns/on-a"]
    assert sim.bound.get("ns/high") == "a"


@pytest.mark.parametrize(("on_x", "on_y", "victims"), [
    # (pods on node x, pods on node y) as (cpu, priority): the node kube-scheduler picks.
    ([("1", LOW + 2), ("1", LOW + 2)], [("2", LOW + 1)], ["ns/y-0"]),  # lowest highest prio
    ([("1", LOW), ("1", LOW)], [("2", LOW)], ["ns/y-0"]),  # then the smallest priority sum
    ([("2", LOW + 1)], [("1", LOW), ("1", LOW + 1)], ["ns/x-0"]),  # sum LOW+1 < 2 LOW+1
])
def test_candidate_nodes_are_ranked_as_kube_scheduler_ranks_them(
        sim: SimCluster, on_x: list[tuple[str, int]], on_y: list[tuple[str, int]],
        victims: list[str]) -> None:
    for node, pods in (("x", on_x), ("y", on_y)):
        sim.add_node(node, cpu="2")
        for i, (cpu, priority) in enumerate(pods):
            _bound(sim, f"{node}-{i}", node, cpu, priority)
    _high(sim, "high", "2")
    sim.run()
    assert sorted(sim.evictions.victims) == victims


def _attempts(metrics: SchedulerMetrics, outcome: str) -> float:
    return sum(v for labels, v in metrics.schedule_attempts._values.items()
               if labels and labels[0] == outcome)


def _drain_active(sim: SimCluster) -> None:
    """Run every cycle the queue has ready, without finishing any eviction."""
    while sim.scheduler.schedule_one(timeout=0.05) is not None:
        pass
    sim.settle()


def test_a_preemptor_is_not_retried_while_its_victims_terminate() -> None:
    """Issue 28: events about other pods (victims turning terminating, room freed elsewhere)
    do not retry a gang that waits for its victims; the last victim's departure does."""
    sim = SimCluster({"podInitialBackoffSeconds": 0.001, "podMaxBackoffSeconds": 0.001})
    try:
        sim.add_node("n0", cpu="4")
        sim.add_node("n1", cpu="1")
        _gang(sim, "low", 4, 4, priority=LOW)
        sim.add_pod("other", priority=LOW)
        sim.run()
        assert sim.bound_in_group("low") == 4 and "ns/other" in sim.bound
        _gang(sim, "high", 4, 4, priority=HIGH)
        _drain_active(sim)
        victims = sim.evictions.victims
        assert sorted(victims) == [f"ns/low-{i}" for i in range(4)]
        tried = _attempts(sim.scheduler.metrics, "unschedulable")
        assert tried == 1  # the preempting attempt; its gang mates are not tried meanwhile
        for key in victims:  # the API server shows them terminating, one event each
            pod = sim.scheduler.cache.pod(key)
            assert pod is not None
            sim.pods.on_update(pod, dataclasses.replace(pod, deleting=True))
        sim.delete_pod("ns/other")  # room freed elsewhere: too little for the gang
        _drain_active(sim)
        assert _attempts(sim.scheduler.metrics, "unschedulable") == tried
        assert all(sim.scheduler.ledger.waiting(f"ns/high-{i}") for i in range(4))
        sim.evictions.finish()  # the kubelet finishes the victims' deletion
        sim.run()
        assert sim.bound_in_group("high") == 4
        assert not sim.violations, sim.violations
    finally:
        sim.close()
