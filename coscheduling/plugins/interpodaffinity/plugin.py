"""InterPodAffinity (kube-scheduler semantics): Filter on required terms, Score on the rest.

Filter, for a candidate node and its topology domains:

* every required affinity term of the pod must find, in the node's domain of the term's
  topology key, an existing pod that matches *all* its required affinity terms; a node
  lacking a term's topology key fails. When no pod anywhere matches and the pod matches its
  own terms, it is the first of its kind and passes;
* no existing pod matching a required anti-affinity term of the pod may be in the node's
  domain of that term;
* no existing pod whose required anti-affinity term matches the pod may be in the domain of
  that term (symmetry).

Score sums, per topology domain: the pod's preferred affinity weights for each matching
existing pod, minus its preferred anti-affinity weights; and for each existing pod whose
terms match the pod, its preferred affinity weight, ``hardPodAffinityWeight`` per required
affinity term, minus its preferred anti-affinity weight. Scores are rescaled min..max onto
0..100.

"Existing" pods are the ones bound, assumed (waiting at Permit included) and *claimed* by
a gang on each node, so a gang's admission, which claims member after member, keeps its
members' constraints on each other.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.podaffinity import bears_on
from coscheduling.config.errors import as_bool, as_int, reject_unknown
from coscheduling.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from coscheduling.framework.status import SKIP, SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.podaffinity import AffinityTerm, PodAffinity
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle, SchedulerCache
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "InterPodAffinity"
STATE_KEY = "PreFilter" + NAME
REASON_AFFINITY = "node(s) didn't match pod affinity rules"
REASON_ANTI_AFFINITY = "node(s) didn't match pod anti-affinity rules"
REASON_EXISTING_ANTI_AFFINITY = "node(s) didn't satisfy existing pods anti-affinity rules"

_NO_LABELS: dict[str, str] = {}

Pair = tuple[str, str]
"""(topology key, value)."""


def present_pods(node: NodeInfo, excluding: str) -> Iterator[Pod]:
    """Pods bound, assumed or claimed on ``node``, but not ``excluding`` itself."""
    for holder in (node.pods, node.claims):
        for key, pod in holder.items():
            if key != excluding:
                yield pod


def _matches_all(terms: tuple[AffinityTerm, ...], pod: Pod,
                 namespace_labels: Mapping[str, str]) -> bool:
    if not terms:
        return False
    for term in terms:  # noqa: SIM110 - no generator on a per-pod path
        if not term.matches(pod.namespace, pod.labels, namespace_labels):
            return False
    return True


def _add(counts: dict[Pair, int], labels: Mapping[str, str], key: str, value: int) -> None:
    domain = labels.get(key)
    if domain is not None:
        pair = (key, domain)
        counts[pair] = counts.get(pair, 0) + value


class _FilterState:
    __slots__ = ("affinity", "anti", "existing_anti", "first_of_kind")

    def __init__(self) -> None:
        self.affinity: dict[Pair, int] = {}
        self.anti: dict[Pair, int] = {}
        self.existing_anti: dict[Pair, int] = {}
        self.first_of_kind = False


class _ScoreState:
    __slots__ = ("domains",)

    def __init__(self, domains: dict[Pair, int]) -> None:
        self.domains = domains


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """``hardPodAffinityWeight`` (0..100, default 1) and
    ``ignorePreferredTermsOfExistingPods`` (default false), as kube-scheduler's args."""
    reject_unknown(raw, {"hardPodAffinityWeight", "ignorePreferredTermsOfExistingPods"}, path)
    return {
        "hardPodAffinityWeight": as_int(raw.get("hardPodAffinityWeight", 1),
                                        f"{path}.hardPodAffinityWeight",
                                        minimum=0, maximum=100),
        "ignorePreferredTermsOfExistingPods": as_bool(
            raw.get("ignorePreferredTermsOfExistingPods", False),
            f"{path}.ignorePreferredTermsOfExistingPods"),
    }


