"""The PodGroup manager: gang state, the all-or-nothing admission check and the gang's fate.

How a gang gets in, and why two gangs never deadlock:

1. PreFilter of the first member asks for the gang's admission; the manager says which
   members to place (and in which domain and subgroup chunks), the core's gang cycle finds
   room for each, one after another, with the Filter and Score its own cycle would run, and
   *claims* that room in the cache in the same locked step.
   Other gangs and plain pods see claimed room as used, so nobody can take it while the gang
   is being placed; a gang that does not fit claims nothing and is frozen for a while.
2. Members are placed one by one into their claimed room (any other room that fits if the
   claimed node no longer does) and Wait at Permit.
3. When placed + waiting members reach minMember, Permit releases every waiting member in one
   step. If any member fails first (a Filter miss, a timeout, a deleted group), every waiting
   member is rejected at once and every claim is dropped.

The loop calls every method under ``cache.lock``; a what-if's trial (``GangSimulator``) runs
on its own thread on a view of the cache, without the lock, and keeps to its made-up gang's
state.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cachetools import TTLCache

from coscheduling.api.times import format_duration
from coscheduling.framework.gangplan import GangStep, InDomain, Members
from coscheduling.plugins.coscheduling import subgroups
from coscheduling.plugins.coscheduling.args import CoschedulingArgs
from coscheduling.plugins.coscheduling.holds import HeldSlots
from coscheduling.plugins.coscheduling.search import needs_search
from coscheduling.plugins.coscheduling.topology import Domain, TopologyDomains
from coscheduling.preemption.evaluator import describe_victims, gang_preemptor

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle
    from coscheduling.preemption import Preemption

log = logging.getLogger(__name__)

WAITING_FOR_MEMBERS = "waiting for member pods"
"""How a gang that has fewer members than minMember says so (status, pods, explain)."""

# Where a member stands, as counts() and enough() sort them.
PLACED, WAITING, CLAIMED, PENDING = "placed", "waiting", "claimed", "pending"
RESERVED = frozenset((PLACED, WAITING, CLAIMED))
READY = frozenset((PLACED, WAITING))


def waiting_for_members(group: PodGroup, counts: GangCounts) -> str:
    return (f"{WAITING_FOR_MEMBERS}: {counts.members} of minMember {group.min_member} "
            f"exist ({counts.placed} placed)")


class _FreezeCache(TTLCache[str, tuple[float, str]]):
    """The freeze cache. TTLCache drops expired entries whenever it is touched; this one
    remembers which ones it dropped, so no frozen gang misses the moment it may retry."""

    def __init__(self, maxsize: int, ttl: float, timer: Callable[[], float]) -> None:
        super().__init__(maxsize=maxsize, ttl=ttl, timer=timer)
        self._expired: list[str] = []

    def expire(self, time: float | None = None) -> list[tuple[str, tuple[float, str]]]:
        dropped = super().expire(time)
        self._expired.extend(key for key, _ in dropped)
        return dropped

    def drain_expired(self) -> list[str]:
        drained, self._expired = self._expired, []
        return drained


@dataclass
class GangState:
    """What the manager remembers of one group between cycles."""

    key: str
    deadline: float = 0.0
    started: float = 0.0
    last_failure: str = ""
    last_failure_at: float = 0.0
    released_at: float = 0.0
    # Members placed or let go when minMember was last reached (for status and checks).
    released_members: int = 0
    # The last timeout: when, and how many members were waiting then.
    timed_out_at: float = 0.0
    timed_out_waiting: int = 0
    attempts: int = 0
    timeouts: int = 0
    rejections: int = 0
    claimed: set[str] = field(default_factory=set)
    # Whether the gang's claims wait for pods it preempted (the ledger knows which).
    preempting: bool = False
    # The topology domain the gang was admitted into (spec.topology); kept after the gang
    # is released so later members join it, dropped when an attempt fails.
    domain: Domain | None = None
    # Members that entered Wait during the current attempt.
    waited: set[str] = field(default_factory=set)


@dataclass(frozen=True)
class GangCounts:
    members: int
    placed: int
    waiting: int
    claimed: int
    pending: list[Pod]


class GangManager:
    def __init__(self, handle: Handle, args: CoschedulingArgs, plugin_name: str) -> None:
        self.handle = handle
        self.args = args
        self.plugin_name = plugin_name
        self.gangs: dict[str, GangState] = {}
        self.holds = HeldSlots(handle)
        self.subgroup_domains = subgroups.SubgroupDomains(handle.cache)
        self._frozen = _FreezeCache(
            maxsize=1_000_000, ttl=args.freeze_seconds if args.freeze_seconds > 0 else 1e-9,
            timer=time.monotonic,
        )

    # -- bookkeeping ---------------------------------------------------------------------
    def state(self, group_key: str) -> GangState:
        gang = self.gangs.get(group_key)
        if gang is None:
            gang = self.gangs[group_key] = GangState(group_key)
        return gang

    def timeout_for(self, group: PodGroup) -> float:
        if group.max_schedule_time is not None:
            return group.max_schedule_time
        return self.args.default_max_schedule_seconds

    def counts(self, group_key: str, exclude: str = "") -> GangCounts:
        """Members placed (bound or released for binding), waiting, claimed and still pending.

        A member with scheduling gates is not a member yet: it counts nowhere (not toward
        minMember, status or admission) until its gates are removed."""
        placed = held = claimed = members = 0
        pending: list[Pod] = []
        for member in self.handle.cache.group_pods(group_key):
            where = self.where(member, exclude)
            members += bool(where)
            placed += where == PLACED
            held += where == WAITING
            claimed += where == CLAIMED
            if where == PENDING:
                pending.append(member)
        return GangCounts(members, placed, held, claimed, pending)

    def where(self, member: Pod, exclude: str = "") -> str:
        """PLACED (bound or assumed), WAITING, CLAIMED, PENDING; "" for no member (deleting,
        ``exclude``, or held back by scheduling gates)."""
        cache = self.handle.cache
        if member.deleting or member.key == exclude or (member.gated and not member.node_name):
            return ""
        if member.node_name:
            return PLACED
        if self.handle.waiting_pods.get(member.key) is not None:
            return WAITING
        if cache.is_assumed(member.key):
            return PLACED
        return CLAIMED if cache.claimed_node(member.key) else PENDING

    def tally(self, group: PodGroup, counted: frozenset[str], pod: Pod | None = None,
              pending: Iterable[Pod] = ()) -> subgroups.Tally:
        """The group's members per subgroup: those standing in ``counted``, ``pod`` counted
        as if it stood there too, and the ``pending`` ones given."""
        key = pod.key if pod is not None else ""
        members = [(m, True) for m in self.handle.cache.group_pods(group.key)
                   if self.where(m, key) in counted]
        extra = [(pod, True)] if pod is not None else []
        return subgroups.tally(group, [*members, *extra, *((p, False) for p in pending)])

    def enough(self, group: PodGroup, counted: frozenset[str], pod: Pod | None = None,
               *, with_pod: bool = False) -> bool:
        """Whether the members standing in ``counted`` (``pod`` left out, or counted when
        ``with_pod``) make the gang whole: minMember, and for a gang of subgroups its
        subgroups, and ``pod``'s own subgroup, whole."""
        if group.subgroups is None:
            counts = self.counts(group.key, exclude=pod.key if pod is not None else "")
            total = sum(n for where, n in ((PLACED, counts.placed), (WAITING, counts.waiting),
                                           (CLAIMED, counts.claimed)) if where in counted)
            return total + with_pod >= group.min_member
        found = self.tally(group, counted, pod if with_pod else None)
        return subgroups.releasable(found, pod) if pod is not None else found.satisfied()

    def shortfall(self, group: PodGroup) -> str:
        """Which subgroups the members that exist cannot make whole ("": none)."""
        if group.subgroups is None:
            return ""
        counts = self.counts(group.key)
        return self.tally(group, RESERVED, pending=counts.pending).shortfall()

    # -- freezing ------------------------------------------------------------------------
    def freeze(self, group_key: str, reason: str) -> None:
        if self.args.freeze_seconds > 0:
            self._frozen[group_key] = (time.monotonic() + self.args.freeze_seconds, reason)
            self.handle.status.group_changed(group_key)

    def frozen_until(self, group_key: str) -> float:
        """Wall-clock end of a group's freeze (0 when not frozen), for status and explain."""
        frozen = self.frozen(group_key)
        return self.handle.clock.now() + frozen[0] if frozen is not None else 0.0

    def frozen(self, group_key: str) -> tuple[float, str] | None:
        """(seconds left, reason) while a group is frozen."""
        entry = self._frozen.get(group_key)
        if entry is None:
            return None
        return max(0.0, entry[0] - time.monotonic()), entry[1]

    def frozen_keys(self) -> list[str]:
        return [key for key in list(self._frozen.keys()) if self.frozen(key) is not None]

    def unfreeze_all(self, exclude: str = "") -> list[str]:
        """The cluster changed in a way that may help: every frozen gang may try again."""
        keys = [key for key in list(self._frozen.keys()) if key != exclude]
        for key in keys:
            self._frozen.pop(key, None)
        return keys

    def thaw(self, group_key: str) -> None:
        """The gang changed size: it may try again at once."""
        if self._frozen.pop(group_key, None) is not None:
            self.handle.status.group_changed(group_key)

    def expire_frozen(self) -> list[str]:
        """Groups whose freeze ran out since the last call, so their pods can be retried."""
        self._frozen.expire()
        return self._frozen.drain_expired()

    # -- admission -----------------------------------------------------------------------
    def admit(self, pod: Pod, group: PodGroup,
              candidates: Iterable[Pod], counts: GangCounts) -> str:
        """Claim room for every member the gang still misses, or explain why it cannot.

        Returns "" on success (claims made), else the reason. ``candidates`` are the pending
        members in queue order; ``pod`` is tried first. ``counts`` are the group's counts
        taken in the same locked step.
        """
        members = self.missing(pod, group, candidates, counts)
        if isinstance(members, str):
            return members
        why = self._place(group, members, counts)
        if not why:
            self._commit(group, members)
        return why

    def try_admit(self, pod: Pod, group: PodGroup, candidates: list[Pod], counts: GangCounts,
                  preemption: Preemption | None) -> str:
        """Admit the gang (claims made: ""), or say why not: while members are missing it
        just waits; otherwise it preempts when ``preemption`` is given and evictions let it
        in, or it is frozen with the reason."""
        why = self.admit(pod, group, candidates, counts)
        if not why or why.startswith(WAITING_FOR_MEMBERS):
            return why
        if preemption is not None:
            preempting = self.preempt(pod, group, candidates, counts, preemption)
            if preempting:
                return preempting
        self.freeze(group.key, why)
        gang = self.state(group.key)
        gang.last_failure, gang.last_failure_at = why, self.handle.clock.now()
        return why

    def trial(self, pod: Pod, group: PodGroup,
              candidates: Iterable[Pod]) -> tuple[list[Pod], str]:
        """The admission of :meth:`admit` without its commit (a what-if): (the members it
        placed, each holding a claim the caller's transaction discards; why it cannot, ""
        when it can)."""
        counts = self.counts(group.key)
        members = self.missing(pod, group, candidates, counts)
        if isinstance(members, str):
            return [], members
        return members, self._place(group, members, counts)

    def retry_placement(self, group: PodGroup, members: list[Pod]) -> str:
        """Place ``members`` again as :meth:`trial` did (in a transaction that no longer
        holds its claims)."""
        return self._place(group, members, self.counts(group.key))

    def missing(self, pod: Pod, group: PodGroup, candidates: Iterable[Pod],
                 counts: GangCounts) -> list[Pod] | str:
        """The members to place now (``pod`` first), or why the gang must wait for more."""
        if group.subgroups is not None:
            found = self.tally(group, RESERVED, pending=[pod, *candidates])
            return subgroups.select(found, pod, WAITING_FOR_MEMBERS)
        need = group.min_member - counts.placed - counts.waiting - counts.claimed
        if need <= 0:
            return []
        chosen = [pod] + [c for c in candidates if c.key != pod.key]
        if len(chosen) < need:
            return waiting_for_members(group, counts)
        return chosen[:need]

    def _place(self, group: PodGroup, members: list[Pod], counts: GangCounts) -> str:
        """The gang's cycle places ``members`` as :meth:`_plan` says; all or none."""
        if group.topology is None:
            self.state(group.key).domain = None  # spec.topology may have been removed
        return self.handle.runner.place_gang(self._plan(group, members, counts),
                                             self.plugin_name)

    def _commit(self, group: PodGroup, members: list[Pod]) -> None:
        """The members' claims are the gang's now; its attempt (and clock) starts."""
        if not members:
            return
        gang = self.state(group.key)
        gang.claimed.update(m.key for m in members)
        self.start_attempt(gang, group)
        gang.attempts += 1
        self.handle.status.group_changed(group.key)

    # -- preemption ------------------------------------------------------------------------
    def preempt(self, pod: Pod, group: PodGroup, candidates: Iterable[Pod],
                counts: GangCounts, preemption: Preemption) -> str:
        """Evict lower-priority pods so that every missing member fits, and claim the room
        they free for the gang; returns what it did ("" when no eviction helps).

        The members' placement is simulated on the cluster without the victims, with the
        same admission (every filter, the gang's topology) the gang gets anyway, so an
        eviction is never for nothing.
        """
        members = self.missing(pod, group, candidates, counts)
        if isinstance(members, str) or not members:
            return ""
        self.handle.metrics.preemption_attempts.inc()

        def place() -> str:
            return self._place(group, members, counts)

        victims = preemption.for_gang(group, members, place)
        if victims is None:
            return ""
        cache = self.handle.cache
        with cache.transaction() as tx:
            tx.evict(victims.pods)
            if place():
                return ""
            tx.commit()  # the claims stay; the victims return until they are gone
        self._commit(group, members)
        gang = self.state(group.key)
        gang.preempting = True
        if log.isEnabledFor(logging.DEBUG):
            log.debug("gang %s preempts %s", group.key, describe_victims(victims))
        self.handle.preemption.evict(victims.pods, gang_preemptor(group.key),
                                     [m.key for m in members])
        for member in members:
            self.handle.preemption.nominate(member, cache.claimed_node(member.key))
        self.handle.metrics.gang_preemptions.inc()
        gang.last_failure = (f"preempting {describe_victims(victims)} for the gang; its "
                             f"{len(members)} missing members hold the room they free")
        gang.last_failure_at = self.handle.clock.now()
        return gang.last_failure

    def victims_left(self, group_key: str) -> int:
        """How many of the pods the gang preempted still exist. When the last one goes,
        the gang's clock starts again: the wait for victims is not its scheduling time."""
        gang = self.gangs.get(group_key)
        if gang is None or not gang.preempting:
            return 0
        left = self.handle.preemption.victims_left(gang_preemptor(group_key))
        if not left:
            gang.preempting = False
            group = self.handle.groups.podgroup(group_key)
            if group is not None and gang.deadline:
                gang.started = self.handle.clock.now()
                gang.deadline = gang.started + self.timeout_for(group)
        return left

    def _plan(self, group: PodGroup, members: list[Pod], counts: GangCounts) -> GangStep:
        """What the gang's cycle places: ``members`` (a gang of subgroups: subgroup by
        subgroup, each in its own domain when it asks for one), inside the gang's topology
        domain when it asks for one. The gang's domain is what the Coscheduling Filter holds
        its members to, during the cycle's trials and in their own cycles."""
        def part(chunk: list[Pod]) -> Members:
            return self._members(group, chunk, counts)

        inner: GangStep = (self.subgroup_domains.plan(group, members, part)
                           if self.subgroup_domains.wanted(group) else part(members))
        if group.topology is None:
            return inner
        gang = self.state(group.key)

        def hold(domain: Domain | None) -> None:
            gang.domain = domain

        domains = TopologyDomains(self.handle.cache, group.topology, members,
                                  lambda: self.handle.cache.group_nodes(group.key), hold)
        return InDomain(domains, inner)

    def _members(self, group: PodGroup, members: list[Pod], counts: GangCounts) -> Members:
        """``members`` placed one after another, by a search over node choices when that
        might miss a placement; a failure says how many of the gang could not be placed."""
        def refusal(made: int, why: str) -> str:
            placed = counts.placed + counts.waiting + counts.claimed + made
            return (f"{len(members) - made}/{group.min_member} members of the gang "
                    f"cannot be placed ({placed} placed or reserved): {why}")

        return Members(tuple(members), needs_search(group, members), refusal)

    def domain_of(self, group_key: str) -> Domain | None:
        """The domain the gang's members are held to (None: anywhere)."""
        gang = self.gangs.get(group_key)
        return gang.domain if gang is not None else None

    def start_attempt(self, gang: GangState, group: PodGroup) -> None:
        """The gang's clock starts with its first claim or waiting member."""
        if not gang.deadline:
            gang.started = self.handle.clock.now()
            gang.deadline = gang.started + self.timeout_for(group)

    def drop_claims(self, group_key: str) -> None:
        """Drop every claim the gang holds (it was placed, or it failed)."""
        gang = self.gangs.get(group_key)
        if gang is None:
            return
        for key in gang.claimed:
            self.handle.cache.drop_claim(key)
        gang.claimed.clear()
        gang.waited.clear()
        gang.deadline = 0.0

    def reject(self, group_key: str, reason: str, *, freeze: bool = True,
               timed_out: bool = False) -> list[str]:
        """Fail the gang's current attempt as a whole: every waiting member, every claim."""
        gang = self.state(group_key)
        now = self.handle.clock.now()
        gang.last_failure = reason
        gang.last_failure_at = now
        gang.rejections += 1
        waited = len(gang.waited)
        self.drop_claims(group_key)
        gang.domain = None
        self.subgroup_domains.forget(group_key)
        gang.preempting = False
        rejected = []
        for member in self.handle.cache.group_pods(group_key):
            if self.handle.waiting_pods.reject(member.key, self.plugin_name,
                                               f"rejected with its gang: {reason}"):
                rejected.append(member.key)
        metrics = self.handle.metrics
        if timed_out:
            gang.timeouts += 1
            gang.timed_out_at = now
            # Members sharing the deadline may all have been decided before this runs.
            gang.timed_out_waiting = max(waited, len(rejected) + 1)
            metrics.gang_timed_out.inc()
        metrics.gang_rejected.inc("timeout" if timed_out else "failure")
        if freeze:
            self.freeze(group_key, reason)
        self.handle.status.group_changed(group_key)
        return rejected

    def release_gang(self, group_key: str, placed: int) -> list[str]:
        """minMember is reached: let every waiting member go, together.

        ``placed`` counts the members already placed, including the one being permitted.
        """
        gang = self.state(group_key)
        now = self.handle.clock.now()
        if gang.started:
            self.handle.metrics.gang_schedule_duration.observe(now - gang.started)
        self.handle.metrics.gang_released.inc()
        self.drop_claims(group_key)
        gang.started = 0.0
        gang.released_at = self.handle.clock.now()
        gang.last_failure = ""
        allowed = []
        group = self.handle.groups.podgroup(group_key)
        found = self.tally(group, READY) if group is not None and group.subgroups else None
        for member in self.handle.cache.group_pods(group_key):
            if found is not None and not subgroups.releasable(found, member):
                continue  # its subgroup is not whole yet: it keeps waiting
            if self.handle.waiting_pods.allow(member.key, self.plugin_name):
                allowed.append(member.key)
        gang.released_members = placed + len(allowed)
        self.handle.status.group_changed(group_key)
        return allowed

    def expire(self, now: float) -> list[tuple[str, str]]:
        """Gangs whose deadline passed with claims but no waiting member (waiting members
        have their own timer); returns (group, reason) for each one rejected here."""
        expired = []
        for key, gang in list(self.gangs.items()):
            if gang.deadline and gang.deadline <= now and not self.victims_left(key):
                counts = self.counts(key)
                if counts.waiting == 0:
                    waited = format_duration(round(now - gang.started))
                    reason = f"gang timed out after {waited} with {counts.placed} placed"
                    self.reject(key, reason, timed_out=True)
                    expired.append((key, reason))
            elif not gang.deadline and not gang.claimed and not self.handle.cache.group_pods(key):
                del self.gangs[key]
        return expired

    def forget_group(self, group_key: str) -> None:
        self.holds.drop(group_key)
        self.subgroup_domains.forget(group_key)
        self.drop_claims(group_key)
        self.gangs.pop(group_key, None)
        self._frozen.pop(group_key, None)

