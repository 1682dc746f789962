"""Deserved shares between queues: seed 000's worked example, and properties."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduling.api.queues import parse_queue
from coscheduling.plugins.proportion.shares import Demand, deserved_shares

GI = 2**30


def test_seed_000_example() -> None:
    """Two nodes (6 cpu/15Gi, 3 cpu/12Gi); Queue-1 weight 2 asks cpu 5/10Gi, Queue-2 weight 4
    asks cpu 4+6/12Gi+8Gi: deserved cpu 3/9Gi and cpu 6/18Gi."""
    capacity = {"cpu": 6000 + 3000, "memory": 15 * GI + 12 * GI}
    shares = deserved_shares(capacity, {
        "Queue-1": Demand(2, {"cpu": 5000, "memory": 10 * GI}),
        "Queue-2": Demand(4, {"cpu": 4000 + 6000, "memory": 12 * GI + 8 * GI}),
    })
    assert shares == {"Queue-1": {"cpu": 3000, "memory": 9 * GI},
                      "Queue-2": {"cpu": 6000, "memory": 18 * GI}}


@pytest.mark.parametrize(
    ("capacity", "demands", "expected"),
    [
        # A queue alone gets everything it asks for, up to the cluster.
        (12, {"a": (1, 100, None), "b": (5, 0, None)}, {"a": 12, "b": 0}),
        # What a small request leaves over goes to the others, by weight.
        (12, {"a": (1, 100, None), "b": (2, 100, None), "c": (3, 1, None)},
         {"a": 3, "b": 7, "c": 1}),
        # Capability caps a queue below its weighted part.
        (12, {"a": (3, 100, 2), "b": (1, 100, None)}, {"a": 2, "b": 10}),
        # Everyone satisfied: leftover room is nobody's.
        (12, {"a": (1, 2, None), "b": (1, 3, None)}, {"a": 2, "b": 3}),
        # Three weights, all asking for more: 1:2:3 of 12.
        (12, {"a": (1, 99, None), "b": (2, 99, None), "c": (3, 99, None)},
         {"a": 2, "b": 4, "c": 6}),
        (0, {"a": (1, 5, None)}, {"a": 0}),
    ],
)
def test_shares_table(capacity: int, demands: dict[str, tuple[int, int, int | None]],
                      expected: dict[str, int]) -> None:
    shares = deserved_shares({"cpu": capacity}, {
        name: Demand(w, {"cpu": r}, {} if cap is None else {"cpu": cap})
        for name, (w, r, cap) in demands.items()})
    assert {name: s["cpu"] for name, s in shares.items()} == expected


_queue = st.tuples(st.integers(1, 10), st.integers(0, 10_000),
                   st.one_of(st.none(), st.integers(0, 10_000)))


@settings(max_examples=300, deadline=None)
@given(capacity=st.integers(0, 20_000), queues=st.lists(_queue, min_size=1, max_size=6))
def test_share_properties(capacity: int, queues: list[tuple[int, int, int | None]]) -> None:
    demands = {f"q{i}": Demand(w, {"cpu": r}, {} if cap is None else {"cpu": cap})
               for i, (w, r, cap) in enumerate(queues)}
    shares = {name: s["cpu"] for name, s in deserved_shares({"cpu": capacity}, demands).items()}
    assert sum(shares.values()) <= capacity
    for name, demand in demands.items():
        assert 0 <= shares[name] <= demand.want("cpu")  # never above request or capability
    hungry = [n for n, d in demands.items() if shares[n] < d.want("cpu")]
    if hungry:
        # Room is left over only when every queue got what it wants (up to rounding).
        assert capacity - sum(shares.values()) < len(demands)
    for a in hungry:
        for b in demands:
            # A queue that got less than it wants is never behind, weight for weight, any
            # other queue (up to one unit of rounding).
            wa, wb = demands[a].weight, demands[b].weight
            assert shares[b] * wa <= (shares[a] + 1) * wb


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"weight": 0}, "spec.weight"), ({"weight": "2"}, "spec.weight"),
        ({"weight": True}, "spec.weight"), ({"capability": {"cpu": "x"}}, "spec.capability"),
        ({"capability": {"cpu": "-1"}}, "spec.capability"),
        ({"reclaimable": "yes"}, "spec.reclaimable"), (["w"], "spec"),
    ],
)
def test_queue_validation_names_the_field(spec: object, error: str) -> None:
    queue = parse_queue({"metadata": {"name": "q"}, "spec": spec})
    assert not queue.valid and queue.errors[0].startswith(error + ":"), queue.errors


def test_queue_defaults() -> None:
    queue = parse_queue({"metadata": {"name": "q"}})
    assert (queue.weight, queue.capability, queue.reclaimable, queue.errors) == (1, {}, True, ())
    queue = parse_queue({"metadata": {"name": "r"},
                         "spec": {"weight": 3, "capability": {"cpu": "64"}, "reclaimable": False}})
    assert (queue.weight, queue.capability, queue.reclaimable) == (3, {"cpu": 64000}, False)
