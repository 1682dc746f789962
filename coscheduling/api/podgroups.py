"""PodGroup records (``batch.scheduler.tencent.com/v1``), validated field by field.

A PodGroup that the scheduler cannot use keeps its record with ``errors`` filled in, so
every member pod can be told exactly which field is wrong instead of waiting silently.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.quantity import QuantityError, parse_resource_list
from coscheduling.api.runtimes import (
    MAX_RESERVATION_ANNOTATION,
    SCALE_UP_WAIT_ANNOTATION,
    declared_runtime,
    seconds_of,
)
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

TOPOLOGY_REQUIRED = "Required"
TOPOLOGY_PREFERRED = "Preferred"
MAX_TOPOLOGY_KEYS = 8
DEFAULT_REPLACEMENT_HOLD_SECONDS = 30
MAX_REPLACEMENT_HOLD_SECONDS = 3600
# A label key: an optional DNS-subdomain prefix and "/", then a name of at most 63 characters.
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class Topology:
    """``spec.topology``: the whole gang goes into one domain (nodes sharing a value of a
    label key); ``keys`` run from the narrowest (a rack) to the widest (a zone)."""

    mode: str
    keys: tuple[str, ...]

    @property
    def required(self) -> bool:
        return self.mode == TOPOLOGY_REQUIRED


@dataclass(frozen=True, slots=True)
class DeviceConstraint:
    """``spec.deviceConstraints[]``: every device the gang's members are allocated (of
    ``device_classes``, or all when empty) has the same value of ``attribute`` (a fully
    qualified device attribute, ``domain/name``): one NVLink clique, one NUMA domain."""

    attribute: str
    device_classes: tuple[str, ...] = ()

    def applies(self, device_class: str) -> bool:
        return not self.device_classes or device_class in self.device_classes


MAX_DEVICE_CONSTRAINTS = 8
_QUALIFIED_ATTRIBUTE = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/[A-Za-z0-9_]{1,32}$")

MAX_SUBGROUPS = 64
SUBGROUP_LABEL = f"{GROUP_API}/subgroup"
"""The label naming a member's subgroup (its role: ``ps``, ``worker``) in our PodGroups."""


@dataclass(frozen=True, slots=True)
class SubGroup:
    """One subgroup of a gang (a role, or one replica of a job of replicas): a gang of its
    own, placed whole (``min_member`` of it or none) and, with ``topology``, in one domain."""

    name: str
    min_member: int
    topology: Topology | None = None


@dataclass(frozen=True, slots=True)
class SubGroups:
    """How a gang splits into subgroups and how many of them it needs.

    ``listed`` subgroups are named up front (a member names its own: our label, or
    Volcano's ``volcano.sh/task-spec``); with ``label_keys`` instead, every distinct value of
    those member labels is a subgroup shaped like ``template`` (Volcano's subGroupPolicy).
    The gang starts once ``min_groups`` subgroups can each be placed whole, and minMember
    in all; a listed subgroup's ``min_member`` of 0 counts it complete without members."""

    listed: tuple[SubGroup, ...] = ()
    min_groups: int = 0
    label_keys: tuple[str, ...] = ()
    template: SubGroup | None = None

    def name_of(self, labels: dict[str, str], role: str) -> str:
        """The subgroup a member belongs to ("" for none of them)."""
        if self.template is not None:
            values = [labels.get(key, "") for key in self.label_keys]
            return "/".join(values) if all(values) else ""
        return role if any(s.name == role for s in self.listed) else ""

    def get(self, name: str) -> SubGroup | None:
        """The subgroup called ``name`` (a dynamic one takes the template's shape)."""
        if self.template is not None:
            return SubGroup(name, self.template.min_member, self.template.topology) \
                if name else None
        return next((s for s in self.listed if s.name == name), None)


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
    queue: str = "default"  # spec.queue: the Queue whose share the gang is admitted from
    topology: Topology | None = None
    subgroups: SubGroups | None = None  # spec.subGroups/minGroups: a gang of gangs
    device_constraints: tuple[DeviceConstraint, ...] = ()
    # How long a running gang's lost member's room is held for its replacement (0: never).
    replacement_hold_seconds: int = DEFAULT_REPLACEMENT_HOLD_SECONDS
    # The members' declared runtime (api.runtimes), and how long the gang may hold a
    # reservation (None: the plugin's default); any kind of group may carry them.
    expected_runtime: float | None = None
    max_reservation_seconds: float | None = None
    # How long the gang waits for a scale-up before it preempts (None: the plugin's default).
    scale_up_wait_seconds: float | None = None
    # Malformed optional annotations: reported as Warning events, never a refusal.
    warnings: tuple[str, ...] = ()
    phase: str = ""
    occupied_by: str = ""
    errors: tuple[str, ...] = ()
    # Which kind of group object this record was read from (coscheduling.groups): "" for
    # ours; the tag also ends the gang key, so same-named groups of two kinds never merge.
    tag: str = ""
    # The API object behind the record ("group/version"; "" for a group with no object).
    api_version: str = f"{GROUP_API}/{GROUP_VERSION}"

    @property
    def key(self) -> str:
        return gang_key(self.namespace, self.name, self.tag)

    @property
    def valid(self) -> bool:
        return not self.errors


