"""Per-workload overrides of a derived group, read from the workload's annotations.

A derived group takes its shape from what the workload's controller does (a Job's
parallelism, a LeaderWorkerSet's size); these annotations change what the controller does
not say: how many members are enough, the queue, the priority class, a topology domain and
how long the gang may take to start. A malformed one is an error naming the annotation: the
workload's pods are then refused with it instead of being placed under a group nobody
asked for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coscheduling import GROUP_API
from coscheduling.api.podgroups import (
    TOPOLOGY_REQUIRED,
    parse_min_member,
    parse_topology,
    read_priority_and_queue,
)
from coscheduling.api.podgroups import PodGroup as Record
from coscheduling.api.times import parse_duration

MIN_MEMBER = f"{GROUP_API}/min-member"
QUEUE = f"{GROUP_API}/queue"
PRIORITY_CLASS = f"{GROUP_API}/priority-class"
TOPOLOGY = f"{GROUP_API}/topology"  # node label keys, narrowest first, comma-separated
TOPOLOGY_MODE = f"{GROUP_API}/topology-mode"  # Required (default) or Preferred
MAX_SCHEDULE_TIME = f"{GROUP_API}/max-schedule-time"  # a duration such as 5m
# "false": no derived group for this workload; "true": one for a Deployment or StatefulSet.
DERIVE = f"{GROUP_API}/derive-group"
# A JobSet's subgroups: one per replicated job (the default) or one per replica (Job).
SUBGROUP_PER = f"{GROUP_API}/subgroup-per"
SUBGROUP_PER_VALUES = ("replicated-job", "replica")
ANNOTATIONS = (MIN_MEMBER, QUEUE, PRIORITY_CLASS, TOPOLOGY, TOPOLOGY_MODE, MAX_SCHEDULE_TIME,
               DERIVE, SUBGROUP_PER)


@dataclass(frozen=True, slots=True)
class Overrides:
    """The spec fields the annotations set (min-member apart: each kind applies it to its
    own count) and what is wrong with them."""

    spec: dict[str, Any]
    min_member: int | None = None
    errors: tuple[str, ...] = ()


def _where(annotation: str) -> str:
    return f"metadata.annotations[{annotation}]"


def read_overrides(annotations: dict[str, str]) -> Overrides:
    """The overrides of one workload (every error names its annotation)."""
    spec: dict[str, Any] = {}
    errors: list[str] = []
    minimum = None
    if MIN_MEMBER in annotations:
        raw = annotations[MIN_MEMBER].strip()
        value: object = int(raw) if raw.lstrip("-").isdigit() else raw
        minimum = parse_min_member(value, _where(MIN_MEMBER), errors)
    probe = Record(namespace="", name="")
    names = {"queue": annotations.get(QUEUE, ""),
             "priorityClassName": annotations.get(PRIORITY_CLASS, "")}
    found: list[str] = []
    read_priority_and_queue(probe, names, found)
    errors += [error.replace("spec.queue", _where(QUEUE))
               .replace("spec.priorityClassName", _where(PRIORITY_CLASS)) for error in found]
    if annotations.get(QUEUE):
        spec["queue"] = annotations[QUEUE]
    if annotations.get(PRIORITY_CLASS):
        spec["priorityClassName"] = annotations[PRIORITY_CLASS]
    _read_topology(annotations, spec, errors)
    if MAX_SCHEDULE_TIME in annotations:
        raw = annotations[MAX_SCHEDULE_TIME]
        try:
            if parse_duration(raw) <= 0:
                raise ValueError("must be longer than zero")
            spec["maxScheduleTime"] = raw.strip()
        except ValueError as err:
            errors.append(f"{_where(MAX_SCHEDULE_TIME)}: {err}")
    per = annotations.get(SUBGROUP_PER)
    if per is not None and per not in SUBGROUP_PER_VALUES:
        errors.append(f"{_where(SUBGROUP_PER)}: must be one of "
                      f"{', '.join(SUBGROUP_PER_VALUES)}, got {per!r}")
    return Overrides(spec, minimum, tuple(errors))


def subgroup_per_replica(annotations: dict[str, str]) -> bool:
    """A JobSet asked for a subgroup per replica (each Job) instead of per replicated job."""
    return annotations.get(SUBGROUP_PER) == "replica"


def _read_topology(annotations: dict[str, str], spec: dict[str, Any],
                   errors: list[str]) -> None:
    keys, mode = annotations.get(TOPOLOGY), annotations.get(TOPOLOGY_MODE)
    if keys is None:
        if mode is not None:
            errors.append(f"{_where(TOPOLOGY_MODE)}: needs {TOPOLOGY} (the node label keys)")
        return
    topology = {"mode": (mode or TOPOLOGY_REQUIRED).strip(),
                "keys": [key.strip() for key in keys.split(",") if key.strip()]}
    try:
        parse_topology(topology)
    except ValueError as err:
        field = str(err).split(":", 1)[0]
        annotation = TOPOLOGY_MODE if field == ".mode" else TOPOLOGY
        errors.append(f"{_where(annotation)}: {str(err).split(': ', 1)[-1]}")
        return
    spec["topology"] = topology


def derivation_disabled(annotations: dict[str, str]) -> bool:
    """The workload asked for no derived group (its pods are then plain pods)."""
    return annotations.get(DERIVE, "").strip().lower() == "false"


def opted_in(annotations: dict[str, str]) -> bool:
    """A Deployment or StatefulSet asked to be a gang of its replicas."""
    return annotations.get(DERIVE, "").strip().lower() == "true"
