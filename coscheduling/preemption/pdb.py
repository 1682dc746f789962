"""PodDisruptionBudgets, as far as preemption reads them: which evictions would break one."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coscheduling.api.budgets import Budget
    from coscheduling.api.pods import Pod


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
