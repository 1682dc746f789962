"""Reservations and backfill, on the in-memory cluster around the real scheduler: the gang
first in line holds the room that frees until it fits whole; higher priorities and pods that
end in time may still use it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from coscheduling.api.queues import parse_queue
from coscheduling.api.runtimes import EXPECTED_RUNTIME_ANNOTATION
from coscheduling.config.errors import ConfigError
from coscheduling.core.eventhandlers import QueueEvents
from coscheduling.plugins.coscheduling.args import validate_args
from coscheduling.plugins.coscheduling.plugin import Coscheduling
from coscheduling.plugins.coscheduling.reservations import UNKNOWN
from coscheduling.plugins.proportion import Proportion
from tests.simulation import SimCluster

# The mechanics of holding room, tested on gangs of any size with only the runtime-based
# backfill; who reserves and the reclaimable lending have tests of their own below.
MECHANICS = {"reserveFromMembers": 1, "lendReclaimable": False}


def _sim(**args: object) -> SimCluster:
    return SimCluster({"pluginConfig": [{"name": "Coscheduling",
                                         "args": {**MECHANICS, **args}}]})


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


# -- who reserves: by what waiting costs -----------------------------------------------------

def _now_stamp(ago: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - ago))


@pytest.mark.parametrize(("size", "waited", "args", "cluster_cpu", "reserves"), [
    # A large gang (by members, or by its share of the cluster) reserves at once; a small
    # one only once it has waited long enough.
    (8, 0, {}, 32, True),
    (4, 0, {}, 32, False),
    (4, 70, {}, 32, True),
    (4, 0, {"reserveFromMembers": 4}, 32, True),
    (4, 20, {"reserveAfterSeconds": 10}, 32, True),
    (7, 20, {"reserveAfterSeconds": 60}, 32, False),
    (2, 0, {"reserveFromMembers": 1}, 32, True),  # every gang first in line, as before
    (4, 0, {}, 4, True),  # the whole cluster: large whatever its size
    (2, 0, {}, 8, True),  # a quarter of it
    (2, 0, {}, 12, False),  # a sixth of it
    (2, 0, {"reserveFromShare": 0.1}, 12, True),
], ids=["large-at-once", "small-fresh", "small-waited-long", "threshold-lowered",
        "wait-shortened", "wait-lengthened", "everyone", "whole-cluster", "quarter",
        "sixth", "share-lowered"])
def test_who_reserves_is_decided_by_size_and_wait(size: int, waited: float,
                                                   args: dict[str, object], cluster_cpu: int,
                                                   reserves: bool) -> None:
    """A node of ``cluster_cpu`` cpus full of 1-cpu jobs and a gang of ``size`` 1-cpu
    members created ``waited`` seconds ago, under the defaults changed by ``args``."""
    sim = SimCluster({"pluginConfig": [{"name": "Coscheduling", "args": args}]})
    try:
        _busy_node(sim, cpu=str(cluster_cpu))
        sim.add_group("g", size, created=_now_stamp(waited))
        for i in range(size):
            sim.add_pod(f"g-{i}", group="g")
        sim.run()
        assert (_plugin(sim).reservations.of("ns/g") is not None) is reserves
        assert sim.bound_in_group("g") == 0
    finally:
        sim.close()
    assert not sim.violations, sim.violations


@pytest.mark.parametrize(("field", "value", "why"), [
    ("reserveFromMembers", 0, "must be >= 1"),
    ("reserveFromMembers", 2.5, "must be an integer"),
    ("reserveAfterSeconds", -1, "must be >= 0"),
    ("reserveFromShare", 0, "must be > 0"),
    ("reserveFromShare", 1.5, "must be a share of the cluster in (0, 1]"),
    ("backfill", "yes", "must be true or false"),
    ("lendReclaimable", 1, "must be true or false"),
])
def test_bad_reservation_rules_are_refused_naming_the_field(field: str, value: object,
                                                            why: str) -> None:
    with pytest.raises(ConfigError) as err:
        validate_args({field: value}, "pluginConfig[0].args")
    assert f"pluginConfig[0].args.{field}" in str(err.value) and why in str(err.value)


# -- backfill ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("runtime", "backfill", "bound"), [
    ("10s", True, True),     # ends before the start (the jobs there end in 60 s)
    ("59s", True, True),
    ("600s", True, False),   # would delay the gang
    ("10s", False, False),   # backfill turned off: the held core waits for the gang
])
def test_a_pod_backfills_when_its_end_comes_before_the_start(runtime: str, backfill: bool,
                                                             bound: bool) -> None:
    sim = _sim(backfill=backfill)
    try:
        _one_core_held(sim, runtime="60s")
        sim.add_pod("job", annotations={EXPECTED_RUNTIME_ANNOTATION: runtime})
        sim.run()
        assert (sim.bound.get("ns/job") == "n0") is bound
        assert sim.scheduler.metrics.backfilled_pods.value() == (1 if bound else 0)
    finally:
        sim.close()
    assert not sim.violations, sim.violations


# -- reclaimable lending to pods of no known end -----------------------------------------------

@pytest.mark.parametrize(("lend", "in_gang", "bound"), [
    (True, False, True),
    (False, False, False),  # turned off: as before, pods of unknown runtime wait
    (True, True, False),    # a gang member is never lent room it could be evicted from
])
def test_a_pod_of_unknown_end_borrows_reserved_room(lend: bool, in_gang: bool,
                                                     bound: bool) -> None:
    sim = _sim(lendReclaimable=lend)
    try:
        _one_core_held(sim, runtime="60s")
        if in_gang:
            sim.add_group("pair", 1)
        sim.add_pod("open-ended", group="pair" if in_gang else "")
        sim.run()
        assert (sim.bound.get("ns/open-ended") == "n0") is bound
        reservation = _plugin(sim).reservations.of("ns/big")
        assert reservation is not None
        assert (reservation.borrowers == {"ns/open-ended": "n0"}) is bound
        assert reservation.estimate != UNKNOWN, "the borrower's room counts as the gang's"
    finally:
        sim.close()
    assert not sim.violations, sim.violations


@pytest.mark.parametrize(("jobs_ended", "evicted"), [
    (1, []),                     # two jobs still run: evicting now would be for nothing
    (2, []),
    (3, ["ns/open-ended"]),      # only the borrower's room is missing: it is taken back
])
def test_borrowed_room_is_taken_back_only_when_it_completes_the_reservation(
        jobs_ended: int, evicted: list[str]) -> None:
    """One core held on a 4-cpu node, lent to a pod of no known end; then ``jobs_ended`` of
    the other three jobs end."""
    sim = _sim(lendReclaimable=True)
    try:
        _one_core_held(sim, runtime="60s")
        sim.add_pod("open-ended")
        sim.run()
        assert sim.bound.get("ns/open-ended") == "n0"
        for i in range(1, 1 + jobs_ended):
            sim.delete_pod(f"ns/small-{i}")
            sim.run()
        assert sim.evictions.victims == evicted
        assert all(p == "gang ns/big" for p, _ in sim.evictions.by)
        assert sim.bound_in_group("big") == (4 if evicted else 0)
    finally:
        sim.close()
    assert not sim.violations, sim.violations


@pytest.mark.parametrize(("first", "second", "reserving"), [
    # (name, size, seconds waited) in order of arrival: who holds the queue's reservation.
    (("little", 4, 70), ("large", 8, 0), "ns/large"),  # a large gang goes before small ones
    (("large", 8, 70), ("little", 4, 90), "ns/large"),  # an older small one does not displace
    (("old", 8, 70), ("young", 8, 0), "ns/old"),     # between large gangs: age, as before
])
def test_a_large_gang_reserves_ahead_of_small_ones_that_waited(
        first: tuple[str, int, float], second: tuple[str, int, float], reserving: str) -> None:
    sim = SimCluster()
    try:
        _busy_node(sim, cpu="32")  # "little" asks for an eighth of it: small by share too
        for name, size, waited in (first, second):
            sim.add_group(name, size, created=_now_stamp(waited))
            for i in range(size):
                sim.add_pod(f"{name}-{i}", group=name, never_preempt=True)
            sim.run()
        assert [r.group_key for r in _plugin(sim).reservations] == [reserving]
    finally:
        sim.close()
    assert not sim.violations, sim.violations


def test_a_what_if_passing_reservations_survives_the_loop_changing_them(
        reserving: SimCluster, monkeypatch: pytest.MonkeyPatch) -> None:
    """A what-if reads the reservations from its own thread while the loop may add or drop
    one: here the loop's change lands between two steps of the what-if's reading."""
    sim = reserving
    _one_core_held(sim)
    reservations = _plugin(sim).reservations
    held = reservations.of("ns/big")
    assert held is not None
    lends = reservations._lends

    def loop_changes_them_meanwhile(pod: object, reservation: object) -> str:
        reservations._by_group.setdefault("ns/other", held)  # as the loop's reserve would
        return lends(pod, reservation)  # type: ignore[arg-type]

    monkeypatch.setattr(reservations, "_lends", loop_changes_them_meanwhile)
    urgent = sim.add_pod("urgent", priority=100)
    cache = sim.scheduler.cache
    placeholders = [target.key for target in held.targets.values()]
    assert all(cache.claimed_node(key) for key in placeholders)
    with cache.transaction() as tx:  # discarded, as the what-if's is
        reservations.pass_by(tx, urgent)
        assert not any(cache.claimed_node(key) for key in placeholders), \
            "the reserved room is not free for a pod that may pass it"
    assert all(cache.claimed_node(key) for key in placeholders), "held again once discarded"