class InterPodAffinity(PreFilterPlugin, FilterPlugin, ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        checked = validate_args(args or {}, "args")
        self.hard_weight: int = checked["hardPodAffinityWeight"]
        self.ignore_existing_preferred: bool = checked["ignorePreferredTermsOfExistingPods"]
        if handle is None:
            raise ValueError(f"{NAME} needs the scheduler handle (it reads the cache)")
        self.handle = handle
        # Pods seen with required affinity terms, by key: a newly placed pod that matches
        # them all may let them in (see waiters_matching).
        self.waiters: dict[str, tuple[AffinityTerm, ...]] = {}

    @property
    def _cache(self) -> SchedulerCache:
        return self.handle.cache

    def _namespace_labels(self, namespace: str) -> Mapping[str, str]:
        return self._cache.namespace_labels.get(namespace, _NO_LABELS)

    def _others_bear_on(self, pod: Pod, *, required_anti_only: bool) -> bool:
        cache = self._cache
        if not cache.has_placed_affinities():
            return False
        return bears_on((affinity for affinity, _ in cache.placed_affinities()), pod.namespace,
                        pod.labels, self._namespace_labels(pod.namespace),
                        required_anti_only=required_anti_only)

    def sign(self, pod: Pod) -> Hashable | None:
        """Constant for a pod without pod affinity that no placed pod's terms match (its
        results are then 'passes everywhere, scores 0'); None otherwise, since they depend
        on where other pods are."""
        if pod.pod_affinity is None and not self._cache.has_placed_affinities():
            return ()  # the common case, first: no pod anywhere has pod affinity
        if pod.pod_affinity is not None or self._others_bear_on(pod, required_anti_only=False):
            return None
        return ()

    # -- PreFilter -------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """Count matching pods per topology domain once, for Filter and Score on every node."""
        affinity = pod.pod_affinity
        state.write(STATE_KEY + "Ran", True)
        if affinity is None and not self._cache.has_placed_affinities():
            state.skip_score.add(NAME)  # the common case, first: nothing to check or score
            return SKIP
        has_required = affinity is not None and bool(affinity.required or affinity.required_anti)
        if affinity is not None and affinity.required:
            self.waiters[pod.key] = affinity.required
        existing_anti = self._others_bear_on(pod, required_anti_only=True)
        scores = self._score_domains(pod)
        if scores:
            state.write(STATE_KEY + "Score", _ScoreState(scores))
        else:
            state.skip_score.add(NAME)
        if not has_required and not existing_anti:
            return SKIP
        filter_state = _FilterState()
        own_labels = self._namespace_labels(pod.namespace)
        if existing_anti:
            self._count_existing_anti(filter_state, pod, own_labels)
        if has_required:
            assert affinity is not None
            self._count_incoming(filter_state, affinity, pod.key)
        if affinity is not None and affinity.required and not filter_state.affinity:
            filter_state.first_of_kind = _matches_all(affinity.required, pod, own_labels)
        state.write(STATE_KEY, filter_state)
        return SUCCESS

    def _count_existing_anti(self, state: _FilterState, pod: Pod,
                             own_labels: Mapping[str, str]) -> None:
        """Domains holding a pod whose required anti-affinity term matches ``pod``."""
        for affinity, holders in self._cache.placed_affinities():
            for term in affinity.required_anti:
                if term.matches(pod.namespace, pod.labels, own_labels):
                    for other, info in holders:
                        if info.node is not None and other.key != pod.key:
                            _add(state.existing_anti, info.node.labels, term.topology_key, 1)

    def _count_incoming(self, state: _FilterState, affinity: PodAffinity,
                        excluding: str) -> None:
        """Per domain, the pods matching all the pod's required affinity terms (counted for
        each term's key) and the pods matching each required anti-affinity term."""
        namespaces = self._cache.namespace_labels
        required = affinity.required
        if required:
            for other, labels in self._present(required[0], excluding):
                if _matches_all(required, other, namespaces.get(other.namespace, _NO_LABELS)):
                    for term in required:
                        _add(state.affinity, labels, term.topology_key, 1)
        for term in affinity.required_anti:
            for other, labels in self._present(term, excluding):
                if term.matches(other.namespace, other.labels,
                                namespaces.get(other.namespace, _NO_LABELS)):
                    _add(state.anti, labels, term.topology_key, 1)

    def _present(self, term: AffinityTerm, excluding: str
                 ) -> Iterator[tuple[Pod, Mapping[str, str]]]:
        """Pods on nodes that may match ``term`` (found by its selector's labels when it
        names any), but not ``excluding``, with their node's labels."""
        if term.selector is None:
            return  # a missing selector matches no pod
        found = self._cache.labelled(term.selector)
        if found is None:
            for info in self._cache.nodes():
                if info.node is not None:
                    labels = info.node.labels
                    for other in present_pods(info, excluding):
                        yield other, labels
            return
        for other, info in found:
            node = info.node
            if node is not None and other.key != excluding:
                yield other, node.labels

    def _score_domains(self, pod: Pod) -> dict[Pair, int]:
        """Topology domain -> summed weight, from the pod's preferred terms and the existing
        pods' terms that match the pod; empty when nothing scores."""
        affinity = pod.pod_affinity
        own = affinity is not None and bool(affinity.preferred or affinity.preferred_anti)
        theirs = self._others_bear_on(pod, required_anti_only=False)
        if not own and not theirs:
            return {}
        domains: dict[Pair, int] = {}
        if own:
            assert affinity is not None
            namespaces = self._cache.namespace_labels
            for terms, sign in ((affinity.preferred, 1), (affinity.preferred_anti, -1)):
                for term in terms:
                    for other, labels in self._present(term, pod.key):
                        if term.matches(other.namespace, other.labels,
                                        namespaces.get(other.namespace, _NO_LABELS)):
                            _add(domains, labels, term.topology_key, sign * term.weight)
        if theirs:
            self._score_theirs(domains, pod)
        return {pair: weight for pair, weight in domains.items() if weight}

    def _weights_toward(self, affinity: PodAffinity, pod: Pod,
                        own_labels: Mapping[str, str]) -> list[tuple[str, int]]:
        """(topology key, weight) of each term of a placed pod's ``affinity`` that matches
        ``pod``: ``hardPodAffinityWeight`` per required affinity term, the preferred
        weights (unless ignored), minus the preferred anti-affinity weights."""
        weights = []
        if self.hard_weight > 0:
            weights += [(t.topology_key, self.hard_weight) for t in affinity.required
                        if t.matches(pod.namespace, pod.labels, own_labels)]
        if not self.ignore_existing_preferred:
            weights += [(t.topology_key, t.weight) for t in affinity.preferred
                        if t.matches(pod.namespace, pod.labels, own_labels)]
            weights += [(t.topology_key, -t.weight) for t in affinity.preferred_anti
                        if t.matches(pod.namespace, pod.labels, own_labels)]
        return weights

    def _score_theirs(self, domains: dict[Pair, int], pod: Pod) -> None:
        """Add the weights of placed pods' terms matching ``pod``, per domain: each
        distinct affinity is matched once, then counted for every pod holding it."""
        own_labels = self._namespace_labels(pod.namespace)
        for affinity, holders in self._cache.placed_affinities():
            weights = self._weights_toward(affinity, pod, own_labels)
            if not weights:
                continue
            for other, info in holders:
                if info.node is None or other.key == pod.key:
                    continue
                for key, weight in weights:
                    _add(domains, info.node.labels, key, weight)

    def waiters_matching(self, placed: Pod) -> list[str]:
        """Pending pods whose required affinity ``placed`` (just bound) matches, so they can
        be retried now rather than after the unschedulable timeout; forgets pods that are
        no longer pending. Under the cache lock."""
        if not self.waiters:
            return []
        cache = self._cache
        ns_labels = self._namespace_labels(placed.namespace)
        woken = []
        for key, terms in list(self.waiters.items()):
            current = cache.pod(key)
            if current is None or current.node_name or current.deleting:
                del self.waiters[key]
            elif key != placed.key and _matches_all(terms, placed, ns_labels):
                woken.append(key)
        return woken

    # -- Filter ----------------------------------------------------------------------------
    def _prepared(self, state: CycleState, pod: Pod) -> _FilterState | None:
        """PreFilter's counts; computed here if PreFilter did not run (a profile that
        enables Filter alone), so no constraint is ever skipped for want of them."""
        if state.read(STATE_KEY + "Ran") is None:
            self.pre_filter(state, pod)
        prepared: _FilterState | None = state.read(STATE_KEY)
        return prepared

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        info = node.node
        if info is None:
            return Status.unresolvable("node not found", plugin=NAME)
        prepared = self._prepared(state, pod)
        if prepared is None:
            return SUCCESS  # nothing to check: no required term either way
        labels = info.labels
        affinity = pod.pod_affinity
        if affinity is not None:
            if not self._affinity_holds(prepared, affinity.required, labels):
                return Status.unresolvable(REASON_AFFINITY, plugin=NAME)
            for term in affinity.required_anti:
                domain = labels.get(term.topology_key)
                if domain is not None and prepared.anti.get((term.topology_key, domain), 0) > 0:
                    return Status.unschedulable(REASON_ANTI_AFFINITY, plugin=NAME)
        if prepared.existing_anti:
            for pair in labels.items():
                if prepared.existing_anti.get(pair, 0) > 0:
                    return Status.unschedulable(REASON_EXISTING_ANTI_AFFINITY, plugin=NAME)
        return SUCCESS

    @staticmethod
    def _affinity_holds(prepared: _FilterState, required: tuple[AffinityTerm, ...],
                        labels: Mapping[str, str]) -> bool:
        found = True
        for term in required:
            domain = labels.get(term.topology_key)
            if domain is None:
                return False  # the node must carry every term's topology key
            if prepared.affinity.get((term.topology_key, domain), 0) <= 0:
                found = False
        return found or prepared.first_of_kind

    # -- Score -----------------------------------------------------------------------------
    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        self._prepared(state, pod)
        prepared: _ScoreState | None = state.read(STATE_KEY + "Score")
        info = node.node
        if prepared is None or info is None:
            return 0
        total = 0
        for pair in info.labels.items():
            total += prepared.domains.get(pair, 0)
        return total

    def normalize_scores(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        """Rescale min..max onto 0..100 (all 0 when every node scores the same)."""
        if not scores or state.read(STATE_KEY + "Score") is None:
            return
        low, high = min(scores.values()), max(scores.values())
        spread = high - low
        for name, value in scores.items():
            scores[name] = int(MAX_NODE_SCORE * (value - low) / spread) if spread > 0 else 0
