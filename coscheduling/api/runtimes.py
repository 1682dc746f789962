"""How long a pod will run, as far as anyone said: what reservations and backfill read.

A pod's end is known from ``spec.activeDeadlineSeconds`` (the kubelet kills it then, counted
from its start) or from a declared runtime, the annotation ``EXPECTED_RUNTIME_ANNOTATION`` on
the pod or on its group ("90s", "5m", "1h30m", or plain seconds). Without either it is
unknown, and a pod of unknown runtime is never let into room reserved for a gang.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coscheduling.api.times import parse_duration

EXPECTED_RUNTIME_ANNOTATION = "batch.scheduler.tencent.com/expected-runtime"
MAX_RESERVATION_ANNOTATION = "batch.scheduler.tencent.com/max-reservation-seconds"
# How long a gang that could preempt waits for a scale-up first (scaleUp in the plugin args).
SCALE_UP_WAIT_ANNOTATION = "batch.scheduler.tencent.com/scale-up-wait-seconds"


def declared_runtime(annotations: Mapping[str, Any]) -> tuple[float | None, str]:
    """(seconds, "") for a readable expected-runtime annotation, (None, "") without one,
    (None, why) for a malformed one: it then counts as unknown, and the why is reported."""
    raw = annotations.get(EXPECTED_RUNTIME_ANNOTATION)
    if raw is None:
        return None, ""
    try:
        seconds = seconds_of(raw)
    except ValueError as err:
        return None, (f"metadata.annotations[{EXPECTED_RUNTIME_ANNOTATION}]: {err}; the "
                      "runtime counts as unknown")
    return seconds, ""


def seconds_of(raw: object) -> float:
    """A positive duration: a Go-style string ("90s", "5m") or a number of seconds."""
    if isinstance(raw, bool):
        raise ValueError(f"must be a duration such as '90s' or a number of seconds, got {raw!r}")
    if isinstance(raw, (int, float)):
        seconds = float(raw)
    elif isinstance(raw, str):
        text = raw.strip()
        try:
            seconds = float(text)
        except ValueError:
            seconds = parse_duration(text)
    else:
        raise ValueError(f"must be a duration such as '90s' or a number of seconds, got {raw!r}")
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"must be a duration longer than zero, got {raw!r}")
    return seconds


def bounded_runtime(declared: float | None, active_deadline: float | None) -> float | None:
    """The longest the pod may run: the smaller of what it declared and its active deadline."""
    known = [s for s in (declared, active_deadline) if s is not None]
    return min(known) if known else None
