"""Node selector terms, taints and tolerations: the matching rules of the core API."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

_OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})


@dataclass(frozen=True, slots=True)
class Requirement:
    """One ``matchExpressions`` / ``matchFields`` entry."""

    key: str
    operator: str
    values: tuple[str, ...]

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Requirement:
        operator = raw.get("operator", "")
        if operator not in _OPERATORS:
            raise ValueError(f"unknown node selector operator {operator!r}")
        values = tuple(str(v) for v in raw.get("values") or ())
        if operator in ("Gt", "Lt") and (len(values) != 1 or not _is_int(values[0])):
            raise ValueError(f"operator {operator} needs exactly one integer value")
        return cls(str(raw.get("key", "")), operator, values)

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "NotIn":
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        if self.operator == "In":
            return labels[self.key] in self.values
        value = labels[self.key]
        if not _is_int(value):
            return False
        if self.operator == "Gt":
            return int(value) > int(self.values[0])
        return int(value) < int(self.values[0])


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class NodeSelectorTerm:
    """Requirements ANDed together; a pod's terms are ORed."""

    expressions: tuple[Requirement, ...]
    fields: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.expressions and not self.fields:
            return False  # an empty term matches nothing, as in the core API
        if not all(req.matches(labels) for req in self.expressions):
            return False
        return all(req.matches({"metadata.name": node_name}) for req in self.fields)


def _term(raw: dict[str, Any]) -> NodeSelectorTerm:
    return NodeSelectorTerm(
        tuple(Requirement.parse(r) for r in raw.get("matchExpressions") or ()),
        tuple(Requirement.parse(r) for r in raw.get("matchFields") or ()),
    )


def parse_affinity_terms(affinity: object) -> tuple[NodeSelectorTerm, ...]:
    """The required node affinity terms of a pod spec's ``affinity``."""
    if not isinstance(affinity, dict):
        return ()
    node_affinity = affinity.get("nodeAffinity") or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {}
    return tuple(_term(term) for term in required.get("nodeSelectorTerms") or ())


def parse_preferred_terms(affinity: object) -> tuple[tuple[int, NodeSelectorTerm], ...]:
    """(weight, term) of the preferred node affinity terms that can score.

    As in the core API's scoring, a term of weight 0 or with no requirement at all is left
    out: it would add nothing (an empty term matches no node).
    """
    if not isinstance(affinity, dict):
        return ()
    node_affinity = affinity.get("nodeAffinity") or {}
    preferred = []
    for entry in node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ():
        weight = entry.get("weight") or 0
        if isinstance(weight, bool) or not isinstance(weight, int):
            raise ValueError(f"preferred term weight must be an integer, got {weight!r}")
        term = _term(entry.get("preference") or {})
        if weight and (term.expressions or term.fields):
            preferred.append((weight, term))
    return tuple(preferred)


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Taint:
        return cls(str(raw.get("key", "")), str(raw.get("value", "")), str(raw.get("effect", "")))

    def describe(self) -> str:
        return f"{{{self.key}: {self.value}}}" if self.value else f"{{{self.key}}}"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str
    value: str
    effect: str

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Toleration:
        return cls(
            str(raw.get("key", "")),
            str(raw.get("operator") or "Equal"),
            str(raw.get("value", "")),
            str(raw.get("effect", "")),
        )

    def tolerates(self, taint: Taint) -> bool:
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        if self.operator == "Exists":
            return True
        # An empty key with Equal is not valid in the API; treat it as matching nothing.
        return bool(self.key) and self.value == taint.value
