"""A reference to any API object, for events about objects that are not pods."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ObjectRef:
    """An object an event is about (namespace "" for a cluster-scoped one)."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
