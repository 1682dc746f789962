"""The gang's cycle is the core's: the gang plugin's PreFilter only asks for the admission,
the core's PreFilter (one owner for the loop and the gRPC server) places the members; and the
one node choice both cycles use keeps a member off the nodes a search tried."""

from __future__ import annotations

import pytest

from coscheduling.core.placement import TRIED
from coscheduling.framework.cycle_state import GANG_ADMISSION, CycleState
from coscheduling.framework.gangplan import Chunks, Members
from coscheduling.framework.interfaces import GangAdmission
from tests.simulation import SimCluster


@pytest.fixture
def sim() -> SimCluster:
    cluster = SimCluster()
    for name in ("n1", "n2"):
        cluster.add_node(name, cpu="2")
    return cluster


def test_the_gang_plugin_asks_and_the_core_places_the_gang(sim: SimCluster) -> None:
    sim.add_group("g", 3)
    first, *rest = (sim.add_pod(name, group="g") for name in ("a", "b", "c"))
    scheduler = sim.scheduler
    cache = scheduler.cache
    plugin = scheduler.framework.instances["Coscheduling"]
    with cache.lock:
        state = CycleState()
        assert plugin.pre_filter(state, first).ok
        request = state.read(GANG_ADMISSION)
        assert isinstance(request, GangAdmission)
        assert (request.group_key, [p.key for p in request.candidates]) \
            == ("ns/g", ["ns/b", "ns/c"])
        assert not any(cache.claimed_node(p.key) for p in (first, *rest))  # asked, not placed

        assert scheduler.cycles.pre_filter(CycleState(), first).ok
        assert all(cache.claimed_node(p.key) for p in (first, *rest))


def test_a_gang_that_does_not_fit_is_refused_by_the_core_with_nothing_claimed(
        sim: SimCluster) -> None:
    sim.add_group("g", 5)
    members = [sim.add_pod(name, group="g") for name in ("a", "b", "c", "d", "e")]
    cache = sim.scheduler.cache
    with cache.lock:
        status = sim.scheduler.cycles.pre_filter(CycleState(), members[0])
        assert not status.ok and status.plugin == "Coscheduling"
        assert "members of the gang cannot be placed" in status.message
        assert not any(cache.claimed_node(p.key) for p in members)


@pytest.mark.parametrize(("claimed", "avoid", "chosen"), [
    ("n2", frozenset(), "n2"),            # the claimed node first, while it still fits
    ("n2", frozenset({"n2"}), "n1"),      # unless the search tried it
    ("", frozenset({"n1"}), "n2"),
    ("", frozenset({"n1", "n2"}), None),  # every node tried: none is left
])
def test_the_one_node_choice(sim: SimCluster, claimed: str, avoid: frozenset[str],
                             chosen: str | None) -> None:
    pod = sim.add_pod("p")
    scheduler = sim.scheduler
    with scheduler.cache.lock:
        if claimed:
            scheduler.cache.claim(pod, claimed)
        state = CycleState()
        assert scheduler.framework.run_pre_filter(state, pod).ok
        choice = scheduler.placer.select(state, pod, avoid)
        assert choice.node == chosen
        assert all(choice.failures[name].reasons == (TRIED,) for name in avoid
                   if name in choice.failures)
        if chosen is None:
            assert set(choice.failures) == avoid


def _refusal(made: int, why: str) -> str:
    return f"{made} placed: {why}"


@pytest.mark.parametrize(("cpu", "expected"), [
    ("1", ""),                                           # room for all three: claims kept
    ("2", "second: 0 placed: 0/2 nodes are available"),  # c fits nowhere: a's and b's go too
])
def test_a_plan_of_chunks_is_placed_whole_or_not_at_all(sim: SimCluster, cpu: str,
                                                        expected: str) -> None:
    a, b = sim.add_pod("a", cpu="1"), sim.add_pod("b", cpu="1")
    c = sim.add_pod("c", cpu=cpu)
    filler = sim.add_pod("filler", cpu="1")
    scheduler = sim.scheduler
    cache = scheduler.cache
    with cache.lock:
        cache.assume(filler, "n2")  # 3 of the 4 cpus are left
        plan = Chunks((("", Members((a, b), False, _refusal)),
                       ("second: ", Members((c,), False, _refusal))))
        why = scheduler.cycles.gangs.place(plan, "Coscheduling")
        assert why.startswith(expected) and bool(why) == bool(expected)
        claimed = [bool(cache.claimed_node(p.key)) for p in (a, b, c)]
        assert claimed == [not expected] * 3
