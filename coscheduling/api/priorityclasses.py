"""PriorityClass records: a PodGroup's spec.priorityClassName is a gang's priority."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class PriorityClass:
    name: str
    value: int


def parse_priority_class(obj: dict[str, Any]) -> PriorityClass:
    value = obj.get("value")
    return PriorityClass(str((obj.get("metadata") or {}).get("name") or ""),
                         value if isinstance(value, int) and not isinstance(value, bool) else 0)
