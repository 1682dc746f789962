"""Arguments of the Coscheduling plugin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coscheduling.config.errors import as_float, as_int, reject_unknown
from coscheduling.provisioning.args import validate_scale_up


@dataclass(frozen=True)
class CoschedulingArgs:
    # Permit wait for groups without spec.maxScheduleTime, counted from the gang's start.
    default_max_schedule_seconds: float = 60.0
    # How long a gang that did not fit is rejected at once before it is tried again
    # (unless the cluster changes in a way that could help it first).
    freeze_seconds: float = 20.0
    # How long a gang first in line may hold room that frees for it (reservations), unless
    # its PodGroup says otherwise; 0 turns reservations off.
    max_reservation_seconds: float = 1800.0
    # How many gangs of one queue hold a reservation at once (the head of the line first).
    max_reservations_per_queue: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "defaultMaxScheduleSeconds": self.default_max_schedule_seconds,
            "freezeSeconds": self.freeze_seconds,
            "maxReservationSeconds": self.max_reservation_seconds,
            "maxReservationsPerQueue": self.max_reservations_per_queue,
        }


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    reject_unknown(raw, {"defaultMaxScheduleSeconds", "freezeSeconds", "maxReservationSeconds",
                         "maxReservationsPerQueue", "scaleUp"}, path)
    defaults = CoschedulingArgs()
    timeout = raw.get("defaultMaxScheduleSeconds", defaults.default_max_schedule_seconds)
    freeze = raw.get("freezeSeconds", defaults.freeze_seconds)
    reserve = raw.get("maxReservationSeconds", defaults.max_reservation_seconds)
    per_queue = raw.get("maxReservationsPerQueue", defaults.max_reservations_per_queue)
    checked = CoschedulingArgs(
        as_float(timeout, f"{path}.defaultMaxScheduleSeconds", exclusive_minimum=0),
        as_float(freeze, f"{path}.freezeSeconds", minimum=0),
        as_float(reserve, f"{path}.maxReservationSeconds", minimum=0),
        as_int(per_queue, f"{path}.maxReservationsPerQueue", minimum=0),
    ).to_dict()
    return {**checked, "scaleUp": validate_scale_up(raw.get("scaleUp"), f"{path}.scaleUp")}


def parse_args(raw: Mapping[str, Any]) -> CoschedulingArgs:
    checked = validate_args(raw, "args")
    return CoschedulingArgs(
        float(checked["defaultMaxScheduleSeconds"]), float(checked["freezeSeconds"]),
        float(checked["maxReservationSeconds"]), int(checked["maxReservationsPerQueue"]),
    )
