"""Arguments of the Coscheduling plugin."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coscheduling.config.errors import ConfigError, as_bool, as_float, as_int, reject_unknown
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
    # Who reserves: a gang of at least this many members at once; a smaller one only after
    # it has waited reserve_after_seconds (its room comes free by the ordinary churn, and
    # holding room for it would make every small job wait behind it).
    reserve_from_members: int = 8
    reserve_after_seconds: float = 60.0
    # ... or a gang that needs at least this share of what the cluster's nodes hold (of any
    # one resource) at once: a 4-cpu gang on a 4-cpu cluster is large whatever its size.
    reserve_from_share: float = 0.25
    # Pods whose known end comes before a reservation's start may use its room.
    backfill: bool = True
    # Pods outside any gang with no known end may use reserved room until the gang needs it
    # to start; then they are evicted (only then, and only as many as it needs). Off by
    # default: a pod that declares no end may be a service, and nobody asked to evict it.
    lend_reclaimable: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "defaultMaxScheduleSeconds": self.default_max_schedule_seconds,
            "freezeSeconds": self.freeze_seconds,
            "maxReservationSeconds": self.max_reservation_seconds,
            "maxReservationsPerQueue": self.max_reservations_per_queue,
            "reserveFromMembers": self.reserve_from_members,
            "reserveAfterSeconds": self.reserve_after_seconds,
            "reserveFromShare": self.reserve_from_share,
            "backfill": self.backfill,
            "lendReclaimable": self.lend_reclaimable,
        }


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    reject_unknown(raw, {"defaultMaxScheduleSeconds", "freezeSeconds", "maxReservationSeconds",
                         "maxReservationsPerQueue", "reserveFromMembers",
                         "reserveAfterSeconds", "reserveFromShare", "backfill",
                         "lendReclaimable", "scaleUp"},
                   path)
    defaults = CoschedulingArgs().to_dict()

    def given(key: str) -> Any:
        return raw.get(key, defaults[key])

    checked = CoschedulingArgs(
        as_float(given("defaultMaxScheduleSeconds"), f"{path}.defaultMaxScheduleSeconds",
                 exclusive_minimum=0),
        as_float(given("freezeSeconds"), f"{path}.freezeSeconds", minimum=0),
        as_float(given("maxReservationSeconds"), f"{path}.maxReservationSeconds", minimum=0),
        as_int(given("maxReservationsPerQueue"), f"{path}.maxReservationsPerQueue", minimum=0),
        as_int(given("reserveFromMembers"), f"{path}.reserveFromMembers", minimum=1),
        as_float(given("reserveAfterSeconds"), f"{path}.reserveAfterSeconds", minimum=0),
        _share(given("reserveFromShare"), f"{path}.reserveFromShare"),
        as_bool(given("backfill"), f"{path}.backfill"),
        as_bool(given("lendReclaimable"), f"{path}.lendReclaimable"),
    ).to_dict()
    return {**checked, "scaleUp": validate_scale_up(raw.get("scaleUp"), f"{path}.scaleUp")}


def _share(value: object, path: str) -> float:
    share = as_float(value, path, exclusive_minimum=0)
    if share > 1:
        raise ConfigError(path, f"must be a share of the cluster in (0, 1], got {value!r}")
    return share


def parse_args(raw: Mapping[str, Any]) -> CoschedulingArgs:
    checked = validate_args(raw, "args")
    return CoschedulingArgs(
        float(checked["defaultMaxScheduleSeconds"]), float(checked["freezeSeconds"]),
        float(checked["maxReservationSeconds"]), int(checked["maxReservationsPerQueue"]),
        int(checked["reserveFromMembers"]), float(checked["reserveAfterSeconds"]),
        float(checked["reserveFromShare"]),
        bool(checked["backfill"]), bool(checked["lendReclaimable"]),
    )
