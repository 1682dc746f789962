"""PodDisruptionBudgets (policy/v1), as far as the scheduler reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coscheduling.api.podaffinity import LabelSelector, parse_label_selector

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod


@dataclass(frozen=True, slots=True)
class Budget:
    namespace: str
    name: str
    selector: LabelSelector | None
    """None selects nothing (policy/v1: an empty selector selects every pod, a null none)."""
    disruptions_allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, pod: Pod) -> bool:
        return (pod.namespace == self.namespace and self.selector is not None
                and self.selector.matches(pod.labels))


def parse_budget(obj: dict[str, Any]) -> Budget:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    try:
        selector = parse_label_selector(spec.get("selector"), "spec.selector")
    except ValueError:
        selector = None  # the API server validates it; an unreadable one protects nothing
    allowed = status.get("disruptionsAllowed")
    return Budget(str(meta.get("namespace") or ""), str(meta.get("name") or ""), selector,
                  allowed if isinstance(allowed, int) and not isinstance(allowed, bool) else 0)