def gang_key(namespace: str, name: str, tag: str = "") -> str:
    """``namespace/name`` for our PodGroups, ``namespace/name@tag`` for other kinds."""
    return f"{namespace}/{name}@{tag}" if tag else f"{namespace}/{name}"


def new_record(obj: dict[str, Any], tag: str = "",
               api_version: str = f"{GROUP_API}/{GROUP_VERSION}",
               ) -> tuple[PodGroup, dict[str, Any], list[str]]:
    """A record with the object's metadata and status read: (record, spec, errors so far).
    Every kind of group object starts here; its own fields are read by its parser."""
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
        tag=tag,
        api_version=api_version,
    )
    read_reservation_hints(group, meta.get("annotations") or {})
    errors: list[str] = []
    if not isinstance(spec, dict):
        errors.append("spec: required, and must be an object")
        spec = {}
    return group, spec, errors


def read_reservation_hints(group: PodGroup, annotations: object) -> None:
    """The expected runtime and reservation limit annotations; unreadable ones count as
    absent and are kept as warnings."""
    if not isinstance(annotations, dict):
        return
    warnings = []
    group.expected_runtime, why = declared_runtime(annotations)
    if why:
        warnings.append(why)
    for key, attribute in ((MAX_RESERVATION_ANNOTATION, "max_reservation_seconds"),
                           (SCALE_UP_WAIT_ANNOTATION, "scale_up_wait_seconds")):
        raw = annotations.get(key)
        if raw is None:
            continue
        try:
            setattr(group, attribute, seconds_of(raw))
        except ValueError as err:
            warnings.append(f"metadata.annotations[{key}]: {err}; the default applies")
    group.warnings = tuple(warnings)


def parse_min_member(raw: object, path: str, errors: list[str], minimum: int = 1) -> int:
    """An integer count field of at least ``minimum``; 1 (and an error) when it is not."""
    if isinstance(raw, bool) or not isinstance(raw, int):
        errors.append(f"{path}: must be an integer >= {minimum}, got {raw!r}")
    elif raw < minimum:
        errors.append(f"{path}: must be >= {minimum}, got {raw}")
    else:
        return max(1, raw)
    return 1


