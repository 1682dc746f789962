"""Tentative changes to the cache, each recorded with its exact inverse.

A gang's admission and a preemption's victim search try placements on the live cache, a
what-if on a view of it (``coscheduling.core.view``): claims made and dropped while a
search backtracks, pods taken off their nodes to see
whether a preemptor would fit without them. A :class:`Transaction` records every such change
with what undoes it exactly, so no caller undoes by hand: ``commit`` keeps the changes,
``discard`` undoes them all in reverse order, and a savepoint (``mark`` /
``rollback_to``) undoes those made since (a search's step back, a topology domain that did
not fit, a subgroup that could not be placed).

A tentative eviction is a view, never a decision: the evicted pods return to their nodes
when the transaction that evicted them ends, committed or not (they leave for real when the
API server deletes them), while the claims made meanwhile stay if it commits.

One transaction is open per cache at a time, under the cache lock (entering takes it,
leaving releases it). Opening another inside it gives a nested scope over the same record:
its ``commit`` hands its changes to the enclosing scope, its ``discard`` undoes only them.
Every inverse marks its nodes changed, so per-signature node tables re-read them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.nodeinfo import NodeInfo

Undo = Callable[[], None]


class Placement(NamedTuple):
    """Where the cache holds a pod key: its assumption and its claim (node and record, or
    None), and which of the nodes involved had a node record."""

    assumed: str | None
    assumed_pod: Pod | None
    claimed: str | None
    claim_pod: Pod | None
    records: frozenset[str]


class Records(Protocol):
    """What a transaction changes and reads in the cache (``coscheduling.core.cache``)."""

    lock: threading.RLock
    scopes: list[Transaction]

    def record(self, name: str) -> NodeInfo | None: ...
    def take_off(self, name: str, pod_key: str) -> Pod | None: ...
    def put_back(self, name: str, pod: Pod) -> None: ...
    def placement(self, pod_key: str, *nodes: str) -> Placement: ...
    def restore(self, pod_key: str, before: Placement) -> None: ...
    def touch(self, names: Iterable[str] | None) -> None: ...
    def assume(self, pod: Pod, node_name: str) -> None: ...
    def forget(self, pod_key: str) -> None: ...
    def claim(self, pod: Pod, node_name: str) -> None: ...
    def drop_claim(self, pod_key: str) -> None: ...
    def hand_over(self, victims: Iterable[Pod], takers: Iterable[str]) -> None: ...
    def take_back(self, victim: Pod) -> None: ...


Evicted = list[tuple[str, "Pod"]]
"""(node, the pod's record there) of the pods one eviction took off their nodes."""


class Transaction:
    """A recorded sequence of tentative cache changes; use it as a context manager (it
    discards unless committed)."""

    def __init__(self, cache: Records) -> None:
        self._cache = cache
        self._root = self
        self._start = 0
        self._open = False
        self._thread = 0  # the thread that entered it, holding the lock
        # The root's record: the inverse of every change still in effect, oldest first,
        # and the evictions among them (index in the record, what each took off).
        self._undo: list[Undo] = []
        self._evictions: list[tuple[int, Evicted]] = []

    # -- scope ----------------------------------------------------------------------------
    def __enter__(self) -> Transaction:
        self._cache.lock.acquire()
        scopes = self._cache.scopes
        if scopes:
            self._root = scopes[0]
            self._start = len(self._root._undo)
        scopes.append(self)
        self._open = True
        self._thread = threading.get_ident()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        try:
            if self._open:
                self.discard()
        finally:
            self._cache.lock.release()

    def _check(self) -> None:
        scopes = self._cache.scopes
        assert self._open and scopes and scopes[-1] is self, \
            "a transaction is used only while it is the innermost open one"
        assert self._thread == threading.get_ident(), \
            "a transaction is used only by the thread that holds the cache lock for it"

    def _close(self) -> None:
        self._cache.scopes.pop()
        self._open = False

    def commit(self) -> None:
        """Keep the changes (a nested scope hands them to the enclosing one); the pods it
        evicted return to their nodes."""
        self._check()
        self._end_evictions()
        if self._root is self:
            self._undo.clear()
        self._close()

    def discard(self) -> None:
        """Undo every change made in this scope, newest first."""
        self._check()
        self.rollback_to(self._start)
        self._close()

    def mark(self) -> int:
        """A savepoint: :meth:`rollback_to` it undoes what is changed after it."""
        self._check()
        return len(self._root._undo)

    def rollback_to(self, mark: int) -> None:
        """Undo, newest first, every change made since ``mark`` (of this scope)."""
        self._check()
        root = self._root
        assert self._start <= mark <= len(root._undo), f"savepoint {mark} is not this scope's"
        while len(root._undo) > mark:
            root._undo.pop()()
        root._evictions = [e for e in root._evictions if e[0] < mark]

    def _record(self, undo: Undo) -> None:
        self._root._undo.append(undo)

    # -- changes --------------------------------------------------------------------------
    def _placing(self, pod_key: str, change: Callable[[], None], *nodes: str) -> None:
        """Run ``change`` of where ``pod_key`` is assumed or claimed, recording its inverse."""
        self._check()
        cache = self._cache
        before = cache.placement(pod_key, *nodes)
        change()
        self._record(lambda: cache.restore(pod_key, before))

    def assume(self, pod: Pod, node_name: str) -> None:
        self._placing(pod.key, lambda: self._cache.assume(pod, node_name), node_name)

    def forget(self, pod_key: str) -> None:
        self._placing(pod_key, lambda: self._cache.forget(pod_key))

    def claim(self, pod: Pod, node_name: str) -> None:
        self._placing(pod.key, lambda: self._cache.claim(pod, node_name), node_name)

    def drop_claim(self, pod_key: str) -> None:
        self._placing(pod_key, lambda: self._cache.drop_claim(pod_key))

    def evict(self, pods: Iterable[Pod]) -> None:
        """Take the bound ``pods`` off their node records until this scope ends: the
        cluster as it would be without them (what preemption asks of every filter)."""
        self._check()
        cache = self._cache
        gone: Evicted = []
        for pod in pods:
            held = cache.take_off(pod.node_name, pod.key) if pod.node_name else None
            if held is not None:
                gone.append((pod.node_name, held))
        cache.touch(name for name, _ in gone)
        self._root._evictions.append((len(self._root._undo), gone))
        self._record(lambda: self._put_back(gone))

    def _put_back(self, gone: Evicted) -> None:
        for name, pod in reversed(gone):
            self._cache.put_back(name, pod)
        self._cache.touch(name for name, _ in gone)

    def _take_off(self, gone: Evicted) -> None:
        for name, pod in gone:
            assert self._cache.record(name) is not None, \
                f"node record {name} left during a transaction"
            self._cache.take_off(name, pod.key)
        self._cache.touch(name for name, _ in gone)

    def _end_evictions(self) -> None:
        """The pods this scope evicted return to their nodes, newest eviction first."""
        root = self._root
        ending = [gone for index, gone in root._evictions if index >= self._start]
        root._evictions = [e for e in root._evictions if e[0] < self._start]
        for gone in reversed(ending):
            self._put_back(gone)
            self._record(partial(self._take_off, gone))

    def hand_over(self, victims: Iterable[Pod], takers: Iterable[str]) -> None:
        """Hand ``victims``' room to the claims of ``takers`` (``Cache.hand_over``)."""
        victims = list(victims)
        self._handovers(victims, lambda: self._cache.hand_over(victims, takers))

    def take_back(self, victim: Pod) -> None:
        """``victim`` keeps its room again (``Cache.take_back``)."""
        self._handovers([victim], lambda: self._cache.take_back(victim))

    def _handovers(self, victims: list[Pod], change: Callable[[], None]) -> None:
        """Run ``change`` of the victims' hand-overs, recording the nodes' hand-overs as
        they were (in their order: room is shared in that order)."""
        self._check()
        cache = self._cache
        saved: dict[str, tuple[NodeInfo, dict[str, frozenset[str]]]] = {}
        for victim in victims:
            info = cache.record(victim.node_name) if victim.node_name else None
            if info is not None and info.name not in saved:
                saved[info.name] = (info, dict(info.handovers))
        change()

        def undo() -> None:
            for info, handovers in saved.values():
                info.handovers = handovers
                info.forget_shared()
            cache.touch(saved)

        self._record(undo)
