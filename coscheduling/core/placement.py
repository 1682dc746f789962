"""Choosing a node for a pod: Filter, then Score, with the work shared between alike pods.

Pods with the same signature (every Filter and Score plugin signs them, see
``Signer.sign``) get the same answer from a node in the same state. So the first pod of a
signature fills a *node table* with every node's Filter status and scores, and later pods
re-evaluate only the nodes that changed since, as the cache's change log tells: placing one
gang member, or one plain pod, dirties one node. A gang of N identical members then costs one
pass over the nodes plus N small updates instead of N passes, and so does a stream of pods
from one template. Tables cover every node, as ``percentageOfNodesToScore: 100`` would,
because keeping them current is cheaper than sampling anew.

A pod that some plugins cannot sign (they look beyond the node they are given: pod
affinity, topology spread) is filtered and scored on a rotating sample of nodes, as
kube-scheduler does; but only those plugins run per node. The others sign it, and their
Filter statuses and scores come from a *partial* table kept the same way, so a gang of
spread or anti-affine members pays per node for its constraints alone, not for every
plugin. Pods that hold a gang's claim (their own claim counts as free room to them alone)
and every pod when ``signatureCacheSize`` is 0 are filtered and scored from scratch.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachetools import LRUCache

from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.interfaces import MAX_NODE_SCORE, FilterPlugin, ScorePlugin
from coscheduling.framework.runtime import run_filters
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.core.cache import Cache
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.framework.runtime import Framework

MIN_FEASIBLE_NODES = 100
NODE_TABLES = "node tables"
"""Where the node tables are kept in ``Cache.derived``."""

TRIED = "node(s) tried for this member while the gang's placement was searched"
"""Why a node fails for a gang member the gang's search moved off it."""


