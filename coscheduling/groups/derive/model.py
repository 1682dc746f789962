"""What every kind of workload that a group is derived from provides."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from coscheduling.groups.derive.overrides import opted_in, read_overrides
from coscheduling.groups.derive.workload import Json, Workload


@dataclass(frozen=True, slots=True)
class DerivedGroup:
    """One PodGroup a workload's controller means: its name and spec (our PodGroup's
    fields), or the errors that keep it from being made (each naming its field)."""

    name: str
    spec: Json = field(default_factory=dict)
    errors: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Member:
    """Which derived group a pod is in, and its role (the subgroup), as the walk found."""

    group: str
    role: str = ""


@dataclass(frozen=True, slots=True)
class WorkloadKind:
    """A kind of top workload: how its groups are derived and which of them a pod of it
    joins (from the labels its controller puts on the pod)."""

    api_version: str
    kind: str
    plural: str
    groups: Callable[[Workload], list[DerivedGroup]]
    member_of: Callable[[Workload, dict[str, str]], Member | None]
    templates: Callable[[Workload], list[Json]]  # its pod templates
    # A gang only when annotated derive-group "true" (else walked through, as a
    # LeaderWorkerSet's StatefulSet is).
    opt_in: bool = False

    def gang(self, workload: Workload) -> bool:
        """Whether this object of the kind is a gang (opted in, when it must be)."""
        return not self.opt_in or opted_in(workload.annotations)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    @property
    def version(self) -> str:
        return self.api_version.rpartition("/")[2]

    @property
    def title(self) -> str:
        return f"{self.kind} ({self.api_version})"


def shaped(workload: Workload, name: str, min_member: int,
           extra: Json | None = None) -> DerivedGroup:
    """A derived group of ``min_member`` members with the workload's overrides applied
    (its min-member annotation replaces the count), or its errors."""
    overrides = read_overrides(workload.annotations)
    errors = tuple(f"{error} of {workload.describe()}" for error in overrides.errors)
    minimum = overrides.min_member if overrides.min_member is not None else min_member
    spec: Json = {"minMember": max(1, minimum), **(extra or {}), **overrides.spec}
    return DerivedGroup(name, {} if errors else spec, errors)


def count(raw: Any, default: int) -> int:
    """A replica count as a controller reads it (absent: its default; never negative)."""
    if raw is None:
        return default
    if isinstance(raw, bool) or not isinstance(raw, int):
        return default
    return max(0, raw)


def mapping(value: object) -> Json:
    return value if isinstance(value, dict) else {}
