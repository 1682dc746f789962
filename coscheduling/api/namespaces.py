"""Namespace records: their labels are what pod affinity's ``namespaceSelector`` matches."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Namespace:
    name: str
    labels: dict[str, str] = field(default_factory=dict)


def parse_namespace(obj: dict[str, Any]) -> Namespace:
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return Namespace(str(meta.get("name") or ""),
                     {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict)
                     else {})
