"""Pods on nodes found by a label or by their pod affinity, for the plugins that count them.

Inter-pod affinity and topology spread count, for every pod they place, the pods matching a
selector in each topology domain. Visiting every pod on every node for that costs
O(pods in the cluster) per placement, and a gang's members are placed one after another.
Selectors nearly always name a label value (``matchLabels``, ``key In (...)``), so the pods
that may match are found here by that value, and only they are checked in full.

A label key is indexed from the first time a selector asks for it (one pass over the
nodes), then kept current by the cache as pods come onto node records and leave them:
clusters whose pods carry no such selectors pay nothing for it. Read-only questions (gRPC
Filter, Score, Simulate) run on a view of the cache with an index of its own, so the keys
of pods that may not exist never reach the live one.

The pods that carry pod affinity are kept by their (distinct) affinity, so the terms of
pods already placed are matched once per distinct affinity, not once per pod; this is the
one place the cache keeps placed pods' affinities.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from itertools import chain
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

if TYPE_CHECKING:
    from coscheduling.api.podaffinity import LabelSelector, PodAffinity
    from coscheduling.api.pods import Pod


class NodeRecord(Protocol):
    """What the index reads of a node record (``NodeInfo``)."""

    name: str
    pods: dict[str, Pod]
    claims: dict[str, Pod]


_N = TypeVar("_N", bound=NodeRecord)
_K = TypeVar("_K")
# (pod key, node name, whether it is a gang's claim): a pod can sit on a node as a pod and
# as a claim, and both count.
_Slot = tuple[str, str, bool]
_Entry = tuple["Pod", _N]


class LabelIndex(Generic[_N]):
    """label key -> value -> the pods (bound, assumed or claimed) carrying it, and their node."""

    __slots__ = ("_affinities", "_keys")

    def __init__(self) -> None:
        self._keys: dict[str, dict[str, dict[_Slot, _Entry[_N]]]] = {}
        self._affinities: dict[PodAffinity, dict[_Slot, _Entry[_N]]] = {}

    def account(self, pod: Pod, info: _N, claim: bool, sign: int) -> None:
        """``pod`` came onto (``sign`` > 0) or left ``info``, as a pod or a claim."""
        if pod.pod_affinity is not None:
            _file(self._affinities, pod.pod_affinity, (pod.key, info.name, claim),
                  (pod, info), sign)
        if not self._keys:
            return
        labels = pod.labels
        for key, values in self._keys.items():
            value = labels.get(key)
            if value is None:
                continue
            _file(values, value, (pod.key, info.name, claim), (pod, info), sign)

    def keys(self) -> frozenset[str]:
        """The label keys indexed now."""
        return frozenset(self._keys)

    def has_affinities(self) -> bool:
        """Whether any pod on a node record carries pod affinity (asked first, per pod)."""
        return bool(self._affinities)

    def affinities(self) -> Iterator[tuple[PodAffinity, Iterable[_Entry[_N]]]]:
        """Each distinct pod affinity of the pods on node records, with those pods."""
        for affinity, holders in self._affinities.items():
            yield affinity, holders.values()

    def candidates(self, selector: LabelSelector,
                   nodes: Iterable[_N]) -> Iterable[_Entry[_N]] | None:
        """The pods that may match ``selector`` (a superset: callers check each in full),
        or None when it names no label value to look them up by. ``nodes``: every node
        record, read once when a key is first asked for."""
        pairs = selector.pairs
        if pairs:
            best: Iterable[_Entry[_N]] | None = None
            smallest = -1
            for key, value in pairs:
                bucket = self._values(key, nodes).get(value)
                if bucket is None:
                    return ()
                if smallest < 0 or len(bucket) < smallest:
                    best, smallest = bucket.values(), len(bucket)
            return best
        for requirement in selector.requirements:
            if requirement.operator == "In":
                values = self._values(requirement.key, nodes)
                found = [values[v].values() for v in dict.fromkeys(requirement.values)
                         if v in values]  # a value listed twice: its pods once
                return chain.from_iterable(found)
        return None

    def _values(self, key: str, nodes: Iterable[_N]) -> dict[str, dict[_Slot, _Entry[_N]]]:
        values = self._keys.get(key)
        if values is None:
            values = self._keys[key] = {}
            for info in nodes:
                for pod, claim in _present(info):
                    value = pod.labels.get(key)
                    if value is not None:
                        _file(values, value, (pod.key, info.name, claim), (pod, info), 1)
        return values


def _file(buckets: dict[_K, dict[_Slot, _Entry[_N]]], key: _K, slot: _Slot, entry: _Entry[_N],
          sign: int) -> None:
    if sign > 0:
        buckets.setdefault(key, {})[slot] = entry
        return
    bucket = buckets.get(key)
    if bucket is not None:
        bucket.pop(slot, None)
        if not bucket:
            del buckets[key]


def _present(info: _N) -> Iterator[tuple[Pod, bool]]:
    for pod in info.pods.values():
        yield pod, False
    for pod in info.claims.values():
        yield pod, True
