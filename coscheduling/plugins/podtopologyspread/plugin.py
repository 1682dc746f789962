"""PodTopologySpread (kube-scheduler semantics).

Filter (``DoNotSchedule`` constraints): a node lacking a constraint's topology key is
refused. Otherwise, with ``count(d)`` the pods in domain ``d`` that match the constraint's
selector in the pod's namespace (not terminating; bound, assumed or claimed), counted over
the nodes that carry every constraint key and pass the constraint's node inclusion policies
(``nodeAffinityPolicy`` Honor by default: the pod's node selector and required node
affinity; ``nodeTaintsPolicy`` Ignore by default, Honor: untolerated NoSchedule/NoExecute
taints exclude a node), the node's domain must keep
``count(d) + (1 if the pod matches its own selector) - min over domains <= maxSkew``, where
the minimum is 0 while fewer than ``minDomains`` domains exist.

Score (``ScheduleAnyway`` constraints, or the configured defaults): per feasible node, the
sum over constraints of ``count(domain) * log(domains + 2) + maxSkew - 1`` (hostname
domains count the node's own pods), rounded, then mapped so the smallest sum scores 100;
feasible nodes lacking a key score 0.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from coscheduling.api.podaffinity import HOSTNAME
from coscheduling.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from coscheduling.framework.status import SKIP, SUCCESS, Status
from coscheduling.plugins.nodeaffinity import matches as node_affinity_matches
from coscheduling.plugins.podtopologyspread.args import OWNER_KINDS, SpreadArgs, parse_args
from coscheduling.plugins.tainttoleration.plugin import untolerated

if TYPE_CHECKING:
    from coscheduling.api.podaffinity import SpreadConstraint
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle, SchedulerCache
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "PodTopologySpread"
FILTER_KEY = "PreFilter" + NAME
SCORE_KEY = "PreScore" + NAME
RAN_KEY = NAME + "Ran"
REASON_MISSING_LABEL = (
    "node(s) didn't match pod topology spread constraints (missing required label)")
REASON_SKEW = "node(s) didn't match pod topology spread constraints"


def _has_keys(labels: Mapping[str, str], constraints: tuple[SpreadConstraint, ...]) -> bool:
    for constraint in constraints:  # noqa: SIM110 - no generator on a per-node path
        if constraint.topology_key not in labels:
            return False
    return True


def _included(constraint: SpreadConstraint, pod: Pod, info: NodeInfo) -> bool:
    """The constraint's node inclusion policies: whether ``info``'s pods are counted."""
    node = info.node
    assert node is not None
    if constraint.honor_node_affinity and not node_affinity_matches(pod, node.labels, info.name):
        return False
    return not (constraint.honor_taints and untolerated(node.taints, pod.tolerations) is not None)


def _count(constraint: SpreadConstraint, pod: Pod, info: NodeInfo) -> int:
    """Pods on ``info`` the constraint counts (present_pods, inlined: every pod passes)."""
    count = 0
    excluding, namespace = pod.key, pod.namespace
    counts = constraint.counts
    for holder in (info.pods, info.claims):
        for key, other in holder.items():
            if key != excluding and not other.deleting and counts(
                    other.namespace, namespace, other.labels, other.owner):
                count += 1
    return count


def _per_node(constraint: SpreadConstraint, pod: Pod,
              cache: SchedulerCache) -> dict[str, int] | None:
    """Node -> the pods the constraint counts there, found by its selector's labels; None
    when the selector names none (``_count`` then visits each node's pods)."""
    if constraint.owner or constraint.selector is None:
        return None if constraint.owner else {}
    found = cache.labelled(constraint.selector)
    if found is None:
        return None
    per_node: dict[str, int] = {}
    excluding, namespace, counts = pod.key, pod.namespace, constraint.counts
    for other, info in found:
        if other.key != excluding and not other.deleting and counts(
                other.namespace, namespace, other.labels, other.owner):
            per_node[info.name] = per_node.get(info.name, 0) + 1
    return per_node


def _counted(per_node: dict[str, int] | None, constraint: SpreadConstraint, pod: Pod,
             info: NodeInfo) -> int:
    return _count(constraint, pod, info) if per_node is None else per_node.get(info.name, 0)


def _self_match(constraint: SpreadConstraint, pod: Pod) -> int:
    return 1 if constraint.counts(pod.namespace, pod.namespace, pod.labels, pod.owner) else 0


class _FilterState:
    __slots__ = ("constraints", "counts", "minimums")

    def __init__(self, constraints: tuple[SpreadConstraint, ...]) -> None:
        self.constraints = constraints
        self.counts: list[dict[str, int]] = [{} for _ in constraints]
        self.minimums: list[int] = []


class _ScoreState:
    __slots__ = ("constraints", "counts", "require_all")

    def __init__(self, constraints: tuple[SpreadConstraint, ...], require_all: bool) -> None:
        self.constraints = constraints
        self.require_all = require_all
        self.counts: list[dict[str, int]] = [{} for _ in constraints]


class PodTopologySpread(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        self.args: SpreadArgs = parse_args(args or {}, "args")
        if handle is None:
            raise ValueError(f"{NAME} needs the scheduler handle (it reads the cache)")
        self.handle = handle

    @property
    def _cache(self) -> SchedulerCache:
        return self.handle.cache

    def _constraints(self, pod: Pod) -> tuple[tuple[SpreadConstraint, ...], bool]:
        """The pod's own constraints, else the defaults bound to its controller; and
        whether they are the System defaults (nodes without a zone still count then)."""
        if pod.spread_constraints:
            return pod.spread_constraints, False
        defaults = self.args.defaults
        if not defaults or pod.owner.split("/", 1)[0] not in OWNER_KINDS:
            return (), False
        bound = tuple(replace(c, owner=pod.owner) for c in defaults)
        return bound, self.args.defaulting_type == "System"

    def sign(self, pod: Pod) -> Hashable | None:
        """Constant for a pod without constraints; None otherwise (counts depend on where
        other pods are)."""
        if not pod.spread_constraints and not self.args.defaults:
            return ()
        return None if self._constraints(pod)[0] else ()

    # -- PreFilter -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        state.write(RAN_KEY, True)
        if not pod.spread_constraints and not self.args.defaults:
            state.skip_score.add(NAME)  # the common case, first: nothing to check or score
            return SKIP
        constraints, system = self._constraints(pod)
        soft = tuple(c for c in constraints if not c.hard)
        if soft:
            state.write(SCORE_KEY, self._score_state(pod, soft, require_all=not system))
        else:
            state.skip_score.add(NAME)
        hard = tuple(c for c in constraints if c.hard)
        if not hard:
            return SKIP
        state.write(FILTER_KEY, self._filter_state(pod, hard))
        return SUCCESS

    def _filter_state(self, pod: Pod, hard: tuple[SpreadConstraint, ...]) -> _FilterState:
        prepared = _FilterState(hard)
        cache = self._cache
        found = [_per_node(constraint, pod, cache) for constraint in hard]
        for info in cache.nodes():
            node = info.node
            if node is None or not _has_keys(node.labels, hard):
                continue
            for index, constraint in enumerate(hard):
                if not _included(constraint, pod, info):
                    continue
                counts = prepared.counts[index]
                value = node.labels[constraint.topology_key]
                counts[value] = counts.get(value, 0) + _counted(found[index], constraint,
                                                                pod, info)
        for index, constraint in enumerate(hard):
            counts = prepared.counts[index]
            enough = counts and len(counts) >= constraint.min_domains
            prepared.minimums.append(min(counts.values()) if enough else 0)
        return prepared

    def _score_state(self, pod: Pod, soft: tuple[SpreadConstraint, ...],
                     require_all: bool) -> _ScoreState:
        prepared = _ScoreState(soft, require_all)
        cache = self._cache
        found = [None if c.topology_key == HOSTNAME else _per_node(c, pod, cache) for c in soft]
        for info in cache.nodes():
            node = info.node
            if node is None or (require_all and not _has_keys(node.labels, soft)):
                continue
            for index, constraint in enumerate(soft):
                if constraint.topology_key == HOSTNAME or not _included(constraint, pod, info):
                    continue
                counts = prepared.counts[index]
                value = node.labels.get(constraint.topology_key, "")
                counts[value] = counts.get(value, 0) + _counted(found[index], constraint,
                                                                pod, info)
        return prepared

    def _ran(self, state: CycleState, pod: Pod) -> None:
        """Run PreFilter if the profile did not (Filter or Score enabled alone), so no
        constraint is skipped for want of its counts."""
        if state.read(RAN_KEY) is None:
            self.pre_filter(state, pod)

    # -- Filter ----------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        self._ran(state, pod)
        prepared: _FilterState | None = state.read(FILTER_KEY)
        info = node.node
        if prepared is None:
            return SUCCESS
        if info is None or not _has_keys(info.labels, prepared.constraints):
            return Status.unresolvable(REASON_MISSING_LABEL, plugin=NAME)
        for index, constraint in enumerate(prepared.constraints):
            matched = prepared.counts[index].get(info.labels[constraint.topology_key], 0)
            skew = matched + _self_match(constraint, pod) - prepared.minimums[index]
            if skew > constraint.max_skew:
                return Status.unschedulable(REASON_SKEW, plugin=NAME)
        return SUCCESS

    # -- Score -----------------------------------------------------------------------------
    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        """0: the score needs the whole feasible set (its domain count weighs each
        constraint), so normalize_scores computes it."""
        self._ran(state, pod)
        return 0

    def normalize_scores(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        prepared: _ScoreState | None = state.read(SCORE_KEY)
        if prepared is None or not scores:
            return
        constraints = prepared.constraints
        nodes: list[NodeInfo] = []
        ignored: list[str] = []
        domains: list[set[str]] = [set() for _ in constraints]
        for name in scores:
            info = self._cache.node(name)
            if info is None or info.node is None or (
                    prepared.require_all and not _has_keys(info.node.labels, constraints)):
                ignored.append(name)
                continue
            nodes.append(info)
            for index, constraint in enumerate(constraints):
                if constraint.topology_key != HOSTNAME:
                    domains[index].add(info.node.labels.get(constraint.topology_key, ""))
        weights = [math.log((len(nodes) if c.topology_key == HOSTNAME else len(domains[i])) + 2)
                   for i, c in enumerate(constraints)]
        raw: dict[str, int] = {}
        found = [_per_node(c, pod, self._cache) if c.topology_key == HOSTNAME else None
                 for c in constraints]
        for info in nodes:
            assert info.node is not None
            labels = info.node.labels
            total = 0.0
            for index, constraint in enumerate(constraints):
                value = labels.get(constraint.topology_key)
                if value is None:
                    continue
                if constraint.topology_key == HOSTNAME:
                    count = _counted(found[index], constraint, pod, info)
                else:
                    count = prepared.counts[index].get(value, 0)
                total += count * weights[index] + constraint.max_skew - 1
            raw[info.name] = math.floor(total + 0.5)  # Go's math.Round for x >= 0
        for name in ignored:
            scores[name] = 0
        if not raw:
            return
        low, high = min(raw.values()), max(raw.values())
        for name, summed in raw.items():
            scores[name] = MAX_NODE_SCORE if high == 0 else (
                MAX_NODE_SCORE * (high + low - summed) // high)
