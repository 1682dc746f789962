"""PodGroup records (``batch.scheduler.tencent.com/v1``), validated field by field.

A PodGroup that the scheduler cannot use keeps its record with ``errors`` filled in, so
every member pod can be told exactly which field is wrong instead of waiting silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.quantity import QuantityError, parse_resource_list
from coscheduling.api.times import parse_duration, parse_rfc3339

PLURAL = "podgroups"
KIND = "PodGroup"

PHASE_PENDING = "Pending"
PHASE_PRE_SCHEDULING = "PreScheduling"
PHASE_SCHEDULING = "Scheduling"
PHASE_SCHEDULED = "Scheduled"
PHASE_RUNNING = "Running"
PHASE_FINISHED = "Finished"
PHASE_FAILED = "Failed"
PHASE_UNKNOWN = "Unknown"

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(slots=True, eq=False)
class PodGroup:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    created: float = 0.0
    min_member: int = 1
    min_resources: dict[str, int] = field(default_factory=dict)
    max_schedule_time: float | None = None
    priority_class_name: str = ""
    phase: str = ""
    occupied_by: str = ""
    errors: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def valid(self) -> bool:
        return not self.errors


def parse_podgroup(obj: dict[str, Any]) -> PodGroup:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    status = obj.get("status") or {}
    group = PodGroup(
        namespace=meta.get("namespace", ""),
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        created=parse_rfc3339(meta.get("creationTimestamp")),
        phase=str(status.get("phase") or ""),
        occupied_by=str(status.get("occupiedBy") or ""),
    )
    errors: list[str] = []
    if not isinstance(spec, dict):
        errors.append("spec: required, and must be an object")
        spec = {}
    min_member = spec.get("minMember")
    if isinstance(min_member, bool) or not isinstance(min_member, int):
        errors.append(f"spec.minMember: must be an integer >= 1, got {min_member!r}")
    elif min_member < 1:
        errors.append(f"spec.minMember: must be >= 1, got {min_member}")
    else:
        group.min_member = min_member
    try:
        group.min_resources = parse_resource_list(spec.get("minResources"))
        if any(v < 0 for v in group.min_resources.values()):
            errors.append("spec.minResources: quantities must not be negative")
    except QuantityError as err:
        errors.append(f"spec.minResources: {err}")
    raw_timeout = spec.get("maxScheduleTime")
    if raw_timeout not in (None, ""):
        try:
            if not isinstance(raw_timeout, str):
                raise ValueError(f"must be a duration string such as '30s', got {raw_timeout!r}")
            seconds = parse_duration(raw_timeout)
            if seconds <= 0:
                raise ValueError("must be longer than zero")
            group.max_schedule_time = seconds
        except ValueError as err:
            errors.append(f"spec.maxScheduleTime: {err}")
    priority_class = spec.get("priorityClassName") or ""
    if priority_class and (
        not isinstance(priority_class, str) or not _DNS_SUBDOMAIN.match(priority_class)
    ):
        errors.append(f"spec.priorityClassName: {priority_class!r} is not a valid name")
    else:
        group.priority_class_name = str(priority_class)
    group.errors = tuple(errors)
    return group
