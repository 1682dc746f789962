"""Watch events -> cache and queue updates, and the wake-ups they imply.

Each handler moves parked pods back only when the event could help them: a node added or
given more room, a pod gone (its room is free), a PodGroup created or changed (its own
members), a sibling created (its own gang).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Generic, TypeVar

from coscheduling.api.dra import ResourceClaim
from coscheduling.api.namespaces import Namespace
from coscheduling.api.nodes import Node, node_changes_could_help
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod, unreadable_error
from coscheduling.api.queues import Queue
from coscheduling.groups import labelonly
from coscheduling.groups.table import KindTable
from coscheduling.plugins.interpodaffinity import InterPodAffinity
from coscheduling.plugins.proportion import Proportion

if TYPE_CHECKING:
    from coscheduling.core.scheduler import Scheduler

R = TypeVar("R")
V = TypeVar("V")


class PodEvents:
    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler
        self.names = frozenset(scheduler.config.scheduler_names)

    def _ours_pending(self, pod: Pod) -> bool:
        return not pod.node_name and pod.scheduler_name in self.names and not pod.terminal

    def on_add(self, pod: Pod) -> None:
        s = self.s
        if pod.group_key:
            with s.cache.lock:
                labelonly.observe(pod, s.listers.groups)
            s.notices.group_changed(pod.group_key)
            if pod.membership.ignored and self._ours_pending(pod) and s.reporter is not None:
                s.reporter.event(pod, "Warning", "GroupMarkerConflict", (
                    f"the pod carries more than one group marker; it belongs to "
                    f"{pod.membership.marker} (the highest in precedence); ignored: "
                    + "; ".join(pod.membership.ignored)))
        if pod.node_name:
            s.cache.set_pod(pod)
            self._wake_affinity(pod)
            if pod.group_key:
                self._wake_parked_members(pod.group_key)
            return
        if not self._ours_pending(pod):
            return
        with s.cache.lock:
            s.cache.set_pod(pod)
        if pod.deleting:
            return
        if not pod.gated:
            s.enqueue(pod)
        if pod.group_key and self._enough_members(pod.group_key):
            s.wake_group(pod.group_key)

    def _wake_parked_members(self, group_key: str) -> None:
        """A bound member counts toward minMember too. After a restart the pods list may
        bring a pending member before its bound siblings: PreEnqueue parks it, and only a
        sibling's arrival can move it, so a bound sibling's arrival must as well (or a gang
        a crash left partly bound would wait forever). Only the gang's own pending members
        are looked at: a restart delivers every bound pod this way."""
        s = self.s
        queued = (s.queue.get(m.key) for m in s.cache.group_pods(group_key) if not m.node_name)
        if any(q is not None and q.held for q in queued) and self._enough_members(group_key):
            s.wake_group(group_key)

    def _enough_members(self, group_key: str) -> bool:
        """A sibling's arrival helps parked members only once minMember members exist;
        before that, retrying them on every arrival costs O(n^2) failed attempts. Pods held
        by scheduling gates count here (not in the gang): once every pod exists, the parked
        members are retried and say how many are held by gates, instead of an older count.
        Pods waiting for their template's claim do not: that wait ends by itself."""
        group = self.s.listers.podgroup(group_key)
        if group is None:
            return False
        members = self.s.cache.group_pods(group_key)
        return sum(1 for p in members if not p.awaiting_claims) >= group.min_member

    def on_update(self, old: Pod, new: Pod) -> None:
        s = self.s
        if new.group_key != old.group_key and new.group_key:  # relabelled into a group
            with s.cache.lock:
                labelonly.observe(new, s.listers.groups)
        if new.group_key and (old.phase != new.phase or old.node_name != new.node_name):
            s.notices.group_changed(new.group_key)
        if new.terminal or (new.deleting and not new.node_name):
            self.on_delete(new)
            return
        if new.node_name:
            with s.cache.lock:
                s.cache.set_pod(new)
                s.volumes.forget(new.key)  # bound (through gRPC too): its volumes are known
                if unreadable_error(old) and not unreadable_error(new):
                    s.activator.capacity_freed_locked()  # its node takes pods again
            s.queue.delete(new.key)
            if not old.node_name:
                self._wake_affinity(new)
            return
        if not self._ours_pending(new):
            return
        with s.cache.lock:
            s.cache.set_pod(new)
        if new.deleting:
            return
        if new.gated:
            s.queue.delete(new.key)
        elif s.cache.is_assumed(new.key) or s.waiting_pods.get(new.key) is not None:
            return  # in a binding or waiting cycle: not queued
        else:
            s.enqueue(new)
            if old.gated and new.group_key and self._enough_members(new.group_key):
                s.wake_group(new.group_key)

    def _wake_affinity(self, placed: Pod) -> None:
        """A pod was bound: pods whose required pod affinity it satisfies may fit now."""
        for plugin in self.s.framework.filter_plugins:
            if isinstance(plugin, InterPodAffinity) and plugin.waiters:
                with self.s.cache.lock:
                    keys = plugin.waiters_matching(placed)
                if keys:
                    self.s.queue.move_keys(keys)

    def on_delete(self, pod: Pod) -> None:
        s = self.s
        if pod.group_key:
            s.notices.group_changed(pod.group_key)
        with s.cache.lock:
            held_room = s.cache.is_assumed(pod.key)
            known = s.cache.remove_pod(pod.key)
            s.queue.delete(pod.key)
            s.withdraw(pod, f"member {pod.name} was deleted while waiting")
            if s.reporter is not None:
                s.reporter.forget(pod)
            if known is not None and known.node_name:
                s.ledger.gone(known)
                lost = pod if pod.node_name else known
                groups = [key for plugin in s.event_plugins for key in plugin.pod_lost(lost)]
                s.activator.move_groups(groups)
            if known is not None and (known.node_name or held_room):
                s.activator.capacity_freed_locked()
            elif known is not None and known.group_key:
                s.activator.move_groups([known.group_key])
            if pod.group_key and labelonly.forget_if_empty(
                    pod.group_key, len(s.cache.group_pods(pod.group_key)), s.listers.groups):
                for plugin in s.event_plugins:
                    plugin.group_deleted(pod.group_key)


