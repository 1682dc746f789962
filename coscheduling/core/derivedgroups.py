"""Groups derived from owners, kept in the scheduler (see :mod:`coscheduling.groups.derive`).

Two things happen here. Pods: a pod for this scheduler that names no group is walked to its
workload through the informers' caches, and joins the workload's derived group (a pod whose
owner is not cached yet waits, and is looked at again when the owner arrives). Groups: for
every workload whose pods ask for this scheduler, the leader keeps the derived PodGroups
(ours, owned by the workload, so garbage-collected with it) in step with the workload, with
one server-side apply when what the workload means changes; a raised count is assumed into
the scheduler's record at once, before the workload's new pods can arrive, so that they
start together.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.membership import NO_GROUP, membership
from coscheduling.api.objectref import ObjectRef
from coscheduling.api.podgroups import PodGroup, gang_key, parse_podgroup
from coscheduling.api.pods import Pod
from coscheduling.cluster.client import ApiError, KubeClient, q
from coscheduling.cluster.informer import Handler, Informer
from coscheduling.cluster.reporter import Reporter
from coscheduling.groups.derive import (
    DERIVED,
    DERIVED_FROM_LABEL,
    KINDS,
    DerivedGroup,
    OwnerRef,
    Workload,
    WorkloadKind,
    derived_membership,
    kind_of,
    resolve,
    workload_key,
)
from coscheduling.groups.derive.overrides import derivation_disabled

log = logging.getLogger(__name__)

FIELD_MANAGER = "coscheduling-derived-groups"
PODGROUPS = f"/apis/{GROUP_API}/{GROUP_VERSION}"


def _owner_of_pod(pod: Pod) -> OwnerRef | None:
    """The pod's controller, from its record's ``Kind/name/uid`` and API version."""
    kind, _, rest = pod.owner.partition("/")
    name, _, uid = rest.partition("/")
    return OwnerRef(pod.owner_api_version, kind, name, uid) if kind and name else None


def asks_for(workload: Workload, kind: WorkloadKind, names: Collection[str]) -> bool:
    """Whether a workload's pods ask for this scheduler without naming a group of their
    own, and the workload has not opted out: only then is a group derived for it."""
    if derivation_disabled(workload.annotations) or not kind.gang(workload):
        return False
    for template in kind.templates(workload):
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        if spec.get("schedulerName") in names and membership(
                workload.namespace, meta.get("labels") or {}, meta.get("annotations") or {},
                spec) == NO_GROUP:
            return True
    return False


def group_object(workload: Workload, kind: WorkloadKind, group: DerivedGroup) -> dict[str, Any]:
    """The PodGroup of a derived group, owned by its workload."""
    owner = {"apiVersion": workload.api_version, "kind": workload.kind, "name": workload.name,
             "uid": workload.uid, "controller": True, "blockOwnerDeletion": False}
    return {"apiVersion": f"{GROUP_API}/{GROUP_VERSION}", "kind": "PodGroup",
            "metadata": {"name": group.name, "namespace": workload.namespace,
                         "labels": {DERIVED_FROM_LABEL: kind.kind.lower()},
                         "ownerReferences": [owner]},
            "spec": group.spec}


class DerivedGroups:
    """The walk's caches, the pods waiting for an owner, and the reconciler of groups."""

    def __init__(self, client: KubeClient, reporter: Reporter | None, names: Collection[str],
                 current: Callable[[str], PodGroup | None],
                 assume: Callable[[PodGroup, PodGroup], None],
                 active: threading.Event) -> None:
        self.client = client
        self.reporter = reporter
        self.names = frozenset(names)
        self.current = current  # the scheduler's record of a gang key
        self.assume = assume  # hands a record the scheduler should use now
        self.active = active  # only the leader writes
        self.informers: dict[str, Informer[Any]] = {}  # kind -> its watch (pods: "Pod")
        self._pod_handler: Handler[Pod] | None = None
        self._waiting: dict[str, set[str]] = {}  # workload key -> keys of pods waiting
        self._lock = threading.RLock()  # deliveries of pod events, from several threads
        self._dirty: set[str] = set()
        self._wake = threading.Condition()
        self._applied: dict[str, dict[str, Any]] = {}  # gang key -> object last applied
        self._owned: dict[str, set[str]] = {}  # workload key -> its groups' names
        self._foreign: set[str] = set()  # gang keys of PodGroups someone else made
        # Counts taken into the scheduler's records before the PodGroup says them: until
        # an object with them is watched, an older one (a status write's echo) is corrected.
        self._assumed: dict[str, PodGroup] = {}
        self._assumed_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="derived-groups", daemon=True)

    # -- the walk's caches ---------------------------------------------------------------
    def lookup(self, kind: str, namespace: str, name: str) -> Workload | None:
        informer = self.informers.get(kind)
        if informer is None:
            return None
        if kind == "Pod":
            pod = informer.store.get(f"{namespace}/{name}")
            if not isinstance(pod, Pod):
                return None
            return Workload("v1", "Pod", pod.namespace, pod.name, pod.uid,
                            owner=_owner_of_pod(pod), labels=dict(pod.labels))
        found = informer.store.get(workload_key(kind, namespace, name))
        return found if isinstance(found, Workload) else None

    def derive(self, pod: Pod) -> Pod:
        """The pod with its derived membership set (unchanged when it needs none)."""
        if (pod.membership.key or pod.membership.error or not pod.owner
                or pod.scheduler_name not in self.names):
            return pod
        resolution = resolve(pod.namespace, _owner_of_pod(pod), pod.labels, self.lookup)
        pod.membership = derived_membership(pod.namespace, resolution)
        if pod.membership.error and not pod.parse_error:
            pod.parse_error = pod.membership.error
        if resolution.waiting_for:
            self._waiting.setdefault(resolution.waiting_for, set()).add(pod.key)
        return pod

    def pod_events(self, inner: Handler[Pod]) -> Handler[Pod]:
        """The pods watch's handler: every pod derived before ``inner`` sees it."""
        self._pod_handler = inner
        return _DerivingPodEvents(self, inner)

    def finished_pod_events(self, inner: Handler[Pod]) -> Handler[Pod]:
        """A watch of terminal pods: each derived too, so the gang's counts of succeeded
        and failed members (and its phase) include a workload's finished pods."""
        return _DerivingPodEvents(self, inner, redeliver=False)

    def workload_events(self, kind: WorkloadKind | None) -> Handler[Workload]:
        return _WorkloadEvents(self, kind)

    def stop_waiting(self, pod: Pod) -> None:
        """A pod gone while it waited for its owner is not looked at again."""
        if pod.membership.tag == DERIVED:
            waiting = self._waiting.get(pod.membership.name)
            if waiting is not None:
                waiting.discard(pod.key)
                if not waiting:
                    del self._waiting[pod.membership.name]

    def workload_deleted(self, workload: Workload) -> None:
        """Its PodGroups go with it (garbage collection): forget what was applied."""
        for name in self._owned.pop(workload.key, set()):
            self._applied.pop(gang_key(workload.namespace, name), None)

    def owner_arrived(self, key: str) -> None:
        """Pods that waited for this owner are derived again and handed on as updated."""
        with self._lock:
            keys = self._waiting.pop(key, set())
            pods = self.informers.get("Pod")
            if pods is None or self._pod_handler is None:
                return
            for pod_key in keys:
                old = pods.store.get(pod_key)
                if not isinstance(old, Pod):
                    continue
                fresh = dataclasses.replace(old, membership=NO_GROUP)
                self.derive(fresh)
                pods.store[pod_key] = fresh
                self._pod_handler.on_update(old, fresh)

    # -- the groups ----------------------------------------------------------------------
    def workload_changed(self, workload: Workload, kind: WorkloadKind) -> None:
        """Assume a changed count at once; the leader's write follows (``_run``)."""
        if workload.owner is not None and kind_of(workload.owner) is not None:
            return  # part of a larger workload (a JobSet's Job): that one has the group
        if not asks_for(workload, kind, self.names):
            return
        for group in kind.groups(workload):
            if not group.errors:
                self._assume(workload, kind, group)
        with self._wake:
            self._dirty.add(workload.key)
            self._wake.notify()

    def _assume(self, workload: Workload, kind: WorkloadKind, group: DerivedGroup) -> None:
        current = self.current(gang_key(workload.namespace, group.name))
        if current is None or not current.uid:
            return
        obj = group_object(workload, kind, group)
        obj["metadata"].update(uid=current.uid, resourceVersion=current.resource_version)
        assumed = parse_podgroup(obj)
        assumed.created, assumed.phase = current.created, current.phase
        assumed.occupied_by = current.occupied_by
        if _counts(assumed) != _counts(current):
            with self._assumed_lock:
                self._assumed[assumed.key] = assumed
            self.assume(current, assumed)

    def corrected(self, record: PodGroup) -> PodGroup:
        """A watched PodGroup, with the counts assumed for it while it is older than them."""
        with self._assumed_lock:
            assumed = self._assumed.get(record.key)
            if assumed is None:
                return record
            if _counts(record) == _counts(assumed):
                del self._assumed[record.key]  # the written object caught up
                return record
        record.min_member, record.subgroups = assumed.min_member, assumed.subgroups
        return record

    def forget_assumed(self, key: str) -> None:
        with self._assumed_lock:
            self._assumed.pop(key, None)

    def group_events(self, inner: Handler[PodGroup]) -> Handler[PodGroup]:
        """Our PodGroups' watch handler: an echo older than an assumed count is corrected."""
        return _AssumingGroupEvents(self, inner)

    def resync(self) -> None:
        """Every workload looked at again (a new leader writes what a follower did not)."""
        with self._wake:
            for kind in KINDS:
                informer = self.informers.get(kind.kind)
                if informer is not None:
                    self._dirty.update(informer.store)
            self._wake.notify()

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify()

    def _run(self) -> None:
        while not self._stop.is_set():
            with self._wake:
                while not self._dirty and not self._stop.is_set():
                    self._wake.wait(5.0)
                dirty, self._dirty = self._dirty, set()
            for key in sorted(dirty):
                try:
                    self._reconcile(key)
                except ApiError as err:
                    self._failed(key, err)
                except Exception:  # a bug must not end the reconciler
                    log.exception("derived groups of %s", key)

    def _failed(self, key: str, err: ApiError) -> None:
        """A refused group (invalid, forbidden) is reported on its workload until the
        workload changes; anything else is retried."""
        kind, namespace, name = key.split("/", 2)
        workload = self.lookup(kind, namespace, name)
        if err.status in (400, 403, 422) and workload is not None:
            self._warn(workload, "DerivedGroupRefused", f"its PodGroup was refused: {err}")
            return
        log.warning("derived groups of %s: %s; retried", key, err)
        with self._wake:
            self._dirty.add(key)
        self._stop.wait(1.0)

    def _reconcile(self, key: str) -> None:
        kind_name, namespace, name = key.split("/", 2)
        kind = next((k for k in KINDS if k.kind == kind_name), None)
        workload = self.lookup(kind_name, namespace, name)
        if kind is None or workload is None or not self.active.is_set():
            return
        if not asks_for(workload, kind, self.names):
            return
        groups = kind.groups(workload)
        errors = [error for group in groups for error in group.errors]
        if errors:
            self._warn(workload, "DerivedGroupInvalid", "; ".join(errors))
            return
        for group in groups:
            self._apply(workload, kind, group)
        wanted = {group.name for group in groups}
        for stale in self._owned.get(key, set()) - wanted:
            self._delete(namespace, stale)
        self._owned[key] = wanted

    def _apply(self, workload: Workload, kind: WorkloadKind, group: DerivedGroup) -> None:
        gang = gang_key(workload.namespace, group.name)
        obj = group_object(workload, kind, group)
        if self._applied.get(gang) == obj or gang in self._foreign:
            return
        path = (f"{PODGROUPS}/namespaces/{q(workload.namespace)}/podgroups/{q(group.name)}")
        if gang not in self._applied and self._made_by_someone_else(path, workload):
            self._foreign.add(gang)
            self._warn(workload, "DerivedGroupConflict", (
                f"PodGroup {group.name} exists and is not owned by this {workload.kind}: "
                "its pods join it as it is; rename one of them to derive a group"))
            return
        self.client.request("PATCH", path, query={"fieldManager": FIELD_MANAGER,
                                                  "force": "true"},
                            body=obj, content_type="application/apply-patch+yaml",
                            answer=False)
        self._applied[gang] = obj

    def _made_by_someone_else(self, path: str, workload: Workload) -> bool:
        try:
            existing = self.client.get(path)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        owners = (existing.get("metadata") or {}).get("ownerReferences") or ()
        return not any(ref.get("uid") == workload.uid for ref in owners)

    def _delete(self, namespace: str, name: str) -> None:
        self._applied.pop(gang_key(namespace, name), None)
        try:
            self.client.delete(f"{PODGROUPS}/namespaces/{q(namespace)}/podgroups/{q(name)}")
        except ApiError as err:
            if not err.not_found:
                raise

    def _warn(self, workload: Workload, reason: str, message: str) -> None:
        if self.reporter is not None:
            self.reporter.object_event(
                ObjectRef(workload.api_version, workload.kind, workload.namespace,
                          workload.name, workload.uid), "Warning", reason, message)


