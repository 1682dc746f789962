"""PodDisruptionBudgets, as far as preemption reads them: which evictions would break one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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


def violations(budgets: Iterable[Budget], pods: Sequence[Pod]) -> set[str]:
    """Keys of ``pods`` whose eviction, counted in order, goes beyond a budget's
    disruptionsAllowed."""
    broken: set[str] = set()
    for budget in budgets:
        left = budget.disruptions_allowed
        for pod in pods:
            if budget.covers(pod):
                left -= 1
                if left < 0:
                    broken.add(pod.key)
    return broken