class NodeEvents:
    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler

    def on_add(self, node: Node) -> None:
        with self.s.cache.lock:
            self.s.cache.set_node(node)
            self.s.activator.capacity_freed_locked()

    def on_update(self, old: Node, new: Node) -> None:
        with self.s.cache.lock:
            self.s.cache.set_node(new)
            if node_changes_could_help(old, new):
                self.s.activator.capacity_freed_locked()

    def on_delete(self, node: Node) -> None:
        s = self.s
        with s.cache.lock:
            stranded = s.cache.remove_node(node.name)
            keys: list[str] = []
            for plugin in s.event_plugins:
                keys += plugin.node_deleted(node.name, stranded)
        s.activator.move_groups(keys)


class NamespaceEvents:
    """Namespace labels, for pod affinity terms with a ``namespaceSelector``."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler

    def on_add(self, namespace: Namespace) -> None:
        with self.s.cache.lock:
            self.s.cache.namespace_labels[namespace.name] = namespace.labels

    def on_update(self, old: Namespace, new: Namespace) -> None:
        self.on_add(new)
        if old.labels != new.labels:
            self.s.activator.capacity_freed()  # affinity terms may now match other pods

    def on_delete(self, namespace: Namespace) -> None:
        with self.s.cache.lock:
            self.s.cache.namespace_labels.pop(namespace.name, None)


class StoreEvents(Generic[R, V]):
    """Records the scheduler only looks up, kept by key in one of its dicts: PriorityClass
    values (a gang's priority), PodDisruptionBudgets (which preemption respects)."""

    def __init__(self, scheduler: Scheduler, store: dict[str, V], key: Callable[[R], str],
                 value: Callable[[R], V]) -> None:
        self.s = scheduler
        self.store = store
        self.key = key
        self.value = value

    def on_add(self, record: R) -> None:
        with self.s.cache.lock:
            self.store[self.key(record)] = self.value(record)

    def on_update(self, old: R, new: R) -> None:
        self.on_add(new)

    def on_delete(self, record: R) -> None:
        with self.s.cache.lock:
            self.store.pop(self.key(record), None)


class VolumeEvents(StoreEvents[R, R]):
    """Claims, volumes, classes or CSINodes into the volume store, waking PreBind's waits.
    A change may let a parked pod fit (a claim appears or binds, a volume appears), so
    parked pods retry; records leave resourceVersion out of comparisons."""

    def __init__(self, scheduler: Scheduler, store: dict[str, R],
                 key: Callable[[R], str]) -> None:
        super().__init__(scheduler, store, key, lambda record: record)

    def _changed(self, apply: Callable[[], None], wake: bool) -> None:
        with self.s.cache.lock:
            self.s.volumes.update(apply)
            if wake:
                self.s.activator.capacity_freed_locked()

    def on_add(self, record: R) -> None:
        self._changed(lambda: StoreEvents.on_add(self, record), wake=True)

    def on_update(self, old: R, new: R) -> None:
        self._changed(lambda: StoreEvents.on_add(self, new), wake=old != new)

    def on_delete(self, record: R) -> None:
        self._changed(lambda: StoreEvents.on_delete(self, record), wake=False)


class DeviceEvents(StoreEvents[R, R]):
    """DeviceClasses, ResourceSlices or ResourceClaims into the device store. New devices,
    a claim created from a template, or devices given back may let a parked pod fit; a
    claim whose allocation the watch now shows drops this scheduler's assumption of it."""

    def __init__(self, scheduler: Scheduler, store: dict[str, R],
                 key: Callable[[R], str]) -> None:
        super().__init__(scheduler, store, key, lambda record: record)

    def _changed(self, apply: Callable[[], None], record: object, wake: bool) -> None:
        claim = record if isinstance(record, ResourceClaim) else None

        def change() -> None:
            apply()
            if claim is not None:
                self.s.devices.settle(claim)

        with self.s.cache.lock:
            self.s.devices.update(change, claim.key if claim is not None else "")
            if wake:
                self.s.activator.capacity_freed_locked()

    def _claim_changed(self, apply: Callable[[], None], claim: ResourceClaim,
                       frees: bool) -> None:
        """A claim concerns the pods that use it: they are woken, not every parked pod,
        unless devices were given back (deallocated, unreserved, deleted)."""
        self._changed(apply, claim, wake=frees)
        if not frees:
            with self.s.cache.lock:
                self.s.activator.activate(self._users(claim))

    def _users(self, claim: ResourceClaim) -> list[str]:
        """Pending pods that use ``claim``: the pod a template's claim was made for, or the
        queued pods that name it."""
        if claim.owner_name:
            return [f"{claim.namespace}/{claim.owner_name}"]
        return [pod.key for pod in self.s.queue.pending_pods()
                if pod.namespace == claim.namespace
                and any(name == claim.name for _, name, _ in pod.claim_sources)]

    def on_add(self, record: R) -> None:
        apply = partial(StoreEvents.on_add, self, record)
        if isinstance(record, ResourceClaim):
            self._claim_changed(apply, record, frees=False)
        else:
            self._changed(apply, record, wake=True)

    def on_update(self, old: R, new: R) -> None:
        apply = partial(StoreEvents.on_add, self, new)
        if isinstance(old, ResourceClaim) and isinstance(new, ResourceClaim):
            self._claim_changed(apply, new, frees=_gives_back(old, new))
        else:
            self._changed(apply, new, wake=old != new)

    def on_delete(self, record: R) -> None:
        self._changed(partial(StoreEvents.on_delete, self, record), record, wake=True)


def _gives_back(old: ResourceClaim, new: ResourceClaim) -> bool:
    """Whether a claim's change frees devices or room for others: deallocated, a pod no
    longer reserved, or being deleted."""
    return (old.allocation is not None and new.allocation is None) \
        or len(new.reserved_for) < len(old.reserved_for) or (new.deleting and not old.deleting)


class PodGroupEvents:
    """Group objects of one kind (``table`` is shared by every kind's handler): the record a
    gang uses is the best-ranked kind present under its key."""

    def __init__(self, scheduler: Scheduler, table: KindTable | None = None) -> None:
        self.s = scheduler
        self.table = table if table is not None else KindTable()

    def on_add(self, group: PodGroup) -> None:
        if self._use(group):
            self._changed(group)

    def on_update(self, old: PodGroup, new: PodGroup) -> None:
        if not self._use(new):
            return
        if _same_spec(old, new):
            # Status writes (ours included) come back as updates: keep the record, but do
            # not wake the group's pods, or every status write would retry a frozen gang.
            with self.s.cache.lock:
                if self.table.used(new.key) is new:
                    self.s.listers.groups[new.key] = new
            return
        self._changed(new)

    def _use(self, group: PodGroup) -> bool:
        """Whether ``group`` is now the record of its gang; a kind of lower rank under the
        same key is kept aside, with a Warning on it."""
        used = self.table.put(group)
        if used is group:
            return True
        if self.s.reporter is not None:
            self.s.reporter.group_event(
                group, "Warning", "GroupShadowed",
                f"pods naming {group.name!r} are scheduled as the {used.api_version} "
                f"PodGroup of that name; this {group.api_version} one is not used")
        return False

    def _changed(self, group: PodGroup) -> None:
        s = self.s
        with s.cache.lock:
            if self.table.used(group.key) is not group:
                return  # another kind's watch put a higher-ranked object there meanwhile
            s.listers.groups[group.key] = group
            keys: list[str] = []
            for plugin in s.event_plugins:
                keys += plugin.group_changed(group)
        s.notices.group_changed(group.key)
        s.activator.move_groups(keys or [group.key])

    def on_delete(self, group: PodGroup) -> None:
        used = self.table.remove(group)
        if used is not None:
            if self.s.listers.podgroup(group.key) is not used:
                self._changed(used)  # the kind that waited behind it takes over
            return
        s = self.s
        s.notices.group_changed(group.key)
        with s.cache.lock:
            s.listers.groups.pop(group.key, None)
            s.listers.finished.pop(group.key, None)
            keys: list[str] = []
            for plugin in s.event_plugins:
                keys += plugin.group_deleted(group.key)
        s.activator.move_groups(keys or [group.key])


class QueueEvents:
    """Queue records into the Proportion plugin; a queue that appears or changes may let
    the gangs waiting for it start."""

    def __init__(self, scheduler: Scheduler, proportion: Proportion) -> None:
        self.s = scheduler
        self.proportion = proportion

    def on_add(self, queue: Queue) -> None:
        with self.s.cache.lock:
            self.proportion.set_queue(queue)
            self.s.activator.capacity_freed_locked()

    def on_update(self, old: Queue, new: Queue) -> None:
        if (old.weight, old.capability, old.reclaimable, old.scale_up_wait_seconds,
                old.errors) == (new.weight, new.capability, new.reclaimable,
                                new.scale_up_wait_seconds, new.errors):
            return  # a status write (ours) coming back
        self.on_add(new)

    def on_delete(self, queue: Queue) -> None:
        with self.s.cache.lock:
            self.proportion.remove_queue(queue.name)
            self.s.activator.capacity_freed_locked()


class FinishedPodEvents:
    """Members of groups that Succeeded or Failed, for the PodGroup's counts.

    The main pod watch leaves terminal pods out (they hold no room); these come from two
    small watches of terminal pods that carry the group label, so counts survive a restart.
    """

    def __init__(self, scheduler: Scheduler) -> None:
        self.s = scheduler

    def on_add(self, pod: Pod) -> None:
        if pod.group_key:
            with self.s.cache.lock:
                self.s.listers.finished.setdefault(pod.group_key, {})[pod.key] = pod.phase
            self.s.notices.group_changed(pod.group_key)

    def on_update(self, old: Pod, new: Pod) -> None:
        self.on_add(new)

    def on_delete(self, pod: Pod) -> None:
        if not pod.group_key:
            return
        with self.s.cache.lock:
            members = self.s.listers.finished.get(pod.group_key)
            if members is not None:
                members.pop(pod.key, None)
                if not members:
                    del self.s.listers.finished[pod.group_key]
        self.s.notices.group_changed(pod.group_key)


def _same_spec(old: PodGroup, new: PodGroup) -> bool:
    return (old.min_member, old.min_resources, old.max_schedule_time, old.priority_class_name,
            old.queue, old.topology, old.errors) == (
                new.min_member, new.min_resources, new.max_schedule_time,
                new.priority_class_name, new.queue, new.topology, new.errors)
