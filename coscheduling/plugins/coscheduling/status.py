"""A PodGroup's status, from what the scheduler knows: phase, counts and conditions.

Phases follow the seed design: Pending (nothing happening), PreScheduling (fewer member pods
exist than minMember), Scheduling (an attempt holds claims or waiting members), Scheduled
(minMember released or bound), Running (minMember running or succeeded, one still running),
Finished (minMember succeeded and none running), Failed (members failed and none is left
running or placed).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coscheduling.api import podgroups as pg
from coscheduling.api.quantity import format_amounts, format_units
from coscheduling.api.times import format_duration, format_rfc3339
from coscheduling.plugins.coscheduling.manager import WAITING_FOR_MEMBERS
from coscheduling.plugins.coscheduling.reservations import UNKNOWN
from coscheduling.plugins.coscheduling.subgroups import status_counts

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.plugins.coscheduling.holds import Hold
    from coscheduling.plugins.coscheduling.manager import GangCounts, GangState
    from coscheduling.plugins.coscheduling.reservations import Reservation


@dataclass(frozen=True)
class GroupView:
    """Everything the status is made of, gathered under the cache lock."""

    group: PodGroup
    members: Sequence[Pod]
    finished: Mapping[str, str]
    counts: GangCounts
    gang: GangState | None
    frozen_until: float
    frozen_reason: str
    timeout: float
    holds: Sequence[Hold] = ()
    # Which subgroups cannot reach their minMember with the members that exist ("": none).
    short: str = ""
    # The room held for the gang while it is first in line, and whether it ran out.
    reservation: Reservation | None = None
    reservation_expired: bool = False
    # The gang's ProvisioningRequest (status.provisioningRequest) and its ScaleUp condition.
    scale_up: tuple[dict[str, Any] | None, dict[str, str] | None] = (None, None)


def _condition(kind: str, status: bool, reason: str, message: str) -> dict[str, str]:
    return {"type": kind, "status": "True" if status else "False", "reason": reason,
            "message": message}


@dataclass(frozen=True)
class Tally:
    """A gang's members counted as its status reports them."""

    succeeded: int
    failed: int
    bound: int
    running: int
    released: int  # placed: bound or let go for binding

    @staticmethod
    def of(view: GroupView) -> Tally:
        finished = view.finished.values()
        return Tally(
            succeeded=sum(1 for phase in finished if phase == "Succeeded"),
            failed=sum(1 for phase in finished if phase == "Failed"),
            bound=sum(1 for p in view.members if p.node_name),
            running=sum(1 for p in view.members if p.node_name and p.phase == "Running"),
            released=view.counts.placed,
        )


def gang_phase(view: GroupView, tally: Tally) -> str:
    """The PodGroup phase, from the members' counts and whether an attempt is under way."""
    minimum, counts, t = view.group.min_member, view.counts, tally
    if t.succeeded >= minimum and t.running == 0:
        return pg.PHASE_FINISHED
    if t.failed and t.running + t.released + counts.waiting == 0 and t.succeeded < minimum \
            and len(view.members) < minimum:
        return pg.PHASE_FAILED
    if t.running and t.running + t.succeeded >= minimum:
        return pg.PHASE_RUNNING  # members that ended well still count (as Volcano's do)
    if t.released >= minimum or (t.bound and t.bound + t.succeeded >= minimum):
        return pg.PHASE_SCHEDULED
    if (view.gang is not None and view.gang.deadline) or counts.waiting:
        return pg.PHASE_SCHEDULING
    if counts.members < minimum or view.short:
        return pg.PHASE_PRE_SCHEDULING
    return pg.PHASE_PENDING


def _waiting_conditions(view: GroupView, phase: str) -> list[dict[str, str]]:
    """Why a gang that is not placed waits: Unschedulable, Frozen, TimedOut."""
    gang, minimum = view.gang, view.group.min_member
    conditions = []
    reason = gang.last_failure if gang is not None else ""
    why = "GangUnschedulable"
    if phase == pg.PHASE_PRE_SCHEDULING:
        reason = f"{WAITING_FOR_MEMBERS}: {view.counts.members} of minMember {minimum} exist"
        gated = gated_members(view.members)
        awaiting = sum(1 for p in view.members
                       if p.awaiting_claims and not p.node_name and not p.deleting)
        if gated - awaiting:
            reason += f" ({gated - awaiting} more held by spec.schedulingGates, not counted)"
        if awaiting:
            reason += (f" ({awaiting} more waiting for their resource claims to be made, "
                       "not counted)")
        if view.short:
            reason += f"; {view.short}"
        if view.counts.members + gated >= minimum:
            why = "SchedulingGated"  # no failure: it waits for the gates to go
    if reason:
        conditions.append(_condition("Unschedulable", True, why, reason))
    if view.frozen_until:
        conditions.append(_condition(
            "Frozen", True, "FailedAttempt",
            f"not retried before {format_rfc3339(view.frozen_until)} unless the cluster "
            f"changes: {view.frozen_reason}"))
    if gang is not None and gang.timed_out_at and gang.timed_out_at >= gang.released_at:
        conditions.append(_condition(
            "TimedOut", True, "MaxScheduleTimeExceeded",
            f"{gang.timed_out_waiting} members were waiting when maxScheduleTime "
            f"({format_duration(view.timeout)}) ran out at "
            f"{format_rfc3339(gang.timed_out_at)}"))
    return conditions