def nodes_to_find(total: int, percentage: int) -> int:
    """How many feasible nodes to look for before scoring (kube-scheduler's adaptive rule)."""
    if total < MIN_FEASIBLE_NODES or percentage >= 100:
        return total
    if percentage <= 0:
        percentage = max(5, 50 - total // 125)
    return max(MIN_FEASIBLE_NODES, total * percentage // 100)


def describe_failures(total: int, failures: Mapping[str, Status]) -> str:
    """kube-scheduler's summary: '0/4 nodes are available: 3 Insufficient cpu, 1 ...'."""
    counts: Counter[str] = Counter()
    for status in failures.values():
        for reason in status.reasons or ("unknown reason",):
            counts[reason] += 1
    parts = [f"{n} {reason}" for reason, n in sorted(counts.items(), key=lambda x: (-x[1], x[0]))]
    if total == 0:
        return "0/0 nodes are available: no nodes in the cluster."
    return f"0/{total} nodes are available: {', '.join(parts)}."


@dataclass
class Choice:
    """The best node (None when no node passes Filter), and why each failed node failed."""

    node: str | None
    failures: Mapping[str, Status] = field(default_factory=dict)
    total: int = 0
    """Nodes in the cluster, for the '0/N nodes are available' summary."""

    def summary(self) -> str:
        return describe_failures(self.total, self.failures)


def _clamp(value: int) -> int:
    return MAX_NODE_SCORE if value > MAX_NODE_SCORE else 0 if value < 0 else value


def _rescales(plugin: ScorePlugin) -> bool:
    """Whether the plugin's normalize step depends on the other nodes' scores."""
    return type(plugin).normalize_scores is not ScorePlugin.normalize_scores


class NodeTable:
    """Filter statuses and scores of one signature on every node, kept current.

    A node's total is the weighted sum of its clamped plugin scores, the way
    ``Framework.run_score`` adds them. Plugins that rescale (normalize over all feasible
    nodes) keep their raw scores here, and are rescaled only when a raw score or the set of
    feasible nodes changed.
    """

    __slots__ = (
        "base",
        "buckets",
        "failed",
        "leave_out",
        "norm",
        "normalized",
        "plain",
        "raw",
        "synced",
        "totals",
    )

    def __init__(self, framework: Framework, state: CycleState,
                 leave_out: frozenset[str] = frozenset()) -> None:
        # A partial table (``leave_out``: the plugins that cannot sign its pods) keeps the
        # other plugins' statuses and scores; the placer runs the rest (see Placer.choose).
        self.leave_out = leave_out
        weighted = [
            (plugin, weight)
            for plugin, weight in zip(framework.score_plugins, framework.score_weights,
                                      strict=True)
            if plugin.name not in state.skip_score and plugin.name not in leave_out
        ]
        self.plain = [(p, w) for p, w in weighted if not _rescales(p)]
        self.normalized = [(p, w) for p, w in weighted if _rescales(p)]
        self._reset()

    def _reset(self) -> None:
        self.synced = -1
        self.failed: dict[str, Status] = {}
        self.totals: dict[str, int] = {}
        # Node totals -> the nodes with that total (a dict used as an ordered set).
        self.buckets: dict[int, dict[str, None]] = {}
        self.base: dict[str, int] = {}  # the plain plugins' weighted sum
        self.raw: list[dict[str, int]] = [{} for _ in self.normalized]
        self.norm: list[dict[str, int]] = [{} for _ in self.normalized]

    # -- keeping current -----------------------------------------------------------------
    def refresh(self, framework: Framework, cache: Cache, state: CycleState,
                pod: Pod) -> None:
        changed = cache.changed_since(self.synced) if self.synced >= 0 else None
        if changed is None:
            self._reset()
            names: list[str] | dict[str, None] = cache.node_names()
        else:
            names = dict.fromkeys(changed)
        rescale = False
        filters = [p for p in framework.active_filters(state) if p.name not in self.leave_out]
        for name in names:
            rescale |= self._evaluate(name, cache.node(name), filters, state, pod)
        if rescale and not self.leave_out:
            self._rescale(state, pod)
        self.synced = cache.change_seq

    def _evaluate(self, name: str, info: NodeInfo | None, filters: Sequence[FilterPlugin],
                  state: CycleState, pod: Pod) -> bool:
        """Re-run Filter and Score on one node; True if the rescaling plugins must rerun."""
        was_feasible = name in self.totals
        status = run_filters(filters, state, pod, info) if info is not None else None
        if status is None or not status.ok:
            if status is None:
                self.failed.pop(name, None)
            else:
                self.failed[name] = status
            if was_feasible:
                self._drop(name)
                return bool(self.normalized)
            return False
        assert info is not None
        self.failed.pop(name, None)
        base = 0
        for plugin, weight in self.plain:
            base += weight * _clamp(plugin.score(state, pod, info))
        self.base[name] = base
        rescale = not was_feasible and bool(self.normalized)
        for index, (plugin, _) in enumerate(self.normalized):
            value = plugin.score(state, pod, info)
            if self.raw[index].get(name) != value:
                self.raw[index][name] = value
                rescale = True
        if self.leave_out:  # ranked by the placer, over the nodes it samples
            self.totals[name] = base
            return False
        if rescale:
            self.totals[name] = base  # a placeholder: _rescale sets every total
            return True
        total = base
        for index, (_, weight) in enumerate(self.normalized):
            total += weight * _clamp(self.norm[index][name])
        self._set_total(name, total)
        return False

    def _set_total(self, name: str, total: int) -> None:
        old = self.totals.get(name)
        if old == total:
            return
        if old is not None:
            self._unbucket(name, old)
        self.totals[name] = total
        self.buckets.setdefault(total, {})[name] = None

    def _unbucket(self, name: str, total: int) -> None:
        bucket = self.buckets.get(total)
        if bucket is not None:
            bucket.pop(name, None)
            if not bucket:
                del self.buckets[total]

    def _drop(self, name: str) -> None:
        total = self.totals.pop(name)
        self._unbucket(name, total)
        self.base.pop(name, None)
        for scores in (*self.raw, *self.norm):
            scores.pop(name, None)

    def _rescale(self, state: CycleState, pod: Pod) -> None:
        for index, (plugin, _) in enumerate(self.normalized):
            scores = dict(self.raw[index])
            plugin.normalize_scores(state, pod, scores)
            self.norm[index] = scores
        self.buckets = {}
        for name, base in self.base.items():
            total = base
            for index, (_, weight) in enumerate(self.normalized):
                total += weight * _clamp(self.norm[index][name])
            self.totals[name] = total
            self.buckets.setdefault(total, {})[name] = None

    # -- answering -----------------------------------------------------------------------
    def best(self) -> dict[str, None]:
        """The feasible nodes with the highest total, as the table keeps them (an ordered
        set; empty if none is feasible). Callers must not change it."""
        if not self.buckets:
            return {}
        return self.buckets[max(self.buckets)]


class Placer:
    """Finds the node a pod goes to; owns the node tables."""

    def __init__(self, framework: Framework, cache: Cache, percentage_of_nodes_to_score: int,
                 signature_cache_size: int) -> None:
        self.framework = framework
        self.cache = cache
        self.percentage = percentage_of_nodes_to_score
        self._table_count = signature_cache_size
        self._next_start = 0
        # Filter plugin -> its place in the profile, for the failure a node reports first.
        self._filter_order = {p.name: i for i, p in enumerate(framework.filter_plugins)}

    def table(self, signature: Hashable,
              unsigned: frozenset[str] = frozenset()) -> NodeTable | None:
        """The table kept for ``signature`` (partial: of pods that ``unsigned`` plugins do
        not sign), if any (for inspection and tests)."""
        tables = self._tables()
        return tables.get((signature, unsigned)) if tables is not None else None

    def _tables(self) -> LRUCache[Hashable, NodeTable] | None:
        """The node tables of the cache in effect (a simulation's view has its own): they
        follow that cache's change log."""
        if self._table_count <= 0:
            return None
        tables: LRUCache[Hashable, NodeTable] | None = self.cache.derived.get(NODE_TABLES)
        if tables is None:
            tables = self.cache.derived[NODE_TABLES] = LRUCache(maxsize=self._table_count)
        return tables

    def select(self, state: CycleState, pod: Pod,
               avoid: frozenset[str] = frozenset()) -> Choice:
        """The node for ``pod`` (after its PreFilter ran into ``state``), for its own cycle
        and for a gang's search alike: the node its gang claimed for it if that node still
        passes Filter (as kube-scheduler tries a nominated node first), else
        :meth:`choose`. Under the cache lock."""
        claimed = self.cache.claimed_node(pod.key)
        info = self.cache.node(claimed) if claimed and claimed not in avoid else None
        if info is not None and self.framework.run_filter(state, pod, info).ok:
            return Choice(claimed)
        return self.choose(state, pod, avoid)

    def choose(self, state: CycleState, pod: Pod,
               avoid: frozenset[str] = frozenset()) -> Choice:
        """Filter and Score ``pod`` (after its PreFilter ran into ``state``), keeping it off
        the nodes in ``avoid`` (a gang's search tried them); under the cache lock. A pod
        some plugins cannot sign is sampled as kube-scheduler samples, but only those
        plugins run per node: the others' answers come from a partial table."""
        tables = self._tables()
        if tables is None or avoid or self.cache.claimed_node(pod.key):
            return self._sampled(state, pod, avoid=avoid)
        signature, unsigned = self.framework.split_signature(pod)
        table = tables.get((signature, unsigned))
        if table is None:
            table = tables[signature, unsigned] = NodeTable(self.framework, state, unsigned)
        table.refresh(self.framework, self.cache, state, pod)
        if unsigned:
            return self._sampled(state, pod, table)
        best = table.best()
        if not best:
            return Choice(None, dict(table.failed), self.cache.node_count())
        return Choice(self._break_tie(pod, best))

    def _break_tie(self, pod: Pod, ties: dict[str, None]) -> str:
        """One of the best nodes. A gang member goes where most of its gang already is
        (placed, assumed or claimed; then by name), else to the first of ``ties`` (an order
        that depends only on the events seen): never at random, because a gang is one job
        and the order its members happen to be placed in must not split it. Costs O(gang
        size), not O(ties). Other pods: at random, as kube-scheduler spreads ties."""
        first = next(iter(ties))
        if len(ties) == 1:
            return first
        if not pod.group_key:
            return random.choice(list(ties))
        holding = self.cache.group_nodes(pod.group_key, excluding=pod.key)
        near = [(-count, name) for name, count in holding.items() if name in ties]
        return min(near)[1] if near else first

    # -- sampling, for pods that cannot share a whole table --------------------------------
    def _sampled(self, state: CycleState, pod: Pod, table: NodeTable | None = None,
                 avoid: frozenset[str] = frozenset()) -> Choice:
        """kube-scheduler's pass: Filter from a rotating start until enough nodes pass, then
        Score those. With a partial ``table``, only the plugins it leaves out run here; the
        nodes in ``avoid`` fail as tried."""
        names = self.cache.node_names()
        total = len(names)
        wanted = nodes_to_find(total, self.percentage)
        feasible: list[NodeInfo] = []
        failures: dict[str, Status] = {}
        start = self._next_start % total if total else 0
        filters = self.framework.active_filters(state)
        if table is not None:
            filters = [p for p in filters if p.name in table.leave_out]
        node = self.cache.node
        examined = 0
        for offset in range(total):
            info = node(names[(start + offset) % total])
            examined += 1
            if info is None:
                continue
            if info.name in avoid:
                failures[info.name] = Status.unschedulable(TRIED)
                continue
            failed = table.failed.get(info.name) if table is not None else None
            if failed is not None:
                failures[info.name] = self._first_failure(failed, filters, state, pod, info)
                continue
            status = run_filters(filters, state, pod, info)
            if status is SUCCESS:
                feasible.append(info)
                if len(feasible) >= wanted:
                    break
            else:
                failures[info.name] = status
        self._next_start = start + examined
        if not feasible:
            return Choice(None, failures, total)
        if len(feasible) == 1 or not self.framework.score_plugins:
            return Choice(feasible[0].name, failures, total)
        if table is None:
            scores = self.framework.run_score(state, pod, feasible)
        else:
            scores = self._partial_scores(table, state, pod, feasible)
        best = max(scores.values())
        return Choice(self._break_tie(
            pod, {n: None for n, score in scores.items() if score == best}), failures, total)

    def _first_failure(self, failed: Status, filters: Sequence[FilterPlugin],
                       state: CycleState, pod: Pod, info: NodeInfo) -> Status:
        """The failure run_filter would report: a left-out plugin ahead of the table's
        failing one in the profile's order fails first, if it fails."""
        order = self._filter_order
        limit = order.get(failed.plugin, len(order))
        earlier = [p for p in filters if order[p.name] < limit]
        status = run_filters(earlier, state, pod, info) if earlier else SUCCESS
        return failed if status is SUCCESS else status

    def _partial_scores(self, table: NodeTable, state: CycleState, pod: Pod,
                        feasible: Sequence[NodeInfo]) -> dict[str, int]:
        """What run_score gives: the table's plain plugins as it keeps them, its rescaling
        ones normalized over ``feasible``, the plugins it leaves out run here."""
        totals = self.framework.run_score(state, pod, feasible, only=table.leave_out)
        for name in totals:
            totals[name] += table.base[name]
        for index, (plugin, weight) in enumerate(table.normalized):
            raw = table.raw[index]
            scores = {name: raw[name] for name in totals}
            plugin.normalize_scores(state, pod, scores)
            for name, value in scores.items():
                totals[name] += weight * _clamp(value)
        return totals
