"""A simulation runs on a view of the cache, never on the live one: whatever a view goes
through (random tentative changes, committed or discarded, and direct ones), the live cache
stays exactly as it was (every store, index and node record); the view starts as the live
cache (indexes rebuilt from its records); and the loop binds pods while a what-if runs,
which the what-if does not see."""

from __future__ import annotations

import threading
from typing import Any

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduling.core.cache import Cache
from coscheduling.core.view import simulating
from coscheduling.framework.interfaces import GangSimulator
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.whatif.derive import derive
from coscheduling.whatif.simulate import FITS_NOW, SUFFIX, simulate
from tests.simulation import SimCluster
from tests.unit.test_transaction import (
    PodSpec,
    Run,
    World,
    build,
    check_indexes,
    fingerprint,
    ops,
    pods,
    worlds,
)


def _without_label_keys(printed: dict[str, Any]) -> dict[str, Any]:
    """A view indexes a label key when first asked for it (its index is rebuilt)."""
    return {key: value for key, value in printed.items() if key != "label_keys"}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_a_view_changes_nothing_live(data: st.DataObject) -> None:
    world = data.draw(worlds())
    chosen = data.draw(ops(world))
    commit = data.draw(st.booleans())
    live = build(world)
    before = fingerprint(live)
    with simulating(live) as view:
        routed = live  # what this thread now reaches through the live cache: the view
        assert routed.nodes() is not None and routed._nodes is view._nodes
        assert _without_label_keys(fingerprint(view)) == _without_label_keys(before)
        check_indexes(view)
        run = Run(routed, pods(world))  # through the routed cache, as plugins reach it
        with routed.transaction() as tx:
            rest = run.scope(tx, chosen)
            while rest:
                rest = run.scope(tx, rest[1:])
            if commit:
                tx.commit()
        check_indexes(view)
        for pod in pods(world)[:2]:  # and changes made outside a transaction
            routed.claim(pod, pod.node_name or "n0")
            routed.remove_pod(pod.key)
        assert _seen_by_another_thread(live) == before
    assert fingerprint(live) == before
    assert not live.scopes and type(live) is Cache  # routing ends with the last view
    # A reader that followed one cache's change log never takes the other's numbers for
    # its own (node tables, plugins' memos): it reads every node again.
    assert live.changed_since(view.change_seq) is None
    assert view.changed_since(live.change_seq) is None


def test_a_views_node_record_copies_every_field_and_shares_no_container() -> None:
    """Every slot of a node record (a new one included) is copied into a view's record,
    equal but with containers of its own (the memo of shared room starts empty)."""
    live = build(World(2, tuple(
        PodSpec(f"p{i}", 1, i % 2, "a", "g1" if i % 2 else "", bool(i % 2), True, state,
                "n0") for i, state in enumerate(("bound", "assumed", "claimed", "bound"))),
        False, ((0, (2,)),), True))
    info = live.node("n0")
    assert info is not None
    info.unreadable["ns/x"] = "bad"
    info.used("cpu")  # fills the memo
    copy = live.snapshot().node("n0")
    assert copy is not None
    for name in NodeInfo.__slots__:
        if name == "_shared_memo":
            continue
        value = getattr(info, name)
        assert getattr(copy, name) == value, name
        if isinstance(value, dict | list | set):
            assert value and getattr(copy, name) is not value, name
    assert copy._shared_memo is not info._shared_memo


def _seen_by_another_thread(cache: Cache) -> dict[str, Any]:
    seen: list[dict[str, Any]] = []
    reader = threading.Thread(target=lambda: seen.append(fingerprint(cache)))
    reader.start()
    reader.join()
    return seen[0]


def _job(count: int) -> bytes:
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                           "spec": {"parallelism": count, "template": {"spec": {"containers": [
                               {"name": "c", "image": "x",
                                "resources": {"requests": {"cpu": "1"}}}]}}}}).encode()


def test_the_loop_binds_a_pod_while_a_whatif_runs(sim: SimCluster) -> None:
    """The what-if stops inside its trial (on an event, not a timer) until the loop has
    scheduled and bound a pod: the loop is not held up, the live cache never holds the
    what-if's gang, and the what-if answers for the cluster as its view saw it."""
    for name in ("n1", "n2"):
        sim.add_node(name, cpu="4")
    simulator = next(p for p in sim.scheduler.framework.instances.values()
                     if isinstance(p, GangSimulator))
    in_trial, go = threading.Event(), threading.Event()
    trial = simulator.trial

    def paused_trial(*args: Any, **kwargs: Any) -> Any:
        in_trial.set()
        assert go.wait(60), "the test never let the trial go on"
        return trial(*args, **kwargs)

    simulator.trial = paused_trial  # type: ignore[method-assign]
    answers: list[Any] = []
    whatif = threading.Thread(target=lambda: answers.append(
        simulate(sim.scheduler, derive(_job(8), "ns"))), daemon=True)
    whatif.start()
    try:
        assert in_trial.wait(30)
        cache = sim.scheduler.cache
        assert not [p for p in cache.pods() if SUFFIX in p.name]  # only in the view
        assert not [key for key in sim.scheduler.listers.podgroups() if SUFFIX in key]
        sim.add_pod("plain", cpu="3")
        loop = threading.Thread(target=sim.run, daemon=True)
        loop.start()
        loop.join(30)  # a failure guard only: a loop blocked by the what-if never ends
        assert not loop.is_alive(), "the loop was held up by the what-if"
        assert sim.bound == {"ns/plain": sim.bound["ns/plain"]}
        assert cache.pod("ns/plain") is not None and cache.pod("ns/plain").node_name
    finally:
        go.set()
        whatif.join(60)
    assert answers and answers[0].verdict == FITS_NOW  # 8 cpu free when the view was taken
    assert not any(info.claims for info in sim.scheduler.cache.nodes())