PLACED_PHASES = (pg.PHASE_SCHEDULED, pg.PHASE_RUNNING, pg.PHASE_FINISHED)


def gang_conditions(view: GroupView, phase: str, tally: Tally) -> list[dict[str, str]]:
    """The PodGroup's conditions, with numbers."""
    if phase in PLACED_PHASES:
        placed = max(tally.released, tally.bound + tally.succeeded)
        conditions = [_condition(
            "Scheduled", True, "GangReleased",
            f"minMember {view.group.min_member} reached: {placed} members placed")]
    else:
        conditions = _waiting_conditions(view, phase)
    reserved = _reserved_condition(view, phase)
    if reserved is not None:
        conditions.append(reserved)
    if view.scale_up[1] is not None:
        conditions.append(view.scale_up[1])
    if view.holds:
        conditions.append(_condition(
            "ReplacementHeld", True, "MemberLost", "; ".join(
                f"room of {h.lost} held on node {h.node} for a new member until "
                f"{format_rfc3339(h.until)}" for h in view.holds)))
    return conditions


def _reserved_condition(view: GroupView, phase: str) -> dict[str, str] | None:
    """Reserved: what is held against what is needed, and the estimated start."""
    reservation = view.reservation
    if reservation is not None:
        estimate = reservation.estimate
        when = (f"; estimated start {format_rfc3339(estimate)}" if estimate != UNKNOWN
                else "; the start cannot be estimated (running pods of unknown runtime)")
        if reservation.complete:
            when = "; complete, the gang is being placed"
        return _condition("Reserved", True, "FirstInLine",
                          f"{reservation.describe()} until "
                          f"{format_rfc3339(reservation.until)}{when}")
    if view.reservation_expired and phase not in PLACED_PHASES:
        return _condition("Reserved", False, "ReservationExpired",
                          "the reservation ran out (maxReservationSeconds); the gang waits "
                          "without one")
    return None


def reservation_status(reservation: Reservation) -> dict[str, Any]:
    """status.reservation: per node, what is held against what its members need."""
    found: dict[str, Any] = {
        "since": format_rfc3339(reservation.since),
        "expiresAt": format_rfc3339(reservation.until),
        "nodes": [{"node": t.node, "members": len(t.members),
                   "held": format_amounts(t.held, zeros=True),
                   "needed": format_amounts(t.need, zeros=True)}
                  for t in sorted(reservation.targets.values(), key=lambda t: t.node)],
    }
    if reservation.estimate != UNKNOWN:
        found["estimatedStart"] = format_rfc3339(reservation.estimate)
    return found


def build_status(view: GroupView) -> dict[str, Any]:
    tally = Tally.of(view)
    phase = gang_phase(view, tally)
    status: dict[str, Any] = {
        "phase": phase, "scheduled": tally.bound + tally.succeeded + tally.failed,
        "running": tally.running, "succeeded": tally.succeeded, "failed": tally.failed,
        "conditions": gang_conditions(view, phase, tally),
    }
    if view.gang is not None and view.gang.started:
        status["scheduleStartTime"] = format_rfc3339(view.gang.started)
    occupant = occupied_by(view.group, view.members, lambda p: bool(p.node_name))
    if occupant:
        status["occupiedBy"] = occupant
    if view.group.subgroups is not None:
        status["subGroups"] = status_counts(view.group, view.members)
    if view.reservation is not None:
        status["reservation"] = reservation_status(view.reservation)
    if view.scale_up[0] is not None:
        status["provisioningRequest"] = view.scale_up[0]
    return status


def occupied_by(group: PodGroup, members: Sequence[Pod], placed: Callable[[Pod], bool]) -> str:
    """The controller that owns the group (Tencent's rule: one owner's pods may not take
    over another owner's group): kept once written, else the owner of its oldest ``placed``
    member that has one. Never empty once an owned member is placed, even when two owners'
    pods were placed before the first status write; the scheduler passes assumed, waiting
    and claimed members as placed, so a second owner is refused before that write."""
    if group.occupied_by:
        return group.occupied_by
    owned = [p for p in members if p.gang_owner and not p.deleting and placed(p)]
    return min(owned, key=lambda p: (p.created, p.key)).gang_owner if owned else ""


def room_for(wanted: Mapping[str, int], nodes: Iterable[NodeInfo],
             promised: Mapping[str, int]) -> tuple[bool, str]:
    """Whether ``wanted`` fits the free room of the schedulable nodes, less what admitted
    groups without placed members were ``promised``; and, when not, what is short."""
    if not wanted:
        return True, ""
    free = dict.fromkeys(wanted, 0)
    for info in nodes:
        if info.node is None or info.node.unschedulable:
            continue
        for name in wanted:
            free[name] += max(0, info.node.allocatable.get(name, 0) - info.used(name))
    short = [f"{name} {format_units(name, amount)} wanted, "
             f"{format_units(name, free[name] - promised.get(name, 0))} free"
             for name, amount in sorted(wanted.items())
             if amount > free[name] - promised.get(name, 0)]
    return not short, "; ".join(short)


def gated_members(members: Iterable[Pod]) -> int:
    """Members that scheduling gates hold back (not members of the gang until ungated)."""
    return sum(1 for p in members if p.gated and not p.node_name and not p.deleting)
