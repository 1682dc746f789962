"""Data plugins share within one scheduling cycle of one pod."""

from __future__ import annotations

from typing import Any


class CycleState:
    """A per-cycle scratch space, keyed by plugin-chosen names.

    PreFilter computes once what Filter and Score need for every node, and leaves it here.
    """

    __slots__ = ("_data", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def read(self, key: str) -> Any:
        return self._data.get(key)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def clone(self) -> CycleState:
        other = CycleState()
        other._data = dict(self._data)
        other.skip_filter = set(self.skip_filter)
        other.skip_score = set(self.skip_score)
        return other