def _counts(group: PodGroup) -> tuple[int, object]:
    return group.min_member, group.subgroups


class _AssumingGroupEvents:
    """Our PodGroups' events, each corrected by what was assumed for it."""

    def __init__(self, groups: DerivedGroups, inner: Handler[PodGroup]) -> None:
        self.groups, self.inner = groups, inner

    def on_add(self, record: PodGroup) -> None:
        self.inner.on_add(self.groups.corrected(record))

    def on_update(self, old: PodGroup, new: PodGroup) -> None:
        self.inner.on_update(old, self.groups.corrected(new))

    def on_delete(self, record: PodGroup) -> None:
        self.groups.forget_assumed(record.key)
        self.inner.on_delete(record)


class _DerivingPodEvents:
    """The pods watch's events, each pod derived first (one delivery at a time, as the
    re-derived pods of an arriving owner come from another watch's thread)."""

    def __init__(self, groups: DerivedGroups, inner: Handler[Pod], *,
                 redeliver: bool = True) -> None:
        self.groups, self.inner = groups, inner
        self.redeliver = redeliver  # the main pods watch: pods waiting for a pod owner

    def on_add(self, record: Pod) -> None:
        with self.groups._lock:
            self.inner.on_add(self.groups.derive(record))
            if self.redeliver:  # a LeaderWorkerSet's leader pod owns its workers' StatefulSet
                self.groups.owner_arrived(workload_key("Pod", record.namespace, record.name))

    def on_update(self, old: Pod, new: Pod) -> None:
        with self.groups._lock:
            self.inner.on_update(old, self.groups.derive(new))

    def on_delete(self, record: Pod) -> None:
        with self.groups._lock:
            self.groups.stop_waiting(record)
            self.inner.on_delete(record)


class _WorkloadEvents:
    """A workload kind's (or a StatefulSet's: ``kind`` None) events: waiting pods looked
    at again when it arrives; its derived groups kept in step."""

    def __init__(self, groups: DerivedGroups, kind: WorkloadKind | None) -> None:
        self.groups, self.kind = groups, kind

    def on_add(self, record: Workload) -> None:
        self.groups.owner_arrived(record.key)
        if self.kind is not None:
            self.groups.workload_changed(record, self.kind)

    def on_update(self, old: Workload, new: Workload) -> None:
        if self.kind is not None:
            self.groups.workload_changed(new, self.kind)

    def on_delete(self, record: Workload) -> None:
        self.groups.workload_deleted(record)
