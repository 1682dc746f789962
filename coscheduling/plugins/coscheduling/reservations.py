"""Reservations: room that frees is held for the gang first in line until it fits whole.

Without them a gang that does not fit is frozen, and each core that frees goes to the next
small pod that fits: a large gang starves behind a stream of small jobs. A reservation picks
nodes for the gang's missing members (nodes they could use once their pods end: every filter,
the gang's topology domain), then holds on each of them the room that is free there, up to
what the members need, as a claim in the cache under a placeholder. Claims count as used, so
the room a finishing pod leaves is held too, and when everything is held the gang is admitted
from it.

Who reserves is decided by what waiting costs (``reserveFromMembers``, ``reserveFromShare``,
``reserveAfterSeconds``): a gang of many members, or one that needs a large share of the
cluster, whose room would hardly ever come free whole by the ordinary churn, reserves at
once; a small one only once it has waited long, since its room frees soon anyway and holding
it makes every small job wait behind it.

Who may still use reserved room (it is *lent* to them for their own cycle and held again at
the next one): pods and gangs of higher priority; pods that will end before the reservation
is expected to start (``backfill``: their runtime is known, see api.runtimes); and pods
outside any gang whose end is not known (``lendReclaimable``). Those are *borrowers*: the
start estimate counts their room as the reservation's, and once every other bit of room is
held, just enough of them to complete it are evicted (never a gang member, so no gang drops
below minMember; never before the eviction completes the reservation, so nobody is evicted
for nothing; their room stays counted until they are gone, so nothing is over-committed).
How many gangs reserve at once is bounded per queue; a reservation runs out after
maxReservationSeconds and the gang then waits without one. Reservations live in memory: after
a restart the gang's first failed attempt makes it again.

All methods run under ``cache.lock``.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from coscheduling.api.membership import NO_GROUP
from coscheduling.api.pods import Pod
from coscheduling.api.quantity import CPU, PODS, add_into, format_units
from coscheduling.plugins.coscheduling.args import CoschedulingArgs
from coscheduling.plugins.coscheduling.topology import domains

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.framework.handle import Handle, Transaction
    from coscheduling.framework.nodeinfo import NodeInfo

UNKNOWN = math.inf
"""When the room a reservation needs is expected to be free, if no end is known."""

# How a pod may use a reservation's room (Reservations._lends).
PRIORITY = "priority"
BACKFILL = "backfill"
RECLAIMABLE = "reclaimable"


@dataclass
class Target:
    """One node of a reservation: the members planned there, what they need, what is held."""

    node: str
    key: str  # the placeholder's key in the cache
    members: list[str] = field(default_factory=list)
    need: dict[str, int] = field(default_factory=dict)
    held: dict[str, int] = field(default_factory=dict)
    ready_at: float = UNKNOWN

    @property
    def complete(self) -> bool:
        return all(self.held.get(r, 0) >= v for r, v in self.need.items())


@dataclass
class Reservation:
    group_key: str
    queue: str
    priority: int
    rank: tuple[int, int, float, str]
    since: float
    until: float
    targets: dict[str, Target]
    lent: bool = False
    # Whether the gang was told its room is all held (once per completion).
    announced: bool = False
    # Pods of no known end placed on its nodes with its room (lendReclaimable): pod -> node.
    borrowers: dict[str, str] = field(default_factory=dict)

    @property
    def complete(self) -> bool:
        return all(t.complete for t in self.targets.values())

    @property
    def estimate(self) -> float:
        """When every target's room is expected to be free (UNKNOWN if any end is not)."""
        return max((t.ready_at for t in self.targets.values()), default=UNKNOWN)

    def held(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for target in self.targets.values():
            add_into(total, target.held)
        return total

    def needed(self) -> dict[str, int]:
        total: dict[str, int] = {}
        for target in self.targets.values():
            add_into(total, target.need)
        return total

    def describe(self) -> str:
        """"holds 2/4 cpu on n1, n2"-style numbers for conditions and explain."""
        held, need = self.held(), self.needed()
        amounts = ", ".join(f"{format_units(r, held.get(r, 0))}/{format_units(r, v)} {r}"
                            for r, v in sorted(need.items()) if v)
        return f"holds {amounts} on {', '.join(sorted(self.targets))}"


class Reservations:
    """The reservations of every gang, in line order."""

    def __init__(self, handle: Handle, args: CoschedulingArgs, plugin_name: str,
                 on_complete: Callable[[str], None]) -> None:
        self.handle = handle
        self.args = args
        self.plugin_name = plugin_name
        self.on_complete = on_complete
        self._by_group: dict[str, Reservation] = {}
        # Gangs whose reservation ran out: they wait without one until placed or changed.
        self.expired: set[str] = set()
        # When a running pod without status.startTime was first seen running here.
        self._seen_running: dict[str, float] = {}
        # Who was lent reserved room in the current cycle: (pod key, group key -> how).
        self._borrower: tuple[str, dict[str, str]] | None = None
        self._idle_at = handle.clock.now()
        self._settled_at = -1  # the cache's change_seq at the last settle

    def __iter__(self) -> Iterator[Reservation]:
        return iter(sorted(self._by_group.values(), key=lambda r: r.rank))

    def of(self, group_key: str) -> Reservation | None:
        return self._by_group.get(group_key)

    def by_group(self) -> dict[str, tuple[str, dict[str, int]]]:
        """group key -> (queue, room held): what the queues count toward their shares."""
        return {k: (r.queue, r.held()) for k, r in self._by_group.items()}

    # -- when a pod's cycle starts ---------------------------------------------------------
    def lend(self, pod: Pod) -> None:
        """Hold again what was lent to the last cycle, then lend ``pod`` the room of the
        reservations it may use: it has a higher priority, it ends before they start, or it
        is a pod of no known end they may take back (``lendReclaimable``)."""
        self.settle()
        if not self._by_group:
            return
        lent: dict[str, str] = {}
        for reservation in self._by_group.values():
            how = self._lends(pod, reservation)
            if how:
                lent[reservation.group_key] = how
                self._drop_placeholders(reservation)
                reservation.lent = True
        if lent:
            self._borrower = (pod.key, lent)

    def _lends(self, pod: Pod, reservation: Reservation) -> str:
        """How ``pod`` may use ``reservation``'s room: PRIORITY, BACKFILL, RECLAIMABLE or not
        at all ("")."""
        if reservation.group_key == pod.group_key:
            return ""  # its own room is given to it at admission
        if pod.priority > reservation.priority:
            return PRIORITY
        runtime = self.runtime_of(pod)
        if self.args.backfill and _ends_before(runtime, self.handle.clock.now(),
                                               reservation.estimate):
            return BACKFILL
        if (self.args.lend_reclaimable and runtime is None and not pod.group_key
                and self.handle.runner.preemption_enabled()):
            return RECLAIMABLE
        return ""

    def pass_by(self, tx: Transaction, pod: Pod) -> None:
        """For a what-if: the room of the reservations ``pod`` may pass is free in ``tx``,
        held exactly as before once it is discarded (no reservation grows or shrinks).
        Runs beside the loop (on a view): the loop may change the reservations meanwhile, so
        it reads copies (one atomic step each under the GIL)."""
        for reservation in tuple(self._by_group.values()):
            if self._lends(pod, reservation):
                for target in tuple(reservation.targets.values()):
                    tx.drop_claim(target.key)

    def preview(self, group: PodGroup, members: list[Pod]) -> tuple[bool, tuple[str, ...],
                                                                   Reservation | None]:
        """For a what-if of a gang that would wait for room: whether it would reserve (first
        in line of its queue), the reservations ahead of it, and the reservation it would
        make (its nodes and estimate; None when none can be planned). A gang below
        reserveFromMembers reserves only once it has waited reserveAfterSeconds: this says
        whether it would then. Changes nothing; like :meth:`pass_by`, reads copies."""
        if self._limit(group) <= 0:
            return False, (), None
        rank = _rank(self.handle, group, self.args)
        same = sorted((r for r in tuple(self._by_group.values()) if r.queue == group.queue),
                      key=lambda r: r.rank)
        ahead = tuple(r.group_key for r in same if r.rank < rank)
        first = len(ahead) < self.args.max_reservations_per_queue
        return first, ahead, self._plan(group, members)

    def lend_own(self, group_key: str) -> None:
        """The gang's admission may use the room held for it: it is let go for the attempt
        and held again (``restore``, ``consider``) if the gang still does not fit."""
        reservation = self._by_group.get(group_key)
        if reservation is not None:
            self._drop_placeholders(reservation)
            reservation.lent = True

    def restore(self, group_key: str) -> None:
        reservation = self._by_group.get(group_key)
        if reservation is not None:
            self.grow(reservation)

    def settle(self, *, refresh: bool = False) -> None:
        """Hold the room lent to the last cycle again (less what it took) and grow every
        reservation with room that freed, in line order. Every pod's cycle starts here: with
        nothing lent and no node changed since the last time, there is nothing to do unless
        ``refresh`` (housekeeping: estimates move with time)."""
        self._borrower = None
        cache = self.handle.cache
        if not refresh and cache.change_seq == self._settled_at and not any(
                r.lent for r in self._by_group.values()):
            return
        for reservation in self:
            self.grow(reservation)
        self._settled_at = cache.change_seq

    def placed(self, pod: Pod, node_name: str) -> None:
        """A pod lent reserved room was placed on a reserved node: a backfill (counted) or a
        borrower the reservation may take its room back from."""
        if self._borrower is None or self._borrower[0] != pod.key:
            return
        for group_key, how in self._borrower[1].items():
            reservation = self._by_group.get(group_key)
            if reservation is None or node_name not in reservation.targets:
                continue
            if how == BACKFILL:
                self.handle.metrics.backfilled_pods.inc()
                return
            if how == RECLAIMABLE:
                reservation.borrowers[pod.key] = node_name

    # -- making and growing ----------------------------------------------------------------
    def consider(self, group: PodGroup, members: list[Pod]) -> str:
        """The gang did not fit: reserve for its missing ``members`` if it is first in line
        (within the per-queue bound), or grow the reservation it has. Returns what the
        reservation holds, for the gang's message ("" without one)."""
        reservation = self._by_group.get(group.key)
        if group.key in self.expired or self._limit(group) <= 0:
            if reservation is not None:
                self.release(group.key, "turned off")
            return ""
        if not members:
            if reservation is None:
                return ""
            self.grow(reservation)
            return reservation.describe()
        if reservation is None or not self._still_valid(reservation, members):
            if reservation is not None:
                self.release(group.key, "replanned")
            if not self.worth_reserving(group) or not self._first_in_line(group):
                return ""
            reservation = self._plan(group, members)
            if reservation is None:
                return ""
            self._by_group[group.key] = reservation
            self.handle.metrics.reservations.set(float(len(self._by_group)))
            self.handle.status.group_event(
                group, "Normal", "Reserved",
                f"first in line and does not fit: room that frees on "
                f"{', '.join(sorted(reservation.targets))} is held for its "
                f"{len(members)} missing members")
        self.grow(reservation)
        return reservation.describe()

    def worth_reserving(self, group: PodGroup) -> bool:
        """Whether waiting costs the gang enough to hold room for it (see the module): it is
        large, or it has waited reserveAfterSeconds."""
        waited = self.handle.clock.now() - group.created
        return _large(self.handle, group, self.args) or waited >= self.args.reserve_after_seconds

    def _limit(self, group: PodGroup) -> float:
        if group.max_reservation_seconds is not None:
            return group.max_reservation_seconds
        return self.args.max_reservation_seconds

    def _still_valid(self, reservation: Reservation, members: list[Pod]) -> bool:
        """Its members are still the missing ones and its nodes still exist."""
        planned = {m for t in reservation.targets.values() for m in t.members}
        cache = self.handle.cache
        return planned == {m.key for m in members} and all(
            cache.node(name) is not None for name in reservation.targets)

    def _first_in_line(self, group: PodGroup) -> bool:
        """Within its queue's bound, or ahead of the last gang reserving in its queue (which
        then lets its room go)."""
        rank = _rank(self.handle, group, self.args)
        same_queue = [r for r in self._by_group.values() if r.queue == group.queue]
        if len(same_queue) < self.args.max_reservations_per_queue:
            return True
        last = max(same_queue, key=lambda r: r.rank)
        if rank >= last.rank:
            return False
        self.release(last.group_key, "displaced")
        return True

    def grow(self, reservation: Reservation) -> None:
        """Hold on each node the room free there, up to what the members need, within the
        queue's share; when everything is held, the gang is told it may be admitted."""
        cache = self.handle.cache
        self._forget_gone_borrowers(reservation)
        for target in reservation.targets.values():
            info = cache.node(target.node)
            if info is None or info.node is None:
                continue
            free = {r: info.node.allocatable.get(r, 0) - info.used(r, excluding=target.key)
                    for r in target.need}
            held = {r: max(0, min(free[r], v)) for r, v in target.need.items()}
            held = self._within_share(reservation, target, held)
            if held != target.held or reservation.lent:
                self._hold(reservation, target, held)
            target.ready_at = self._ready_at(info, target, reservation.borrowers)
        reservation.lent = False
        if not reservation.complete:
            self._reclaim(reservation)
            reservation.announced = False
        elif not reservation.announced:
            reservation.announced = True
            self.on_complete(reservation.group_key)

    def _forget_gone_borrowers(self, reservation: Reservation) -> None:
        cache = self.handle.cache
        for key, node in list(reservation.borrowers.items()):
            pod = cache.pod(key)
            if pod is None or pod.terminal or pod.node_name not in ("", node):
                del reservation.borrowers[key]

    def _reclaim(self, reservation: Reservation) -> None:
        """Once the borrowers' room is all the reservation still misses, evict just enough
        of them, newest first: the gang starts as soon as they are gone."""
        if not reservation.borrowers:
            return  # nothing to take back (the common case: no pod walks every target's pods)
        victims: list[Pod] = []
        for target in reservation.targets.values():
            chosen = self._to_reclaim(reservation, target)
            if chosen is None:
                return  # the gang waits for more than borrowed room: evicting now is for nothing
            victims += chosen
        if victims:
            self.handle.preemption.evict(victims, f"gang {reservation.group_key}", ())

    def _to_reclaim(self, reservation: Reservation, target: Target) -> list[Pod] | None:
        """The borrowers on ``target``'s node whose eviction makes its room whole ([] when it
        needs none, or their eviction is under way), or None when even all of them would not."""
        missing = {r: v - target.held.get(r, 0) for r, v in target.need.items()
                   if r != PODS and v > target.held.get(r, 0)}
        info = self.handle.cache.node(target.node)
        if not missing or info is None:
            return [] if not missing else None
        ledger = self.handle.preemption
        borrowers = sorted((p for p in info.pods.values()
                            if reservation.borrowers.get(p.key) == target.node
                            and not p.terminal), key=lambda p: (-p.created, p.key))
        chosen: list[Pod] = []
        for pod in sorted(borrowers, key=lambda p: not ledger.evicted(p)):  # under way first
            if not any(v > 0 for v in missing.values()):
                break
            add_into(missing, pod.requests, sign=-1)
            if not ledger.evicted(pod):
                chosen.append(pod)
        return None if any(v > 0 for v in missing.values()) else chosen

    def _within_share(self, reservation: Reservation, target: Target,
                      held: dict[str, int]) -> dict[str, int]:
        """Growth beyond the queue's deserved share, while another queue is below its own,
        is not taken (the queues' policy says)."""
        extra = {r: v - target.held.get(r, 0) for r, v in held.items()
                 if v > target.held.get(r, 0)}
        if not extra or self.handle.gangs.may_reserve(reservation.group_key, reservation.queue,
                                                      extra):
            return held
        return {r: min(v, target.held.get(r, 0)) for r, v in held.items()}

    def _hold(self, reservation: Reservation, target: Target, held: dict[str, int]) -> None:
        cache = self.handle.cache
        if held != target.held:
            self.handle.status.group_changed(reservation.group_key)
        info = cache.node(target.node)
        target.held = held if info is not None and info.node is not None else {}
        if not any(v for r, v in target.held.items() if r != PODS):
            cache.drop_claim(target.key)  # nothing held, or the node is gone
            return
        namespace, name = target.key.split("/", 1)
        cache.claim(_placeholder(namespace, name, reservation.priority, held), target.node)

    def _drop_placeholders(self, reservation: Reservation) -> None:
        for target in reservation.targets.values():
            self.handle.cache.drop_claim(target.key)
            target.held = {}

    # -- ending ------------------------------------------------------------------------------
    def release(self, group_key: str, outcome: str) -> Reservation | None:
        """Let the gang's room go (it was placed, displaced, expired, deleted...)."""
        reservation = self._by_group.pop(group_key, None)
        if reservation is None:
            return None
        self._drop_placeholders(reservation)
        self.handle.status.group_changed(group_key)
        metrics = self.handle.metrics
        metrics.reservation_duration.observe(
            max(0.0, self.handle.clock.now() - reservation.since), outcome)
        metrics.reservations.set(float(len(self._by_group)))
        if outcome != "placed":
            self.handle.activator.capacity_freed()  # the room is anyone's again
        return reservation

    def forget(self, group_key: str) -> None:
        """The gang was placed, changed or deleted: it may reserve again later."""
        self.expired.discard(group_key)

    def expire(self, now: float) -> list[Reservation]:
        """Reservations past their time; also counts the idle reserved core-seconds."""
        self._account_idle(now)
        gone = [r for r in self._by_group.values() if r.until <= now]
        for reservation in gone:
            self.release(reservation.group_key, "expired")
            self.expired.add(reservation.group_key)
        # A what-if's preview may add to it meanwhile (from its own thread): a copy.
        for key in [k for k in tuple(self._seen_running) if self.handle.cache.pod(k) is None]:
            self._seen_running.pop(key, None)
        return gone

    def _account_idle(self, now: float) -> None:
        held_cpu = sum(t.held.get(CPU, 0) for r in self._by_group.values()
                       for t in r.targets.values())
        if held_cpu and now > self._idle_at:
            self.handle.metrics.reservation_idle_core_seconds.inc(
                amount=held_cpu / 1000 * (now - self._idle_at))
        self._idle_at = now
        totals: dict[str, int] = {}
        for reservation in self._by_group.values():
            add_into(totals, reservation.held())
        for resource in set(totals) | {CPU}:
            amount = totals.get(resource, 0)
            self.handle.metrics.reserved_room.set(
                amount / 1000 if resource == CPU else float(amount), resource)

    # -- knowing when pods end ---------------------------------------------------------------
    def runtime_of(self, pod: Pod) -> float | None:
        """The pod's declared or deadline-bounded runtime, or its group's declared one."""
        if pod.runtime is not None:
            return pod.runtime
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        return group.expected_runtime if group is not None else None

    def end_of(self, pod: Pod, now: float) -> float:
        """When a running pod is expected to be gone (UNKNOWN if its runtime is not known);
        one already past its end counts as ending now."""
        runtime = self.runtime_of(pod)
        if runtime is None:
            return UNKNOWN
        started = pod.started or self._seen_running.setdefault(pod.key, now)
        return max(now, started + runtime)

    def _ready_at(self, info: NodeInfo, target: Target,
                  borrowers: Mapping[str, str] | None = None) -> float:
        """When the members' need on the node is expected to be free: now if held, else the
        end of the last running pod whose room it waits for (pods ending soonest first;
        ``borrowers`` give their room back whenever it is needed: now)."""
        now = self.handle.clock.now()
        missing = {r: v - target.held.get(r, 0) for r, v in target.need.items()
                   if r != PODS and v > target.held.get(r, 0)}
        if not missing:
            return now
        taken_back = borrowers or {}
        ends = sorted((now if p.key in taken_back else self.end_of(p, now), p.key, p)
                      for p in info.pods.values() if not p.terminal)
        for end, _, pod in ends:
            for resource in list(missing):
                missing[resource] -= pod.requests.get(resource, 0)
                if missing[resource] <= 0:
                    del missing[resource]
            if not missing:
                return end
        return UNKNOWN

    # -- planning ------------------------------------------------------------------------------
    def _plan(self, group: PodGroup, members: list[Pod]) -> Reservation | None:
        """Nodes for the missing members: those they could use once the pods there end, the
        ones whose room is expected to be free soonest and waste least, inside one domain when
        the gang asks for one. None when no such nodes exist."""
        options = [self.handle.cache.node_names()]
        if group.topology is not None:
            options = self._domain_options(group)
        best: tuple[tuple[float, float], Reservation] | None = None
        for names in options:
            planned = self._plan_on(group, members, names)
            if planned is None:
                continue
            reservation = self._new(group, planned)
            score = (reservation.estimate, _waste(self.handle, planned))
            if best is None or score < best[0]:
                best = (score, reservation)
        return best[1] if best is not None else None

    def _domain_options(self, group: PodGroup) -> list[list[str]]:
        """The nodes of each domain the gang may go to (the narrowest key that has any)."""
        assert group.topology is not None
        placed = self.handle.cache.group_nodes(group.key)
        for key in group.topology.keys:
            found = domains(self.handle.cache, key, placed)
            if found:
                return [names for _, names in sorted(found.items())]
        return [] if group.topology.required else [self.handle.cache.node_names()]

    def _new(self, group: PodGroup, targets: dict[str, Target]) -> Reservation:
        now = self.handle.clock.now()
        for target in targets.values():
            info = self.handle.cache.node(target.node)
            if info is not None:
                target.ready_at = self._ready_at(info, target)
        rank = _rank(self.handle, group, self.args)
        return Reservation(group.key, group.queue, -rank[0], rank, now, now + self._limit(group),
                           targets)

    def _plan_on(self, group: PodGroup, members: list[Pod],
                 names: list[str]) -> dict[str, Target] | None:
        """Place each member in turn on the usable node whose room frees soonest, counting
        the members planned before it (as claims while planning)."""
        targets: dict[str, Target] = {}
        with self.handle.cache.transaction() as tx:  # discarded: the plan claims nothing
            for member in members:
                chosen = self._best_node(member, names, targets)
                if chosen is None:
                    return None
                target = targets.get(chosen)
                if target is None:
                    target = targets[chosen] = Target(chosen, _placeholder_key(group, chosen))
                target.members.append(member.key)
                add_into(target.need, {r: v for r, v in member.requests.items() if r != PODS})
                tx.claim(replace(member, name=f"{member.name}~planning"), chosen)
        return targets

    def _best_node(self, member: Pod, names: list[str],
                   targets: Mapping[str, Target]) -> str | None:
        cache = self.handle.cache
        best: tuple[float, float, str] | None = None
        for name in names:
            info = cache.node(name)
            if info is None or info.node is None or not self._could_use(member, info):
                continue
            target = targets.get(name) or Target(name, "")
            need = dict(target.need)
            add_into(need, member.requests)
            ready = self._ready_at(info, Target(name, "", need=need))
            score = (ready, _leftover(info, need), name)
            if best is None or score < best:
                best = score
        return best[2] if best is not None else None

    def _could_use(self, member: Pod, info: NodeInfo) -> bool:
        """Every filter passes for ``member`` on the node with its running pods gone."""
        allocatable = info.node.allocatable if info.node is not None else {}
        if any(v > allocatable.get(r, 0) for r, v in member.requests.items() if r != PODS):
            return False
        running = [p for p in info.pods.values() if p.node_name and not p.terminal]
        with self.handle.cache.transaction() as tx:  # discarded: they keep running
            tx.evict(running)
            return self.handle.runner.filter_node(member, info, self.plugin_name).ok


def _ends_before(runtime: float | None, now: float, start: float) -> bool:
    """A pod started now ends by ``start`` (never while either is not known)."""
    return runtime is not None and start != UNKNOWN and now + runtime <= start


def _large(handle: Handle, group: PodGroup, args: CoschedulingArgs) -> bool:
    """A gang of reserveFromMembers or more, or one whose members ask for reserveFromShare
    or more of what the cluster's nodes hold of some resource: room that large hardly ever
    comes free at once by the ordinary churn."""
    if group.min_member >= args.reserve_from_members:
        return True
    asked: Counter[str] = Counter()
    for member in handle.cache.group_pods(group.key):
        asked.update(member.requests)
    total = handle.cache.allocatable()
    return any(amount >= args.reserve_from_share * total[resource]
               for resource, amount in asked.items()
               if resource != PODS and total.get(resource, 0) > 0)


def _rank(handle: Handle, group: PodGroup,
          args: CoschedulingArgs) -> tuple[int, int, float, str]:
    """The order between reserving gangs: priority, then those of reserveFromMembers before
    smaller ones (which reserve only after waiting, and whose room frees soon anyway), then
    age (QueueSort's order)."""
    large = _large(handle, group, args)
    return (-_priority(handle, group), 0 if large else 1, group.created, group.key)


def _priority(handle: Handle, group: PodGroup) -> int:
    """The gang's priority: its members' (the highest of them)."""
    members = handle.cache.group_pods(group.key)
    return max((m.priority for m in members), default=0)


def _placeholder_key(group: PodGroup, node: str) -> str:
    tag = f"@{group.tag}" if group.tag else ""
    return f"{group.namespace}/{group.name}{tag}~reserved~{node}"


def _placeholder(namespace: str, name: str, priority: int, held: dict[str, int]) -> Pod:
    return Pod(namespace=namespace, name=name, uid="", priority=priority,
               requests=dict(held), nonzero_cpu=held.get(CPU, 0),
               nonzero_memory=held.get("memory", 0), membership=NO_GROUP)


def _leftover(info: NodeInfo, need: Mapping[str, int]) -> float:
    """What the node would have left once the members' need is placed, as a fraction of
    its allocatable (best fit wastes least)."""
    allocatable = info.node.allocatable if info.node is not None else {}
    fractions = [(allocatable.get(r, 0) - v) / allocatable[r] for r, v in need.items()
                 if allocatable.get(r)]
    return sum(fractions) / len(fractions) if fractions else 0.0


def _waste(handle: Handle, targets: Mapping[str, Target]) -> float:
    total = 0.0
    for target in targets.values():
        info = handle.cache.node(target.node)
        if info is not None:
            total += _leftover(info, target.need)
    return total
