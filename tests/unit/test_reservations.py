"""Reservations and backfill, on the in-memory cluster around the real scheduler: the gang
first in line holds the room that frees until it fits whole; higher priorities and pods that
end in time may still use it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coscheduling.api.queues import parse_queue
from coscheduling.api.runtimes import EXPECTED_RUNTIME_ANNOTATION
from coscheduling.core.eventhandlers import QueueEvents
from coscheduling.plugins.coscheduling.plugin import Coscheduling
from coscheduling.plugins.proportion import Proportion
from tests.simulation import SimCluster


def _sim(**args: object) -> SimCluster:
    return SimCluster({"pluginConfig": [{"name": "Coscheduling", "args": dict(args)}]})


@pytest.fixture
def reserving() -> Iterator[SimCluster]:
    cluster = _sim()
    yield cluster
    cluster.close()
    assert not cluster.violations, cluster.violations


def _plugin(sim: SimCluster) -> Coscheduling:
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    return plugin


def _busy_node(sim: SimCluster, runtime: str | None = None, cpu: str = "4") -> None:
    """One node full of 1-cpu jobs (``runtime`` declared on each, if given)."""
    sim.add_node("n0", cpu=cpu)
    notes = {EXPECTED_RUNTIME_ANNOTATION: runtime} if runtime else {}
    for i in range(int(cpu)):
        sim.add_pod(f"small-{i}", annotations=notes)
    sim.run()
    assert all(f"ns/small-{i}" in sim.bound for i in range(int(cpu)))


def _one_core_held(sim: SimCluster, runtime: str | None = None) -> None:
    """A busy 4-cpu node, a gang "big" of 4 reserving it, and one job gone: 1 cpu held."""
    _busy_node(sim, runtime=runtime)
    _gang(sim, "big", 4)
    sim.run()
    sim.delete_pod("ns/small-0")
    sim.run()


def _gang(sim: SimCluster, name: str, size: int, cpu: str = "1", priority: int = 0,
          never_preempt: bool = False, **spec: object) -> None:
    sim.add_group(name, size, **spec)
    for i in range(size):
        sim.add_pod(f"{name}-{i}", cpu=cpu, group=name, priority=priority,
                    never_preempt=never_preempt)


def _stream_of_small_jobs(sim: SimCluster, waves: int) -> list[str]:
    """Each wave: a new 1-cpu job arrives, then an old one finishes. Returns the new ones
    that were bound."""
    bound = []
    for wave in range(waves):
        sim.add_pod(f"late-{wave}")
        sim.delete_pod(f"ns/small-{wave}")
        sim.run()
        if f"ns/late-{wave}" in sim.bound:
            bound.append(f"late-{wave}")
    return bound


def test_the_gang_first_in_line_takes_the_room_that_frees(reserving: SimCluster) -> None:
    sim = reserving
    _busy_node(sim)
    _gang(sim, "big", 4)
    sim.run()
    reservation = _plugin(sim).reservations.of("ns/big")
    assert reservation is not None and set(reservation.targets) == {"n0"}
    assert _stream_of_small_jobs(sim, 4) == []
    assert sim.bound_in_group("big") == 4
    assert _plugin(sim).reservations.of("ns/big") is None


def test_without_reservations_the_stream_starves_the_gang() -> None:
    """The same stream with reservations off: every freed core goes to a small job."""
    sim = _sim(maxReservationSeconds=0)
    try:
        _busy_node(sim)
        _gang(sim, "big", 4)
        sim.run()
        assert _stream_of_small_jobs(sim, 4) == [f"late-{w}" for w in range(4)]
        assert sim.bound_in_group("big") == 0
    finally:
        sim.close()


def test_status_and_condition_show_held_against_needed(reserving: SimCluster) -> None:
    sim = reserving
    _one_core_held(sim, runtime="60s")
    made_of = _plugin(sim).status_of("ns/big")
    assert made_of is not None
    status = made_of.status
    assert status["reservation"]["nodes"] == [
        {"node": "n0", "members": 4, "held": {"cpu": "1", "memory": "4Gi"},
         "needed": {"cpu": "4", "memory": "4Gi"}}]
    assert "estimatedStart" in status["reservation"]
    reserved = next(c for c in status["conditions"] if c["type"] == "Reserved")
    assert reserved["status"] == "True"
    assert "holds 1/4 cpu" in reserved["message"] and "estimated start" in reserved["message"]


def test_a_higher_priority_pod_takes_reserved_room_at_once(reserving: SimCluster) -> None:
    sim = reserving
    _one_core_held(sim)
    sim.add_pod("urgent", priority=1000)
    sim.run()
    assert sim.bound.get("ns/urgent") == "n0"
    reservation = _plugin(sim).reservations.of("ns/big")
    assert reservation is not None and reservation.held().get("cpu", 0) == 0


def test_only_pods_that_end_in_time_backfill(reserving: SimCluster) -> None:
    """The running jobs end within 60 s: a 10 s job may use the held core, a 600 s one and
    one of unknown runtime may not."""
    sim = reserving
    _one_core_held(sim, runtime="60s")
    sim.add_pod("long", annotations={EXPECTED_RUNTIME_ANNOTATION: "600s"})
    sim.add_pod("unknown")
    sim.run()
    assert "ns/long" not in sim.bound and "ns/unknown" not in sim.bound
    sim.add_pod("short", annotations={EXPECTED_RUNTIME_ANNOTATION: "10s"})
    sim.run()
    assert sim.bound.get("ns/short") == "n0"
    assert sim.scheduler.metrics.backfilled_pods.value() == 1
    sim.add_pod("deadline", spec={"activeDeadlineSeconds": 5})
    sim.delete_pod("ns/small-1")
    sim.run()
    assert sim.bound.get("ns/deadline") == "n0"


def test_nothing_backfills_when_the_start_cannot_be_estimated(reserving: SimCluster) -> None:
    """The running jobs declare no runtime: even a 1 s job may not use the held core."""
    sim = reserving
    _one_core_held(sim)
    sim.add_pod("quick", annotations={EXPECTED_RUNTIME_ANNOTATION: "1s"})
    sim.run()
    assert "ns/quick" not in sim.bound
    reservation = _plugin(sim).reservations.of("ns/big")
    assert reservation is not None and reservation.held()["cpu"] == 1000


def test_a_malformed_runtime_counts_as_unknown(reserving: SimCluster) -> None:
    sim = reserving
    _busy_node(sim, runtime="60s")
    _gang(sim, "big", 4)
    sim.run()
    sim.delete_pod("ns/small-0")
    pod = sim.add_pod("odd", annotations={EXPECTED_RUNTIME_ANNOTATION: "soon"})
    assert pod.runtime is None and EXPECTED_RUNTIME_ANNOTATION in pod.runtime_error
    sim.run()
    assert "ns/odd" not in sim.bound


def test_a_gang_held_to_pool_a_leaves_pool_b_to_small_jobs(reserving: SimCluster) -> None:
    sim = reserving
    sim.add_node("a0", cpu="4", labels={"pool": "a"})
    sim.add_node("b0", cpu="4", labels={"pool": "b"})
    for i in range(4):
        sim.add_pod(f"small-{i}")  # fill a0 and b0 half each, or whatever the scores pick
    for i in range(4, 8):
        sim.add_pod(f"small-{i}")
    sim.run()
    sim.add_group("big", 4)
    for i in range(4):
        sim.add_pod(f"big-{i}", group="big", spec={"nodeSelector": {"pool": "a"}})
    sim.run()
    reservation = _plugin(sim).reservations.of("ns/big")
    assert reservation is not None and set(reservation.targets) == {"a0"}
    on_b = [k for k, n in sim.bound.items() if n == "b0" and k.startswith("ns/small")]
    sim.delete_pod(on_b[0])
    sim.add_pod("late-b")
    sim.run()
    assert sim.bound.get("ns/late-b") == "b0"
    for key in [k for k, n in list(sim.bound.items()) if n == "a0"]:
        sim.delete_pod(key)
    sim.run()
    assert sim.bound_in_group("big") == 4
    assert {sim.bound[f"ns/big-{i}"] for i in range(4)} == {"a0"}


def test_max_reservation_seconds_lets_the_room_go() -> None:
    sim = _sim()
    try:
        _busy_node(sim)
        _gang(sim, "big", 4, maxReservationSeconds=1)
        sim.run()
        plugin = _plugin(sim)
        reservation = plugin.reservations.of("ns/big")
        assert reservation is not None
        sim.delete_pod("ns/small-0")
        sim.run()
        with sim.scheduler.cache.lock:
            expired = plugin._expire_reservations(reservation.until)
        assert expired == ["ns/big"]
        assert plugin.reservations.of("ns/big") is None
        sim.add_pod("late")
        sim.run()
        assert sim.bound.get("ns/late") == "n0"
        made_of = plugin.status_of("ns/big")
        assert made_of is not None
        condition = next(c for c in made_of.status["conditions"] if c["type"] == "Reserved")
        assert condition["status"] == "False" and condition["reason"] == "ReservationExpired"
    finally:
        sim.close()


def _reserving_then_drained(sim: SimCluster, gangs: list[tuple[str, int, int]]) -> list[str]:
    """A busy 4-cpu node and ``gangs`` (name, size, priority, arriving in that order): who
    reserves; then the node's jobs end."""
    _busy_node(sim)
    for name, size, priority in gangs:
        _gang(sim, name, size, priority=priority, never_preempt=True)
        sim.run()
    reserving = [r.group_key for r in _plugin(sim).reservations]
    for i in range(4):
        sim.delete_pod(f"ns/small-{i}")
    sim.run()
    return reserving