def parse_podgroup(obj: dict[str, Any]) -> PodGroup:
    group, spec, errors = new_record(obj)
    group.min_member = parse_min_member(spec.get("minMember"), "spec.minMember", errors)
    group.min_resources = parse_amounts(spec.get("minResources"), "spec.minResources", errors)
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
    read_priority_and_queue(group, spec, errors)
    hold = spec.get("replacementHoldSeconds", DEFAULT_REPLACEMENT_HOLD_SECONDS)
    if (isinstance(hold, bool) or not isinstance(hold, int)
            or not 0 <= hold <= MAX_REPLACEMENT_HOLD_SECONDS):
        errors.append(f"spec.replacementHoldSeconds: must be an integer from 0 to "
                      f"{MAX_REPLACEMENT_HOLD_SECONDS}, got {hold!r}")
    else:
        group.replacement_hold_seconds = hold
    reserve = spec.get("maxReservationSeconds")
    if reserve is not None:
        if isinstance(reserve, bool) or not isinstance(reserve, int) or reserve < 0:
            errors.append(f"spec.maxReservationSeconds: must be an integer >= 0 (0: never "
                          f"reserve), got {reserve!r}")
        else:
            group.max_reservation_seconds = float(reserve)
    if spec.get("topology") is not None:
        try:
            group.topology = parse_topology(spec["topology"])
        except ValueError as err:
            errors.append(f"spec.topology{err}")
    if spec.get("deviceConstraints") is not None:
        try:
            group.device_constraints = parse_device_constraints(spec["deviceConstraints"])
        except ValueError as err:
            errors.append(f"spec.deviceConstraints{err}")
    group.subgroups = parse_subgroups(spec, group.min_member, errors)
    group.errors = tuple(errors)
    return group


def parse_device_constraints(raw: object) -> tuple[DeviceConstraint, ...]:
    """Validate ``spec.deviceConstraints``; a ValueError's text starts with the sub-field."""
    if not isinstance(raw, list):
        raise ValueError(f": must be a list, got {raw!r}")
    if len(raw) > MAX_DEVICE_CONSTRAINTS:
        raise ValueError(f": at most {MAX_DEVICE_CONSTRAINTS} constraints, got {len(raw)}")
    found = []
    for index, entry in enumerate(raw):
        where = f"[{index}]"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: must be an object with matchAttribute, got {entry!r}")
        unknown = sorted(set(entry) - {"matchAttribute", "deviceClassNames"})
        if unknown:
            raise ValueError(f"{where}.{unknown[0]}: unknown field (allowed: matchAttribute, "
                             "deviceClassNames)")
        attribute = entry.get("matchAttribute")
        if not isinstance(attribute, str) or not _QUALIFIED_ATTRIBUTE.match(attribute):
            raise ValueError(f"{where}.matchAttribute: must be a fully qualified device "
                             f"attribute (domain/name), got {attribute!r}")
        classes = entry.get("deviceClassNames") or []
        if not isinstance(classes, list) or not all(
                isinstance(c, str) and _DNS_SUBDOMAIN.match(c) for c in classes):
            raise ValueError(f"{where}.deviceClassNames: must be a list of DeviceClass "
                             f"names, got {classes!r}")
        found.append(DeviceConstraint(attribute, tuple(classes)))
    return tuple(found)


def parse_subgroups(spec: dict[str, Any], min_member: int,
                    errors: list[str]) -> SubGroups | None:
    """``spec.subGroups`` (named subgroups, each ``{name, minMember, topology}``) and
    ``spec.minGroups`` (how many of them must be placed whole; default: every one)."""
    raw, raw_min = spec.get("subGroups"), spec.get("minGroups")
    if raw is None:
        if raw_min is not None:
            errors.append("spec.minGroups: needs spec.subGroups")
        return None
    if not isinstance(raw, list) or not raw or len(raw) > MAX_SUBGROUPS:
        errors.append(f"spec.subGroups: must be a list of 1 to {MAX_SUBGROUPS} subgroups, "
                      f"got {raw!r}")
        return None
    listed: list[SubGroup] = []
    for index, item in enumerate(raw):
        found = _parse_subgroup(item, f"spec.subGroups[{index}]", errors)
        if found is not None and any(s.name == found.name for s in listed):
            errors.append(f"spec.subGroups[{index}].name: {found.name!r} is listed twice")
        elif found is not None:
            listed.append(found)
    count = len(raw)
    min_groups = count if raw_min is None else parse_min_member(
        raw_min, "spec.minGroups", errors)
    if min_groups > count:
        errors.append(f"spec.minGroups: {min_groups} is more than the {count} subGroups")
    needed = sum(sorted(s.min_member for s in listed)[:min_groups])
    if len(listed) == count and needed > min_member:
        errors.append(f"spec.minMember: {min_member} is less than the {needed} members its "
                      f"smallest {min_groups} subGroups need together")
    return SubGroups(tuple(listed), min_groups)


