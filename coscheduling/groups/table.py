"""Objects of several kinds that back one gang: Volcano's and kube-batch's PodGroups are both
named by the annotation ``scheduling.k8s.io/group-name``. The best-ranked kind present is
the gang's record; the others wait behind it and take over if it is deleted."""

from __future__ import annotations

import threading

from coscheduling.api.podgroups import PodGroup
from coscheduling.groups import api_for


def _rank(record: PodGroup) -> int:
    api = api_for(record)
    return api.rank if api is not None else 0


class KindTable:
    """Shared by the watches of every kind (one thread each), hence its lock."""

    def __init__(self) -> None:
        self._by_key: dict[str, dict[str, PodGroup]] = {}
        self._lock = threading.Lock()

    def put(self, record: PodGroup) -> PodGroup:
        """Store ``record``; return the record the gang now uses."""
        with self._lock:
            kinds = self._by_key.setdefault(record.key, {})
            kinds[record.api_version] = record
            return min(kinds.values(), key=_rank)

    def remove(self, record: PodGroup) -> PodGroup | None:
        """Forget ``record``; return the record the gang now uses (None: no object left)."""
        with self._lock:
            kinds = self._by_key.get(record.key, {})
            kinds.pop(record.api_version, None)
            if not kinds:
                self._by_key.pop(record.key, None)
                return None
            return min(kinds.values(), key=_rank)

    def used(self, key: str) -> PodGroup | None:
        """The record the gang uses now (None: no object)."""
        with self._lock:
            kinds = self._by_key.get(key)
            return min(kinds.values(), key=_rank) if kinds else None

    def shadowed(self, record: PodGroup) -> list[PodGroup]:
        """The other kinds' objects under ``record``'s gang key."""
        with self._lock:
            kinds = self._by_key.get(record.key, {})
            return [r for v, r in kinds.items() if v != record.api_version]