def test_one_reservation_per_queue_and_the_older_gang_wins(reserving: SimCluster) -> None:
    sim = reserving
    assert _reserving_then_drained(sim, [("first", 2, 0), ("second", 2, 0)]) == ["ns/first"]
    assert sim.bound_in_group("first") == 2 and sim.bound_in_group("second") == 2


def test_a_higher_priority_gang_displaces_a_lower_reservation(reserving: SimCluster) -> None:
    sim = reserving
    assert _reserving_then_drained(sim, [("low", 4, 0), ("high", 4, 100)]) == ["ns/high"]
    assert sim.bound_in_group("high") == 4 and sim.bound_in_group("low") == 0


def test_a_gang_that_can_never_fit_reserves_nothing(reserving: SimCluster) -> None:
    sim = reserving
    _busy_node(sim)
    _gang(sim, "huge", 2, cpu="5")
    sim.run()
    assert _plugin(sim).reservations.of("ns/huge") is None


def test_reserved_room_counts_toward_the_queue_share(reserving: SimCluster) -> None:
    """Queues a and b share one 8-cpu node equally; b runs 8 one-pod gangs, asks for 4 more
    and may not be reclaimed. a's gang of 4 reserves the cores b's jobs free; what it holds
    is a's allocation in the queues' book, so b gets the rest, and both end at their share."""

    sim = reserving
    proportion = sim.scheduler.framework.instances["Proportion"]
    assert isinstance(proportion, Proportion)
    for name in ("a", "b"):  # b is not reclaimable: a waits for room instead of evicting
        QueueEvents(sim.scheduler, proportion).on_add(parse_queue(
            {"metadata": {"name": name}, "spec": {"weight": 1, "reclaimable": False}}))
    sim.add_node("n0", cpu="8")
    for i in range(12):  # 8 run at once, 4 wait
        sim.add_group(f"b-{i}", 1, queue="b")
        sim.add_pod(f"b-{i}", group=f"b-{i}", memory="0")
    sim.run()
    assert sum(1 for i in range(12) if f"ns/b-{i}" in sim.bound) == 8
    sim.add_group("big", 4, queue="a")
    for i in range(4):
        sim.add_pod(f"big-{i}", group="big", memory="0")
    sim.run()
    reservations = _plugin(sim).reservations
    assert reservations.of("ns/big") is not None
    for i in range(2):
        sim.delete_pod(f"ns/b-{i}")
        sim.run()
    with sim.scheduler.cache.lock:
        book = proportion._current_book()
    assert book.ledgers["a"].allocated.get("cpu") == 2000  # the reservation's 2 cores
    for i in range(2, 6):
        sim.delete_pod(f"ns/b-{i}")
        sim.run()
    assert sim.bound_in_group("big") == 4
    running_b = [k for k in sim.bound if k.startswith("ns/b-")]
    assert len(running_b) == 4, running_b
