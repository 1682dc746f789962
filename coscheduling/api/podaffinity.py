"""Pod (anti-)affinity terms and topology spread constraints, parsed once per pod record.

Selectors keep the core API's meaning: a missing ``labelSelector`` matches no pod, an empty
one matches every pod. ``matchLabelKeys`` / ``mismatchLabelKeys`` are folded into the
selector here (``key In (own value)`` / ``key NotIn (own value)``), as the API server does
on admission; folding twice changes nothing, so pods that did not come through it (gRPC
callers) get the same meaning.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.selectors import Requirement

_LABEL_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist"})
DO_NOT_SCHEDULE = "DoNotSchedule"
SCHEDULE_ANYWAY = "ScheduleAnyway"
HONOR = "Honor"
IGNORE = "Ignore"
HOSTNAME = "kubernetes.io/hostname"


@dataclass(frozen=True, slots=True)
class LabelSelector:
    """``matchLabels`` and ``matchExpressions`` ANDed together; empty matches everything."""

    requirements: tuple[Requirement, ...] = ()
    # (key, value) pairs when every requirement is ``key In (one value)`` (matchLabels, the
    # usual shape): matched with one dict lookup each, on paths that visit every pod.
    pairs: tuple[tuple[str, str], ...] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if all(r.operator == "In" and len(r.values) == 1 for r in self.requirements):
            object.__setattr__(self, "pairs",
                               tuple((r.key, r.values[0]) for r in self.requirements))

    def matches(self, labels: Mapping[str, str]) -> bool:
        pairs = self.pairs
        if pairs is not None:
            for key, value in pairs:  # noqa: SIM110 - no generator on hot paths
                if labels.get(key) != value:
                    return False
            return True
        for requirement in self.requirements:  # noqa: SIM110 - no generator on hot paths
            if not requirement.matches(labels):
                return False
        return True

    def merged(self, extra: tuple[Requirement, ...]) -> LabelSelector:
        return LabelSelector(self.requirements + extra) if extra else self


EVERYTHING = LabelSelector()


def _mapping(raw: object, field: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ValueError(f"{field}: must be an object, got {type(raw).__name__}")
    return raw


def _list(raw: object, field: str) -> list[Any]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise ValueError(f"{field}: must be a list, got {type(raw).__name__}")
    return raw


def parse_label_selector(raw: object, field: str) -> LabelSelector | None:
    """None for a missing selector (it matches nothing), else the selector."""
    if raw is None:
        return None
    selector = _mapping(raw, field)
    requirements = [Requirement(str(k), "In", (str(v),))
                    for k, v in _mapping(selector.get("matchLabels"), field).items()]
    for index, expr in enumerate(_list(selector.get("matchExpressions"), field)):
        where = f"{field}.matchExpressions[{index}]"
        expr = _mapping(expr, where)
        operator = expr.get("operator", "")
        if operator not in _LABEL_OPERATORS:
            raise ValueError(f"{where}.operator: must be one of In, NotIn, Exists, "
                             f"DoesNotExist, got {operator!r}")
        values = _list(expr.get("values"), f"{where}.values")
        if operator in ("In", "NotIn") and not values:
            raise ValueError(f"{where}.values: must not be empty with operator {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise ValueError(f"{where}.values: must be empty with operator {operator}")
        requirements.append(Requirement(str(expr.get("key", "")), operator,
                                        tuple(str(v) for v in values)))
    return LabelSelector(tuple(requirements))


def _label_keys(raw: object, field: str, labels: Mapping[str, str],
                operator: str) -> tuple[Requirement, ...]:
    """Requirements for ``matchLabelKeys`` (In) or ``mismatchLabelKeys`` (NotIn): keys the
    pod does not carry are ignored."""
    return tuple(Requirement(str(key), operator, (labels[str(key)],))
                 for key in _list(raw, field) if str(key) in labels)


@dataclass(frozen=True, slots=True)
class AffinityTerm:
    """One pod affinity term with its namespaces resolved against the pod that owns it.

    A pod is in the term's scope when its namespace is listed or (with a
    ``namespaceSelector``) its namespace's labels match; an empty selector means every
    namespace, and neither field means the owner's own namespace.
    """

    selector: LabelSelector | None
    namespaces: frozenset[str]
    namespace_selector: LabelSelector | None
    topology_key: str
    weight: int = 0

    def matches(self, namespace: str, labels: Mapping[str, str],
                namespace_labels: Mapping[str, str]) -> bool:
        """Whether a pod in ``namespace`` with ``labels`` matches (``namespace_labels``:
        the labels of that pod's namespace)."""
        if self.selector is None:
            return False
        if namespace not in self.namespaces and (
                self.namespace_selector is None
                or not self.namespace_selector.matches(namespace_labels)):
            return False
        return self.selector.matches(labels)


@dataclass(frozen=True, slots=True)
class PodAffinity:
    """A pod's podAffinity and podAntiAffinity; ``preferred*`` terms carry their weight."""

    required: tuple[AffinityTerm, ...] = ()
    required_anti: tuple[AffinityTerm, ...] = ()
    preferred: tuple[AffinityTerm, ...] = ()
    preferred_anti: tuple[AffinityTerm, ...] = ()

    def toward_others(self) -> tuple[AffinityTerm, ...]:
        """The terms by which this pod, once placed, bears on pods placed after it."""
        return self.required + self.required_anti + self.preferred + self.preferred_anti


def _term(raw: object, field: str, namespace: str, labels: Mapping[str, str],
          weight: int = 0) -> AffinityTerm:
    term = _mapping(raw, field)
    topology_key = term.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise ValueError(f"{field}.topologyKey: must be a non-empty string")
    selector = parse_label_selector(term.get("labelSelector"), f"{field}.labelSelector")
    extra = (_label_keys(term.get("matchLabelKeys"), f"{field}.matchLabelKeys", labels, "In")
             + _label_keys(term.get("mismatchLabelKeys"), f"{field}.mismatchLabelKeys",
                           labels, "NotIn"))
    if selector is not None:
        selector = selector.merged(extra)
    namespaces = frozenset(str(n) for n in _list(term.get("namespaces"),
                                                   f"{field}.namespaces"))
    namespace_selector = parse_label_selector(term.get("namespaceSelector"),
                                              f"{field}.namespaceSelector")
    if not namespaces and namespace_selector is None:
        namespaces = frozenset((namespace,))
    return AffinityTerm(selector, namespaces, namespace_selector, topology_key, weight)


def _terms(section: dict[str, Any], field: str, namespace: str,
           labels: Mapping[str, str]) -> tuple[tuple[AffinityTerm, ...], tuple[AffinityTerm, ...]]:
    key = "requiredDuringSchedulingIgnoredDuringExecution"
    required = tuple(_term(raw, f"{field}.{key}[{i}]", namespace, labels)
                     for i, raw in enumerate(_list(section.get(key), f"{field}.{key}")))
    key = "preferredDuringSchedulingIgnoredDuringExecution"
    preferred = []
    for i, raw in enumerate(_list(section.get(key), f"{field}.{key}")):
        where = f"{field}.{key}[{i}]"
        entry = _mapping(raw, where)
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= 100:
            raise ValueError(f"{where}.weight: must be an integer in 1..100, got {weight!r}")
        preferred.append(_term(entry.get("podAffinityTerm"), f"{where}.podAffinityTerm",
                               namespace, labels, weight))
    return required, tuple(preferred)


def parse_pod_affinity(affinity: object, namespace: str,
                       labels: Mapping[str, str]) -> PodAffinity | None:
    """The pod (anti-)affinity of a pod spec's ``affinity``; None when it has no term."""
    if not isinstance(affinity, dict):
        return None
    required, preferred = _terms(_mapping(affinity.get("podAffinity"), "podAffinity"),
                                 "podAffinity", namespace, labels)
    required_anti, preferred_anti = _terms(
        _mapping(affinity.get("podAntiAffinity"), "podAntiAffinity"), "podAntiAffinity",
        namespace, labels)
    parsed = PodAffinity(required, required_anti, preferred, preferred_anti)
    return parsed if parsed.toward_others() else None


@dataclass(frozen=True, slots=True)
class SpreadConstraint:
    """One topology spread constraint, with the API's defaults applied.

    ``owner`` (set only for cluster default constraints) replaces the selector: the pods
    counted are those with the same controlling owner.
    """

    max_skew: int
    topology_key: str
    hard: bool
    selector: LabelSelector | None
    min_domains: int = 1
    honor_node_affinity: bool = True
    honor_taints: bool = False
    owner: str = ""

    def counts(self, namespace: str, pod_namespace: str, labels: Mapping[str, str],
               owner: str) -> bool:
        """Whether a pod (namespace, labels, controller) counts toward this constraint of a
        pod in ``pod_namespace``."""
        if namespace != pod_namespace:
            return False
        if self.owner:
            return owner == self.owner
        return self.selector is not None and self.selector.matches(labels)


def _policy(raw: object, field: str, default: str) -> bool:
    value = default if raw is None else raw
    if value not in (HONOR, IGNORE):
        raise ValueError(f"{field}: must be Honor or Ignore, got {raw!r}")
    return value == HONOR


def parse_spread_constraint(raw: object, field: str,
                            labels: Mapping[str, str]) -> SpreadConstraint:
    entry = _mapping(raw, field)
    max_skew = entry.get("maxSkew")
    if isinstance(max_skew, bool) or not isinstance(max_skew, int) or max_skew < 1:
        raise ValueError(f"{field}.maxSkew: must be an integer >= 1, got {max_skew!r}")
    topology_key = entry.get("topologyKey")
    if not isinstance(topology_key, str) or not topology_key:
        raise ValueError(f"{field}.topologyKey: must be a non-empty string")
    when = entry.get("whenUnsatisfiable")
    if when not in (DO_NOT_SCHEDULE, SCHEDULE_ANYWAY):
        raise ValueError(f"{field}.whenUnsatisfiable: must be DoNotSchedule or "
                         f"ScheduleAnyway, got {when!r}")
    min_domains = entry.get("minDomains")
    if min_domains is not None:
        if isinstance(min_domains, bool) or not isinstance(min_domains, int) or min_domains < 1:
            raise ValueError(f"{field}.minDomains: must be an integer >= 1, got {min_domains!r}")
        if when != DO_NOT_SCHEDULE:
            raise ValueError(f"{field}.minDomains: only allowed with DoNotSchedule")
    selector = parse_label_selector(entry.get("labelSelector"), f"{field}.labelSelector")
    if selector is not None:
        selector = selector.merged(_label_keys(entry.get("matchLabelKeys"),
                                               f"{field}.matchLabelKeys", labels, "In"))
    return SpreadConstraint(
        max_skew=max_skew, topology_key=topology_key, hard=when == DO_NOT_SCHEDULE,
        selector=selector, min_domains=min_domains or 1,
        honor_node_affinity=_policy(entry.get("nodeAffinityPolicy"),
                                    f"{field}.nodeAffinityPolicy", HONOR),
        honor_taints=_policy(entry.get("nodeTaintsPolicy"), f"{field}.nodeTaintsPolicy",
                             IGNORE),
    )


def parse_spread_constraints(raw: object, labels: Mapping[str, str]
                             ) -> tuple[SpreadConstraint, ...]:
    """``spec.topologySpreadConstraints``."""
    return tuple(parse_spread_constraint(entry, f"[{i}]", labels)
                 for i, entry in enumerate(_list(raw, "topologySpreadConstraints")))


def bears_on(affinities: Iterable[PodAffinity], namespace: str, labels: Mapping[str, str],
             namespace_labels: Mapping[str, str], *, required_anti_only: bool = False) -> bool:
    """Whether one of the (distinct) ``affinities`` of placed pods has a term matching a pod
    in ``namespace`` with ``labels``: any term (they all score), or only required
    anti-affinity (Filter). When none does, no other pod's affinity bears on where that pod
    goes (the common case, checked in O(distinct affinities) instead of a pass over the
    nodes)."""
    for affinity in affinities:
        terms = affinity.required_anti if required_anti_only else affinity.toward_others()
        for term in terms:
            if term.matches(namespace, labels, namespace_labels):
                return True
    return False
