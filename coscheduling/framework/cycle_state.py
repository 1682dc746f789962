"""Data plugins share within one scheduling cycle of one pod."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from coscheduling.framework.status import Status


class CycleState:
    """A per-cycle scratch space, keyed by plugin-chosen names.

    PreFilter computes once what Filter and Score need for every node, and leaves it here.
    """

    __slots__ = ("_data", "skip_filter", "skip_score")

    def __init__(self) -> None:
        self._data: dict[str, Any] = {}
        self.skip_filter: set[str] = set()
        self.skip_score: set[str] = set()

    def read(self, key: str) -> Any:
        return self._data.get(key)

    def write(self, key: str, value: Any) -> None:
        self._data[key] = value

    def clone(self) -> CycleState:
        other = CycleState()
        other._data = dict(self._data)
        other.skip_filter = set(self.skip_filter)
        other.skip_score = set(self.skip_score)
        return other


# What the framework records about how a pod's cycle ended, for its Unreserve plugins: a pod
# already permitted (released with its gang) that fails later is retried on its own; one that
# failed before that carries why.
PERMITTED = "framework/permitted"
FAILURE = "framework/failure"

# What a gang plugin's PreFilter asks of the core: the member's gang must be admitted now (a
# GangAdmission), which the gang's cycle takes from here and hands back to the plugin.
GANG_ADMISSION = "framework/gang-admission"


@dataclass(frozen=True, slots=True)
class CycleFailure:
    """Why a cycle ended before its pod was permitted (read by Unreserve plugins).

    ``timed_out``: its Permit wait ran out. ``withdrawn``: the pod itself went away (deleted
    while it waited), which says nothing about whether its group could fit.
    """

    reason: str
    timed_out: bool = False
    withdrawn: bool = False


def settle(state: CycleState, decision: Status) -> None:
    """Record what a Permit wait's ``decision`` means for the cycle, as the binding cycle
    sees it: permitted, or failed (a rejection recorded earlier, by whoever rejected the pod
    with a reason of its own, is kept)."""
    if decision.ok:
        state.write(PERMITTED, True)
    elif state.read(FAILURE) is None:
        state.write(FAILURE, CycleFailure(decision.message,
                                          timed_out=decision.plugin == "Permit"))
