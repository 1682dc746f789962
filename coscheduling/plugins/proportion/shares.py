"""Deserved shares: the cluster divided between queues by max-min weighted fairness.

Per resource, every queue that still wants more gets room in proportion to its weight; a
queue whose want (its request, capped by its capability) is met by less than that drops out
and what it leaves over is divided again between the rest. Pure arithmetic on integer units
(cpu in millicores), so the result is exact and never sums above the capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Demand:
    """What one queue asks for: its allocated plus its pending gangs' needs."""

    weight: int
    request: Mapping[str, int]
    capability: Mapping[str, int] = field(default_factory=dict)

    def want(self, resource: str) -> int:
        asked = max(0, self.request.get(resource, 0))
        cap = self.capability.get(resource)
        return asked if cap is None else min(asked, max(0, cap))


def deserved_shares(capacity: Mapping[str, int],
                    demands: Mapping[str, Demand]) -> dict[str, dict[str, int]]:
    """Each queue's deserved amount of every resource in ``capacity``."""
    shares: dict[str, dict[str, int]] = {name: {} for name in demands}
    for resource, total in capacity.items():
        wants = {name: d.want(resource) for name, d in demands.items()}
        for name, amount in _water_fill(max(0, total), wants, demands).items():
            shares[name][resource] = amount
    return shares


def _water_fill(total: int, wants: Mapping[str, int],
                demands: Mapping[str, Demand]) -> dict[str, int]:
    given = dict.fromkeys(wants, 0)
    active = {name for name, want in wants.items() if want > 0}
    remaining = total
    while active and remaining > 0:
        weight = sum(demands[name].weight for name in active)
        # Queues whose whole want fits within their weighted part of what is left.
        met = {name for name in active
               if wants[name] * weight <= remaining * demands[name].weight}
        if not met:
            for name in active:
                given[name] = remaining * demands[name].weight // weight
            break
        for name in met:
            given[name] = wants[name]
            remaining -= wants[name]
        active -= met
    return given
