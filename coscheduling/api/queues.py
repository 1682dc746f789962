"""Queue records (``batch.scheduler.tencent.com/v1``, cluster-scoped), validated field by field.

A Queue divides the cluster between teams by weight (see the proportion plugin). A Queue the
scheduler cannot use keeps its record with ``errors`` filled in, so a gang waiting for it can
be told which field is wrong.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.podgroups import parse_amounts

PLURAL = "queues"
KIND = "Queue"
DEFAULT_QUEUE = "default"
DEFAULT_WEIGHT = 1
MAX_WEIGHT = 1_000_000

_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(slots=True, eq=False)
class Queue:
    name: str
    weight: int = DEFAULT_WEIGHT
    # Hard caps, in the units of coscheduling.api.quantity (cpu in millicores).
    capability: dict[str, int] = field(default_factory=dict)
    # Whether other queues may take back what this queue borrowed beyond its share.
    reclaimable: bool = True
    # How long its gangs that could preempt wait for a scale-up first (None: the plugin's
    # default; a PodGroup's own annotation comes before it).
    scale_up_wait_seconds: float | None = None
    resource_version: str = ""
    errors: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors


def valid_queue_name(name: object) -> bool:
    return isinstance(name, str) and len(name) <= 253 and bool(_DNS_SUBDOMAIN.match(name))


def parse_queue(obj: dict[str, Any]) -> Queue:
    meta = obj.get("metadata") or {}
    spec = obj.get("spec")
    queue = Queue(name=str(meta.get("name") or ""),
                  resource_version=str(meta.get("resourceVersion") or ""))
    errors: list[str] = []
    if spec is None:
        spec = {}
    if not isinstance(spec, dict):
        errors.append("spec: must be an object")
        spec = {}
    weight = spec.get("weight", DEFAULT_WEIGHT)
    if isinstance(weight, bool) or not isinstance(weight, int) or not (
            1 <= weight <= MAX_WEIGHT):
        errors.append(f"spec.weight: must be an integer from 1 to {MAX_WEIGHT}, got {weight!r}")
    else:
        queue.weight = weight
    queue.capability = parse_amounts(spec.get("capability"), "spec.capability", errors)
    reclaimable = spec.get("reclaimable", True)
    if not isinstance(reclaimable, bool):
        errors.append(f"spec.reclaimable: must be true or false, got {reclaimable!r}")
    else:
        queue.reclaimable = reclaimable
    queue.scale_up_wait_seconds = _seconds(spec.get("scaleUpWaitSeconds"),
                                           "spec.scaleUpWaitSeconds", errors)
    queue.errors = tuple(errors)
    return queue


def _seconds(raw: object, path: str, errors: list[str]) -> float | None:
    """An optional number of seconds, at least 0."""
    if raw is None:
        return None
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw) \
            or raw < 0:
        errors.append(f"{path}: must be a number of seconds >= 0, got {raw!r}")
        return None
    return float(raw)


def default_queue_object() -> dict[str, Any]:
    """The ``default`` Queue the scheduler creates when it is missing."""
    return {"apiVersion": f"{GROUP_API}/{GROUP_VERSION}", "kind": KIND,
            "metadata": {"name": DEFAULT_QUEUE},
            "spec": {"weight": DEFAULT_WEIGHT, "reclaimable": True}}