def _parse_subgroup(raw: object, path: str, errors: list[str]) -> SubGroup | None:
    if not isinstance(raw, dict):
        errors.append(f"{path}: must be an object with name and minMember, got {raw!r}")
        return None
    unknown = sorted(set(raw) - {"name", "minMember", "topology"})
    if unknown:
        errors.append(f"{path}.{unknown[0]}: unknown field (allowed: name, minMember, "
                      "topology)")
        return None
    name = raw.get("name")
    if not isinstance(name, str) or not _LABEL_NAME.match(name):
        errors.append(f"{path}.name: must be a label value (the members' {SUBGROUP_LABEL}), "
                      f"got {name!r}")
        return None
    minimum = parse_min_member(raw.get("minMember"), f"{path}.minMember", errors)
    topology = None
    if raw.get("topology") is not None:
        try:
            topology = parse_topology(raw["topology"])
        except ValueError as err:
            errors.append(f"{path}.topology{err}")
    return SubGroup(name, minimum, topology)


def read_priority_and_queue(group: PodGroup, spec: dict[str, Any], errors: list[str]) -> None:
    """``spec.priorityClassName`` and ``spec.queue``, which several kinds of group share."""
    priority_class = spec.get("priorityClassName") or ""
    if priority_class and (
        not isinstance(priority_class, str) or not _DNS_SUBDOMAIN.match(priority_class)
    ):
        errors.append(f"spec.priorityClassName: {priority_class!r} is not a valid name")
    else:
        group.priority_class_name = str(priority_class)
    queue = spec.get("queue") or "default"
    if not isinstance(queue, str) or len(queue) > 253 or not _DNS_SUBDOMAIN.match(queue):
        errors.append(f"spec.queue: {queue!r} is not a valid Queue name")
    else:
        group.queue = queue


def parse_amounts(raw: object, path: str, errors: list[str]) -> dict[str, int]:
    """A ResourceList field of non-negative quantities (``to_units`` refuses a negative
    one); what is wrong goes to ``errors``."""
    try:
        return parse_resource_list(raw)
    except QuantityError as err:
        errors.append(f"{path}: {err}")
        return {}


def valid_label_key(key: str) -> bool:
    prefix, _, name = key.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)):
        return False
    return bool(_LABEL_NAME.match(name))


def parse_topology(raw: object) -> Topology:
    """Validate ``spec.topology``; a ValueError's text starts with the sub-field it names."""
    if not isinstance(raw, dict):
        raise ValueError(f": must be an object with mode and keys, got {raw!r}")
    unknown = sorted(set(raw) - {"mode", "keys"})
    if unknown:
        raise ValueError(f".{unknown[0]}: unknown field (allowed: mode, keys)")
    mode = raw.get("mode", TOPOLOGY_REQUIRED)
    if mode not in (TOPOLOGY_REQUIRED, TOPOLOGY_PREFERRED):
        raise ValueError(f".mode: must be {TOPOLOGY_REQUIRED} or {TOPOLOGY_PREFERRED}, "
                         f"got {mode!r}")
    keys = raw.get("keys")
    if not isinstance(keys, list) or not keys:
        raise ValueError(".keys: must be a non-empty list of node label keys, narrowest first")
    if len(keys) > MAX_TOPOLOGY_KEYS:
        raise ValueError(f".keys: at most {MAX_TOPOLOGY_KEYS} keys, got {len(keys)}")
    for index, key in enumerate(keys):
        if not isinstance(key, str) or not valid_label_key(key):
            raise ValueError(f".keys[{index}]: {key!r} is not a valid label key")
        if keys.index(key) != index:
            raise ValueError(f".keys[{index}]: {key!r} is listed twice")
    return Topology(str(mode), tuple(keys))
