"""Coscheduling: the gang plugin shell. Decisions live in :mod:`.manager`."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Hashable, Mapping, Sequence
from functools import partial
from typing import TYPE_CHECKING, Any

from cachetools import LRUCache

from coscheduling.api import podgroups as pg
from coscheduling.api.quantity import add_into
from coscheduling.api.times import format_rfc3339
from coscheduling.framework.cycle_state import (
    FAILURE,
    GANG_ADMISSION,
    PERMITTED,
    CycleFailure,
    CycleState,
)
from coscheduling.framework.handle import Handle, Transaction
from coscheduling.framework.interfaces import (
    ClusterEventsPlugin,
    FilterPlugin,
    GangAdmission,
    GangAdmissionPlugin,
    GangKeeperPlugin,
    GangReporter,
    GangSimulator,
    GangSummary,
    GangTrial,
    PermitPlugin,
    PostFilterPlugin,
    PreEnqueuePlugin,
    QueueSortPlugin,
    ReservePlugin,
)
from coscheduling.framework.status import SUCCESS, Code, Status
from coscheduling.groups import (
    StatusInput,
    api_for,
    labelonly,
    missing_message,
    scheduled_here,
    volcano,
)
from coscheduling.plugins.coscheduling.args import parse_args
from coscheduling.plugins.coscheduling.manager import (
    PLACED,
    READY,
    RESERVED,
    WAITING_FOR_MEMBERS,
    GangCounts,
    GangManager,
    waiting_for_members,
)
from coscheduling.plugins.coscheduling.reservations import UNKNOWN, Reservations
from coscheduling.plugins.coscheduling.status import (
    GroupView,
    build_status,
    gated_members,
    occupied_by,
    room_for,
)
from coscheduling.plugins.coscheduling.topology import Domain
from coscheduling.preemption import Preemption
from coscheduling.preemption.evaluator import NEVER
from coscheduling.provisioning.args import parse_scale_up, scale_up_wait
from coscheduling.provisioning.hold import ProvisionedHolds, plan_room
from coscheduling.provisioning.requests import ENDED, PENDING, PROVISIONED
from coscheduling.provisioning.scaleup import no_shape_holds, provisioning_for

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.nodeinfo import NodeInfo


def _uid(owner: str) -> str:
    return owner.rsplit("/", 1)[-1]


class Coscheduling(QueueSortPlugin, PreEnqueuePlugin, GangAdmissionPlugin, FilterPlugin,
                   PostFilterPlugin, ReservePlugin, PermitPlugin, ClusterEventsPlugin,
                   GangReporter, GangSimulator, GangKeeperPlugin):
    name = "Coscheduling"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle
        self.manager = GangManager(handle, parse_args(args), self.name)
        self.preemption = Preemption(handle)
        self.partial_groups: set[str] = set()
        # Groups whose kind admits them before pods exist, still waiting for room; and those
        # admitted here, whose room counts as promised even before the admission is seen
        # coming back through the watch.
        self.awaiting_admission: set[str] = set()
        self.admitted: set[str] = set()
        # Each group's size as last seen (minMember, subgroups): a change thaws it.
        self.shapes: dict[str, tuple[int, Any]] = {}
        self.reservations = Reservations(handle, self.manager.args, self.name,
                                         self._reservation_complete)
        # Whole-gang scale-ups (ProvisioningRequests) and the nodes kept from scale-down.
        self.scale_ups, self.guard = provisioning_for(
            handle.api, parse_scale_up(args.get("scaleUp") or {}))
        # The room a Provisioned request added, held for its gang until it is placed there.
        self.scale_up_holds = (
            ProvisionedHolds(handle.cache, self.scale_ups.args.provisioned_hold_seconds)
            if self.scale_ups is not None else None)
        # Objects already warned about a malformed optional annotation: key -> message.
        self._warned: LRUCache[str, str] = LRUCache(maxsize=100_000)
        self._warned_lock = threading.Lock()

    # -- QueueSort -----------------------------------------------------------------------
    def sort_key(self, pod: Pod) -> tuple[Any, ...]:
        """Priority, then gangs left partially bound (e.g. by a crash) before all else, then
        the gang's age, the gang, the pod: members of one gang leave the queue back to back;
        a pod without a group is a gang of one."""
        group_key = pod.group_key
        group = self.handle.groups.podgroup(group_key) if group_key else None
        since = group.created if group is not None else pod.created
        partial = 0 if group_key in self.partial_groups else 1
        key = self.handle.gangs.order(group, pod, partial) if group is not None else None
        if key is not None:
            return key
        return (-pod.priority, partial, since, group_key or pod.key, pod.created, pod.key)

    def queue_order_changed(self) -> bool:
        return self.refresh_partial_groups()

    def refresh_partial_groups(self) -> bool:
        """Find gangs with some but fewer than minMember members placed; True if the set
        changed (the queue's order must then be recomputed). Runs under the cache lock."""
        partial = set()
        for group_key in self.handle.cache.group_keys():
            group = self.handle.groups.podgroup(group_key)
            if group is None:
                continue
            placed = self.manager.counts(group_key).placed
            if 0 < placed < group.min_member:
                partial.add(group_key)
        changed = partial != self.partial_groups
        self.partial_groups = partial
        return changed

    # -- PreFilter -----------------------------------------------------------------------
    def pre_enqueue(self, pod: Pod) -> Status:
        """A member of a gang with fewer than minMember members waits outside the active
        queue: its attempt could only say so, once per member that arrives (kube-scheduler's
        GangScheduling gates at PreEnqueue too). The last member's arrival moves them all.
        Anything else (a missing or invalid group, a refusal, subgroups) is its cycle's."""
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        if group is None or group.subgroups is not None \
                or self._refusal(pod, group) is not None:
            return SUCCESS
        counts = self.manager.counts(group.key)
        if counts.members >= group.min_member:
            return SUCCESS
        return Status.unschedulable(f'PodGroup "{group.key}": '
                                    f"{waiting_for_members(group, counts)}")

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """The gates a member passes (its group exists, is valid, agrees with it, is not
        another owner's, is not waiting for victims or frozen); then, when its gang must be
        admitted, the request for the gang's cycle (:meth:`admit_gang`)."""
        self._hold_provisioned()  # before any pod's filters see a node a scale-up added
        self.reservations.lend(pod)
        group_key = pod.group_key
        group = self.handle.groups.podgroup(group_key) if group_key else None
        self._warn_annotations(pod, group)
        if not group_key:
            return SUCCESS
        if group is None:
            return Status.unschedulable(missing_message(pod.membership, pod.namespace))
        refusal = self._refusal(pod, group)
        if refusal is not None:
            return refusal
        manager, cache = self.manager, self.handle.cache
        if group_key in manager.holds and not cache.claimed_node(pod.key):
            manager.holds.take(pod, lambda node: self._fits_on(pod, node))
        counts = manager.counts(group_key)
        waiting = self._waiting(pod, group, counts)
        if waiting is not None:
            return waiting
        candidates = sorted(
            (p for p in counts.pending if p.key != pod.key and self._eligible(p)),
            key=self.sort_key,
        )
        state.write(GANG_ADMISSION, GangAdmission(group_key, tuple(candidates)))
        return SUCCESS

    def admit_gang(self, state: CycleState, pod: Pod, request: GangAdmission) -> Status:
        """The gang's admission, asked for by :meth:`pre_filter` and run by the core right
        after it: the manager says which members, domains and subgroups, the core places
        them; the gang preempts (or first waits for a scale-up), reserves or is frozen when
        it does not fit."""
        group = self.handle.groups.podgroup(request.group_key)
        if group is None:  # not possible under the lock PreFilter ran under
            return Status.unschedulable(missing_message(pod.membership, pod.namespace))
        candidates = list(request.candidates)
        preemption = self.preemption if self._may_preempt(pod, candidates) \
            and not self._scale_up_first(group) else None
        why = self._admit(pod, group, candidates, self.manager.counts(group.key), preemption)
        if why:
            return Status.unschedulable(f'PodGroup "{group.key}": {why}')
        self.handle.activator.activate(p.key for p in candidates)
        return SUCCESS

    def _admit(self, pod: Pod, group: PodGroup, candidates: list[Pod], counts: GangCounts,
               preemption: Preemption | None) -> str:
        """The gang's admission, from its reservation's room when it has one; a gang that
        does not fit (and preempts nothing) reserves room if it is first in line."""
        manager, reservations = self.manager, self.reservations
        reservations.lend_own(group.key)
        if self.scale_up_holds is not None:
            self.scale_up_holds.lend(group.key)
        why = manager.try_admit(pod, group, candidates, counts, preemption)
        if not why:
            reservations.release(group.key, "placed")
            reservations.forget(group.key)
            self._end_hold(group.key, "")
            return ""
        if self.scale_up_holds is not None:  # its room is the members' claims once it preempted
            if manager.state(group.key).preempting:
                self._end_hold(group.key, "")
            else:
                self.scale_up_holds.restore(group.key)
        members = manager.missing(pod, group, candidates, counts)
        if why.startswith(WAITING_FOR_MEMBERS) or manager.state(group.key).preempting \
                or isinstance(members, str):
            reservations.restore(group.key)
            return why
        held = reservations.consider(group, members)
        why = f"{why}; reserved: {held}" if held else why
        scale = self._scale_up(group, members)
        return f"{why}; {scale}" if scale else why

    def _scale_up(self, group: PodGroup, members: list[Pod]) -> str:
        """Ask the autoscaler for everything the gang is missing, in one request."""
        if self.scale_ups is None or not members:
            return ""
        said, asked = self.scale_ups.consider(group, members, self.handle.cache.nodes(),
                                              self.handle.clock.now(), self._wait_for(group))
        if asked is not None:
            if self.scale_up_holds is not None:
                self.scale_up_holds.asked(group, asked.name, self.handle.cache.node_names())
            self.handle.status.group_event(group, "Normal", "ScaleUpRequested",
                                           asked.describe())
            self.handle.status.group_changed(group.key)
        return said

    def _reservation_complete(self, group_key: str) -> None:
        """Everything the gang needs is held: it is tried at once."""
        self.manager.thaw(group_key)
        self.handle.activator.activate(
            p.key for p in self.handle.cache.group_pods(group_key) if not p.node_name)

    def _warn_annotations(self, pod: Pod, group: PodGroup | None) -> None:
        """A malformed expected runtime counts as unknown; the owner hears why, once."""
        status = self.handle.status
        if pod.runtime_error and self._first_warning(pod.key, pod.runtime_error):
            status.pod_event(pod, "Warning", "InvalidAnnotation", pod.runtime_error)
        if group is not None and group.warnings:
            message = "; ".join(group.warnings)
            if self._first_warning(f"group {group.key}", message):
                status.group_event(group, "Warning", "InvalidAnnotation", message)

    def _first_warning(self, about: str, message: str) -> bool:
        """Whether ``message`` is new for ``about`` (then remembered). Locked: read-only RPCs
        run PreFilter on their views beside the loop, and the LRU is not thread-safe."""
        with self._warned_lock:
            if self._warned.get(about) == message:
                return False
            self._warned[about] = message
            return True

    def _refusal(self, pod: Pod, group: PodGroup) -> Status | None:
        """Why ``pod`` may not be a member of ``group`` at all (None: it may)."""
        if not group.valid:
            return Status.unresolvable(f'PodGroup "{group.key}" is invalid: '
                                       + "; ".join(group.errors))
        disagreement = labelonly.disagreement(pod, group)
        if disagreement:
            return Status.unschedulable(f'PodGroup "{group.key}": {disagreement}')
        cache = self.handle.cache
        occupant = occupied_by(group, cache.group_pods(group.key), lambda p: bool(
            p.node_name or cache.assumed_node(p.key) or cache.claimed_node(p.key)))
        if occupant and _uid(pod.gang_owner) != _uid(occupant):
            return Status.unresolvable(
                f'PodGroup "{group.key}" is occupied by {occupant}; this pod belongs '
                f"to {pod.gang_owner or 'no controller'}, so it may not join the group")
        return None

    def _waiting(self, pod: Pod, group: PodGroup, counts: GangCounts) -> Status | None:
        """SUCCESS when the gang needs no admission (complete, reserved, or the pod's room
        is claimed); a wait for victims or a freeze; None when admission must run."""
        manager = self.manager
        victims = manager.victims_left(group.key)
        if victims:
            return Status.unschedulable(
                f'PodGroup "{group.key}": waiting for {victims} pod(s) it preempted to '
                "terminate; its members hold the room they free")
        if manager.enough(group, RESERVED, pod):
            return SUCCESS  # the gang (and the pod's subgroup) is complete or fully reserved
        if self.handle.cache.claimed_node(pod.key):
            return SUCCESS
        frozen = manager.frozen(group.key)
        if frozen is None:
            return None
        # An absolute time, so the message (and the pod condition) stays the same on every
        # retry instead of counting down.
        return Status.unschedulable(
            f'PodGroup "{group.key}" is frozen until '
            f"{format_rfc3339(manager.frozen_until(group.key))} after a failed attempt: "
            f"{frozen[1]}")

    def _may_preempt(self, pod: Pod, candidates: list[Pod]) -> bool:
        """The gang preempts as one, when the profile preempts and no member says Never."""
        return self.handle.runner.preemption_enabled() and not any(
            p.preemption_policy == NEVER for p in (pod, *candidates))

    def _fits_on(self, pod: Pod, node_name: str) -> bool:
        info = self.handle.cache.node(node_name)
        return info is not None and self.handle.runner.filter_node(pod, info, self.name).ok

    def _eligible(self, pod: Pod) -> bool:
        return not pod.gated and not pod.deleting and not pod.parse_error

    # -- what-if -------------------------------------------------------------------------
    def trial(self, group: PodGroup, members: Sequence[Pod], *, preempt: bool) -> GangTrial:
        """The gang's admission as PreFilter would run it, then (with ``preempt``) the
        victim search its preemption would run; every claim is dropped and the gang's state
        forgotten before this returns, and nothing is evicted, frozen or announced."""
        if not members:
            return GangTrial(False, reason="no member pods")
        try:
            with self.handle.cache.transaction() as tx:  # discarded: every claim goes
                self.reservations.pass_by(tx, members[0])  # as its PreFilter would lend it
                return self._trial(group, list(members), preempt)
        finally:
            self.manager.forget_group(group.key)

    def _trial(self, group: PodGroup, members: list[Pod], preempt: bool) -> GangTrial:
        """The body of :meth:`trial`, in its transaction."""
        manager, cache = self.manager, self.handle.cache
        first, rest = members[0], members[1:]
        placed, why = manager.trial(first, group, rest)
        if not why:
            return self._trial_result(group, placed)
        if not placed or not (preempt and self._may_preempt(first, rest)):
            return GangTrial(False, reason=why)

        def place() -> str:
            return manager.retry_placement(group, placed)

        victims, reclaim = self.preemption.search_gang(group, placed, place)
        if victims is None:
            return GangTrial(False, reason=why)
        with cache.transaction() as tx:
            tx.evict(victims.pods)
            if place():
                return GangTrial(False, reason=why)
            result = self._trial_result(group, placed)
        return dataclasses.replace(result, victims=victims.pods, reclaim=reclaim, reason=why)

    def scale_up_answer(self, members: Sequence[Pod]) -> tuple[bool, str]:
        if self.scale_ups is None:
            return False, ""
        why_not = no_shape_holds(members, self.handle.cache.nodes())
        return not why_not, why_not

    def reservation_preview(self, group: PodGroup, members: Sequence[Pod]) -> GangTrial:
        if not members:
            return GangTrial(False)
        manager = self.manager
        first, rest = members[0], list(members[1:])
        try:
            missing = manager.missing(first, group, rest, manager.counts(group.key))
            if isinstance(missing, str) or not missing:
                return GangTrial(False, reason=missing if isinstance(missing, str) else "")
            first_in_line, ahead, planned = self.reservations.preview(group, missing)
        finally:
            manager.forget_group(group.key)
        if planned is None:
            return GangTrial(False, ahead=ahead)
        estimate = planned.estimate
        return GangTrial(False, would_reserve=first_in_line, ahead=ahead,
                         reserve_nodes=tuple(sorted(planned.targets)),
                         estimated_start=0.0 if estimate == UNKNOWN else estimate)

    def _trial_result(self, group: PodGroup, placed: list[Pod]) -> GangTrial:
        cache = self.handle.cache
        domain = self.manager.domain_of(group.key)
        return GangTrial(True, {m.key: cache.claimed_node(m.key) for m in placed},
                         str(domain) if domain is not None else "")

    # -- Filter --------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        """A member of a gang placed by topology stays inside the gang's domain (and its
        subgroup's)."""
        for whose, domain in self._domains(pod):
            if node.node is not None and node.node.labels.get(domain.key) != domain.value:
                return Status.unschedulable(f"node(s) outside the {whose} topology domain "
                                            f"{domain}", plugin=self.name)
        return SUCCESS

    def sign(self, pod: Pod) -> Hashable | None:
        """Filter reads the node's labels and the gang's (and subgroup's) domain only."""
        return tuple((d.key, d.value) for _, d in self._domains(pod))

    def _domains(self, pod: Pod) -> list[tuple[str, Domain]]:
        if not pod.group_key:
            return []
        gang = self.manager.domain_of(pod.group_key)
        sub = self.manager.subgroup_domains.of(self.handle.groups.podgroup(pod.group_key), pod)
        return [(whose, d) for whose, d in (("gang's", gang), ("subgroup's", sub))
                if d is not None]

    # -- PostFilter ----------------------------------------------------------------------
    def post_filter(self, state: CycleState, pod: Pod, filtered: Mapping[str, Status]) -> Status:
        """A member found no node: the gang's attempt fails as a whole, now."""
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        if group is None:
            return Status(Code.UNSCHEDULABLE)
        if self.manager.enough(group, frozenset((PLACED,)), pod):
            return Status(Code.UNSCHEDULABLE)  # a surplus member: the gang is fine
        self.manager.reject(
            group.key, f"member {pod.name} could not be placed", freeze=True
        )
        return Status.unschedulable(f'rejected the waiting members of PodGroup "{group.key}"')

    # -- Reserve -------------------------------------------------------------------------
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """The scheduler's assume holds the room; claims are already in place."""
        self.reservations.placed(pod, node_name)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """A member failed before its gang was released: the whole attempt is undone."""
        group_key = pod.group_key
        if not group_key or state.read(PERMITTED):
            return  # released members that fail to bind are retried on their own
        gang = self.manager.gangs.get(group_key)
        if gang is None or not gang.deadline:
            return  # no attempt in progress: it was already rejected (or released) as a whole
        group = self.handle.groups.podgroup(group_key)
        if group is not None and self.manager.enough(group, frozenset((PLACED,)), pod):
            return
        failure = state.read(FAILURE) or CycleFailure(f"member {pod.name} was rejected")
        # A member that went away says nothing of whether the gang fits: no freeze.
        self.manager.reject(group_key, failure.reason, freeze=not failure.withdrawn,
                            timed_out=failure.timed_out)

    def reserved_room(self) -> Mapping[str, tuple[str, Mapping[str, int]]]:
        """group key -> (queue, room held): what the queues count toward their shares."""
        return self.reservations.by_group()

    def give_back(self, group_key: str, reason: str) -> None:
        """Another plugin (queues) takes back the room the gang claimed: its attempt ends,
        without freezing it."""
        self.manager.reject(group_key, reason, freeze=False)

    # -- Permit --------------------------------------------------------------------------
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        group_key = pod.group_key
        if not group_key:
            return SUCCESS, 0.0
        group = self.handle.groups.podgroup(group_key)
        if group is None:
            return Status.unschedulable(f'PodGroup "{group_key}" was deleted'), 0.0
        counts = self.manager.counts(group_key, exclude=pod.key)
        if self.manager.enough(group, READY, pod, with_pod=True):
            self.manager.release_gang(group_key, counts.placed + 1)
            return SUCCESS, 0.0
        gang = self.manager.state(group_key)
        self.manager.start_attempt(gang, group)
        gang.waited.add(pod.key)
        ready = counts.placed + counts.waiting + 1
        self.handle.status.group_changed(group_key)
        why = (f"waiting for {group.min_member - ready} more members of PodGroup "
               f"{group_key}, {ready}/{group.min_member} ready") if group.subgroups is None \
            else f"waiting for the subgroups of PodGroup {group_key} to be whole ({ready} ready)"
        return Status(Code.WAIT, (why,)), max(0.0, gang.deadline - self.handle.clock.now())

    # -- cluster events ------------------------------------------------------------------
    def held_by_gates(self, pod: Pod, status: Status) -> bool:
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        if group is None or status.plugin != self.name or \
                not status.message.startswith(f'PodGroup "{group.key}": {WAITING_FOR_MEMBERS}'):
            return False
        counts = self.manager.counts(group.key)
        gated = gated_members(self.handle.cache.group_pods(group.key))
        return counts.members < group.min_member <= counts.members + gated

    def capacity_freed(self, exclude: str = "") -> list[str]:
        self.reservations.settle()  # room that freed on reserved nodes is held first
        for group_key in list(self.awaiting_admission):  # their minResources may fit now
            self.handle.status.group_changed(group_key)
        return self.manager.unfreeze_all(exclude)

    def group_changed(self, group: PodGroup) -> list[str]:
        """Elastic size: minMember (or a subgroup's) may have dropped to what is already
        placed and waiting: release now; a resized gang that was frozen is tried again at
        once (a raised minimum evicts nothing: it only changes what a waiting gang needs)."""
        shape = (group.min_member, group.subgroups)
        if self.shapes.get(group.key, shape) != shape:
            self.manager.thaw(group.key)
            self.reservations.forget(group.key)
        self.shapes[group.key] = shape
        counts = self.manager.counts(group.key)
        if counts.waiting and self.manager.enough(group, READY):
            self.manager.release_gang(group.key, counts.placed)
        return [group.key]

    def group_deleted(self, group_key: str) -> list[str]:
        self.awaiting_admission.discard(group_key)
        self.admitted.discard(group_key)
        self.shapes.pop(group_key, None)
        if self.scale_ups is not None:
            self.scale_ups.forget(group_key)
        if self.scale_up_holds is not None:
            self.scale_up_holds.forget(group_key)
        self.reservations.release(group_key, "deleted")
        self.reservations.forget(group_key)
        self.manager.reject(group_key, f'PodGroup "{group_key}" was deleted', freeze=False)
        self.manager.forget_group(group_key)
        return [group_key]

    def node_deleted(self, node_name: str, stranded: list[Pod]) -> list[str]:
        """Claims or waiting members on a vanished node void their gang's attempt."""
        cache = self.handle.cache
        groups = {p.group_key for p in stranded if p.group_key and cache.pod(p.key) is not None}
        for waiting in self.handle.waiting_pods:
            if waiting.node_name == node_name and waiting.pod.group_key:
                groups.add(waiting.pod.group_key)
        for group_key in groups:
            self.manager.reject(group_key, f"node {node_name} was deleted", freeze=False)
        return sorted(groups)

    def pod_lost(self, pod: Pod) -> list[str]:
        """Hold a running gang's lost member's room for its replacement (not when this
        scheduler evicted it: that room is the preemptor's)."""
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        if group is None or pod.phase == "Succeeded" or self.handle.preemption.evicted(pod):
            return []
        held = self.manager.holds.hold(pod, group)
        if self.manager.holds.drop_if_gone(group.key, pod.key) or held is None:
            return []
        self.handle.status.group_changed(group.key)
        return [group.key]

    def housekeeping(self, now: float) -> list[str]:
        released = self.manager.holds.expire(now)
        for group_key, held in released:
            group = self.handle.groups.podgroup(group_key)
            if group is not None:
                self.handle.status.group_event(
                    group, "Normal", "HoldReleased",
                    f"no replacement for {held.lost} arrived in time; its room on node "
                    f"{held.node} is free again")
        if released:
            self.handle.activator.capacity_freed()
        expired = [key for key, _ in self.manager.expire(now)]
        expired += self._expire_reservations(now)
        expired += self._provisioning(now)
        thawed = self.manager.expire_frozen()
        for key in thawed:
            self.handle.status.group_changed(key)
        metrics = self.handle.metrics
        waiting = {w.pod.group_key for w in self.handle.waiting_pods if w.pod.group_key}
        metrics.gangs_waiting.set(float(len(waiting)))
        metrics.gangs_frozen.set(float(len(self.manager.frozen_keys())))
        return expired + thawed

    def _wait_for(self, group: PodGroup) -> float:
        """How long the gang waits for a scale-up before it may preempt."""
        if self.scale_ups is None:
            return 0.0
        queue = self.handle.gangs.queue(group.queue)
        return scale_up_wait(group.scale_up_wait_seconds,
                             queue.scale_up_wait_seconds if queue is not None else None,
                             self.scale_ups.args.preemption_delay_seconds)

    def _scale_up_first(self, group: PodGroup) -> bool:
        return self.scale_ups is not None and self.scale_ups.holds_back_preemption(
            group.key, self._wait_for(group), self.handle.clock.now())

    def _provisioning(self, now: float) -> list[str]:
        """Nodes gangs are placed on are kept from scale-down; requests that changed
        state are told, and a Provisioned gang is tried at once."""
        if self.guard is not None:
            self.guard.update(self._gang_nodes())
        if self.scale_ups is None:
            return []
        self.scale_ups.poll()
        for group_key in self.scale_ups.unanswered():
            group = self.handle.groups.podgroup(group_key)
            if group is not None and self.manager.enough(group, READY):
                self.scale_ups.placed(group_key, now)
        keys = self.scale_ups.due(now)
        for group_key in keys:  # may preempt, or ask again, now
            self.manager.thaw(group_key)
        for group_key, asked in self.scale_ups.changes(now):
            group = self.handle.groups.podgroup(group_key)
            if group is None:
                continue
            state = asked.state.state
            if state != PENDING:
                self.handle.status.group_event(
                    group, "Warning" if state in ENDED else "Normal", f"ScaleUp{state}",
                    asked.describe())
            self.handle.status.group_changed(group_key)
            if state == PROVISIONED:
                self.manager.thaw(group_key)
            keys.append(group_key)
        self._expire_holds(now)
        self._hold_provisioned()
        return keys

    # -- the room a provisioned scale-up added (provisioning.hold) ----------------------------
    def _provisioned(self, group_key: str, request: str) -> bool:
        asked = self.scale_ups.of(group_key) if self.scale_ups is not None else None
        return asked is not None and asked.name == request and asked.state.state == PROVISIONED

    def _hold_provisioned(self) -> None:
        """Claim, for each gang whose request is Provisioned, the room its missing members
        would take (the new nodes first); a complete hold lets the gang try at once."""
        if self.scale_up_holds is None:
            return
        cache = self.handle.cache
        for group_key, nodes in self.scale_up_holds.due(self._provisioned):
            group = self.handle.groups.podgroup(group_key)
            members = self._missing_members(group) if group is not None else []
            if group is None or not members:
                continue
            self.scale_up_holds.lend(group_key)  # its own held room is planned again too
            with cache.transaction() as tx:  # discarded: the plan claims nothing
                room, placed = plan_room(members, nodes, partial(self._first_fit, tx))
            complete = placed == len(members)
            if self.scale_up_holds.hold(group_key, room, complete,
                                        max(m.priority for m in members),
                                        self.handle.clock.now()):
                self._announce_hold(group, len(members))
            self.handle.status.group_changed(group_key)
            if complete:
                self._reservation_complete(group_key)

    def _announce_hold(self, group: PodGroup, missing: int) -> None:
        hold = self.scale_up_holds.of(group.key) if self.scale_up_holds is not None else None
        if hold is not None:
            self.handle.status.group_event(
                group, "Normal", "ScaleUpHeld",
                f"the room of its provisioned request {hold.request} is held for its "
                f"{missing} missing member(s) until {format_rfc3339(hold.until)}: "
                f"{hold.describe()}")

    def _missing_members(self, group: PodGroup) -> list[Pod]:
        """The members the gang's admission would place now (none while it waits for
        members to be created)."""
        counts = self.manager.counts(group.key)
        pending = sorted((p for p in counts.pending if self._eligible(p)), key=self.sort_key)
        if not pending:
            return []
        missing = self.manager.missing(pending[0], group, pending[1:], counts)
        return missing if isinstance(missing, list) else []

    def _first_fit(self, tx: Transaction, member: Pod, nodes: Sequence[str]) -> str:
        """The first of ``nodes`` that ``member`` passes every filter on, claimed in ``tx``
        (so that the next member counts it)."""
        for name in nodes:
            if self._fits_on(member, name):
                tx.claim(dataclasses.replace(member, name=f"{member.name}~holding"), name)
                return name
        return ""

    def _end_hold(self, group_key: str, why: str) -> None:
        """Let the gang's held room go; ``why`` (not placed) is told and frees the room."""
        ended = self.scale_up_holds.release(group_key) if self.scale_up_holds is not None else None
        group = self.handle.groups.podgroup(group_key)
        if ended is None or not why:
            return
        if group is not None:
            self.handle.status.group_event(group, "Normal", "ScaleUpHoldEnded",
                                           f"{why}; its room ({ended.describe()}) is free again")
            self.handle.status.group_changed(group_key)
        self.handle.activator.capacity_freed()

    def _expire_holds(self, now: float) -> None:
        if self.scale_up_holds is None:
            return
        for group_key, hold in list(self.scale_up_holds.held().items()):
            if hold.until <= now:
                self._end_hold(group_key, f"the hold ran out after "
                               f"{self.scale_up_holds.seconds:g}s without the gang placed")
            elif not self._provisioned(group_key, hold.request):
                self._end_hold(group_key, f"its request {hold.request} is no longer "
                               "Provisioned")

    def _gang_nodes(self) -> set[str]:
        """Nodes holding a gang's claims, assumed or waiting members, or reservation."""
        cache = self.handle.cache
        nodes = {w.node_name for w in self.handle.waiting_pods}
        for group_key in cache.group_keys():
            for pod in cache.group_pods(group_key):
                nodes.update((cache.claimed_node(pod.key), cache.assumed_node(pod.key)))
        for reservation in self.reservations:
            nodes.update(reservation.targets)
        if self.scale_up_holds is not None:
            for hold in self.scale_up_holds.held().values():
                nodes.update(hold.room)
        nodes.discard("")
        return nodes

    def _expire_reservations(self, now: float) -> list[str]:
        """Reservations past maxReservationSeconds let their room go; the gang waits
        without one."""
        self.reservations.settle(refresh=True)
        keys = []
        for reservation in self.reservations.expire(now):
            group = self.handle.groups.podgroup(reservation.group_key)
            if group is not None:
                self.handle.status.group_event(
                    group, "Normal", "ReservationExpired",
                    f"the reservation ran out after {round(now - reservation.since)}s "
                    f"({reservation.describe()}); its room is free again and the gang waits "
                    "without one")
            keys.append(reservation.group_key)
        return keys

    # -- status ----------------------------------------------------------------------------
    def status_of(self, group_key: str) -> StatusInput | None:
        """What the status of ``group_key`` is made of (None if the group is gone). Call
        under the cache lock (the status writer's caller takes it)."""
        group = self.handle.groups.podgroup(group_key)
        members = self.handle.cache.group_pods(group_key)
        if group is None or not scheduled_here(
                group, (p.scheduler_name for p in members), self.handle.scheduler_names):
            return None
        if not group.valid:  # said on the group too: a producer waiting on its status
            why = f'PodGroup "{group_key}" is invalid: ' + "; ".join(group.errors)
            return StatusInput(group, {"phase": pg.PHASE_PENDING, "conditions": [{
                "type": "Unschedulable", "status": "True", "reason": "InvalidSpec",
                "message": why}]}, fits=False, why_not=why)
        manager = self.manager
        frozen = manager.frozen(group_key)
        view = GroupView(
            group=group,
            members=members,
            finished=dict(self.handle.groups.finished_members(group_key)),
            counts=manager.counts(group_key),
            gang=manager.gangs.get(group_key),
            frozen_until=manager.frozen_until(group_key),
            frozen_reason=frozen[1] if frozen is not None else "",
            timeout=manager.timeout_for(group),
            holds=manager.holds.of(group_key),
            short=manager.shortfall(group),
            reservation=self.reservations.of(group_key),
            reservation_expired=group_key in self.reservations.expired,
            scale_up=self.scale_ups.report(group_key) if self.scale_ups else (None, None),
        )
        status = build_status(view)
        api = api_for(group)
        if api is None or not api.reports_admission or group.phase in volcano.ADMITTED:
            return StatusInput(group, status)
        fits, why_not = room_for(group.min_resources, self.handle.cache.nodes(),
                                 self._promised(group_key))
        if not fits:
            self.awaiting_admission.add(group_key)
        else:
            self.awaiting_admission.discard(group_key)
            self.admitted.add(group_key)
        return StatusInput(group, status, fits, why_not)

    def summary(self, group_key: str) -> GangSummary | None:
        if self.handle.groups.podgroup(group_key) is None:
            return None
        manager = self.manager
        counts = manager.counts(group_key)
        made_of = self.status_of(group_key)
        gang = manager.gangs.get(group_key)
        summary = GangSummary(counts.placed, counts.waiting, counts.claimed,
                              made_of.status["phase"] if made_of else "",
                              manager.frozen_until(group_key))
        if gang is None:
            return summary
        return dataclasses.replace(
            summary, attempt_deadline=gang.deadline, last_failure=gang.last_failure,
            attempts=gang.attempts, timeouts=gang.timeouts, rejections=gang.rejections)

    def _promised(self, group_key: str) -> dict[str, int]:
        """minResources of the other admitted groups that have no member placed yet: room
        their producers were told is theirs before their pods exist."""
        promised: dict[str, int] = {}
        for key, group in self.handle.groups.podgroups().items():
            admitted = group.phase == volcano.INQUEUE or key in self.admitted
            if key != group_key and admitted and group.min_resources \
                    and not self.manager.counts(key).placed:
                add_into(promised, group.min_resources)
        return promised
