"""Wiring: client, watches, scheduler and reporter, started and stopped together."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.budgets import Budget, parse_budget
from coscheduling.api.dra import (
    API_PATH,
    DeviceClass,
    DeviceStore,
    ResourceClaim,
    ResourceSlice,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from coscheduling.api.membership import membership
from coscheduling.api.namespaces import Namespace, parse_namespace
from coscheduling.api.nodes import Node, parse_node
from coscheduling.api.podgroups import PodGroup, gang_key
from coscheduling.api.pods import Pod, parse_pod, unreadable_error
from coscheduling.api.priorityclasses import PriorityClass, parse_priority_class
from coscheduling.api.queues import DEFAULT_QUEUE, Queue, default_queue_object, parse_queue
from coscheduling.api.queues import PLURAL as QUEUES
from coscheduling.api.volumes import (
    Claim,
    CSINode,
    StorageClass,
    Volume,
    VolumeStore,
    parse_claim,
    parse_csinode,
    parse_storage_class,
    parse_volume,
)
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient, q
from coscheduling.cluster.discovery import GroupDiscovery
from coscheduling.cluster.fencing import BindingClient, wait_admitted
from coscheduling.cluster.groupstatus import GroupStatusWriter
from coscheduling.cluster.informer import Informer, object_key, wait_synced
from coscheduling.cluster.leaderelection import LeaderElector, default_identity
from coscheduling.cluster.queuestatus import QueueStatusWriter
from coscheduling.cluster.reporter import WRITERS as REPORT_WRITERS
from coscheduling.cluster.reporter import Reporter
from coscheduling.cluster.unreadable import UnreadableObjects
from coscheduling.config.types import SchedulerConfig
from coscheduling.core.derivedgroups import DerivedGroups
from coscheduling.core.eventhandlers import (
    DeviceEvents,
    FinishedPodEvents,
    NamespaceEvents,
    NodeEvents,
    PodEvents,
    PodGroupEvents,
    QueueEvents,
    StoreEvents,
    VolumeEvents,
)
from coscheduling.core.scheduler import Scheduler
from coscheduling.groups import FOREIGN_APIS, GroupApi, StatusTarget, ours, status_target
from coscheduling.groups.derive import KINDS as WORKLOAD_KINDS
from coscheduling.groups.derive import Workload, WorkloadKind, reader
from coscheduling.groups.derive import job as derive_job
from coscheduling.groups.table import KindTable
from coscheduling.ops import faults
from coscheduling.ops.httpendpoint import HttpEndpoint
from coscheduling.plugins.coscheduling import Coscheduling
from coscheduling.plugins.proportion import Proportion
from coscheduling.plugins.registry import default_registry
from coscheduling.service.startup import StartupClock

log = logging.getLogger(__name__)

R = TypeVar("R")

LEADER_LABEL = f"{GROUP_API}/leader"
"""On the leader's pod, when replicas run in a cluster: the gRPC Service selects it."""
QUEUES_PATH = f"/apis/{GROUP_API}/{GROUP_VERSION}/{QUEUES}"
# A watch that sends nothing (not even a bookmark) for this long is assumed dead and
# re-established from its last resourceVersion: a frozen connection costs at most this.
WATCH_TIMEOUT = 30.0


@dataclass(frozen=True)
class Watch(Generic[R]):
    """One watched resource: where it is listed, how its objects are read and keyed, and
    the handler its events go to (made from the scheduler)."""

    name: str
    path: str
    parse: Callable[[dict[str, Any]], R]
    key: Callable[[R], str]
    handler: Callable[[Scheduler], Any]
    field_selector: str = ""
    # For an object that cannot be read: a record kept in its place (see informer), and
    # the parse error of a kept record that makes it count as unreadable.
    stand_in: Callable[[dict[str, Any], str], R] | None = None
    record_error: Callable[[R], str] | None = None
    keep_previous: bool = False
    # The key of an object that cannot be parsed, from its metadata (as ``key`` gives it).
    object_key: Callable[[dict[str, Any]], str] = object_key


def unreadable_pod(obj: dict[str, Any], why: str) -> Pod:
    """A pod that cannot be parsed, as far as it takes room: on its node (which then takes
    no new pods, framework.nodeinfo), or pending with the error (UnsupportedFields)."""
    meta, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    pod = Pod(namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
              uid=str(meta.get("uid") or ""),
              resource_version=str(meta.get("resourceVersion") or ""),
              scheduler_name=str(spec.get("schedulerName") or "default-scheduler"),
              node_name=str(spec.get("nodeName") or ""),
              phase=str(status.get("phase") or "Pending"), parse_error=why)
    # Its gang still counts it (a bound member keeps its gang settled: preemption, status).
    pod.labels = {str(k): v for k, v in _mapping(meta.get("labels")).items()
                  if isinstance(v, str)}
    try:
        pod.membership = membership(pod.namespace, pod.labels,
                                    _mapping(meta.get("annotations")), spec)
    except Exception:  # a marker as unreadable as the rest: no gang known
        log.warning("pod %s: its gang cannot be read either", pod.key)
    return pod


def unreadable_node(obj: dict[str, Any], why: str) -> Node:
    """A node that cannot be parsed: it stays known (its pods with it) and takes no pods."""
    meta = _mapping(obj.get("metadata"))
    return Node(name=str(meta.get("name") or ""), uid=str(meta.get("uid") or ""),
                resource_version=str(meta.get("resourceVersion") or ""), parse_error=why)


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _bound_pod_error(pod: Pod) -> str:
    """A pending pod's parse error is reported by its Filter (UnsupportedFields); a bound
    one's closes its node (framework.nodeinfo), and is reported as unreadable."""
    return unreadable_error(pod) if pod.node_name else ""


def group_watch(api: GroupApi, kinds: KindTable) -> Watch[PodGroup]:
    """A watch of one kind of group object; every kind's handler shares one table."""
    def tagged_key(obj: dict[str, Any]) -> str:
        meta = _mapping(obj.get("metadata"))
        return gang_key(str(meta.get("namespace") or ""), str(meta.get("name") or ""), api.tag)

    return Watch[PodGroup](f"podgroups.{api.group}", api.path, api.parse, lambda g: g.key,
                           lambda s: PodGroupEvents(s, kinds), object_key=tagged_key)


def _watches(kinds: KindTable) -> list[Watch[Any]]:
    """What the scheduler watches from the start (other producers' group objects and Queues
    are watched when the API server serves them), PodGroups before the pods naming them."""
    storage = "/apis/storage.k8s.io/v1"

    def volumes(store: Callable[[VolumeStore], dict[str, Any]],
                key: Callable[[Any], str]) -> Callable[[Scheduler], Any]:
        return lambda s: VolumeEvents(s, store(s.volumes), key)

    def devices(store: Callable[[DeviceStore], dict[str, Any]],
                key: Callable[[Any], str]) -> Callable[[Scheduler], Any]:
        return lambda s: DeviceEvents(s, store(s.devices), key)

    finished = [Watch[Pod](f"pods-{phase.lower()}", "/api/v1/pods", parse_pod,
                           lambda p: p.key, FinishedPodEvents,
                           field_selector=f"status.phase={phase}")
                for phase in ("Succeeded", "Failed")]  # every producer marks members its way
    return [
        Watch[Node]("nodes", "/api/v1/nodes", parse_node, lambda n: n.name, NodeEvents,
                    stand_in=unreadable_node, record_error=lambda n: n.parse_error),
        Watch[Namespace]("namespaces", "/api/v1/namespaces", parse_namespace,
                         lambda n: n.name, NamespaceEvents),
        Watch[PriorityClass](
            "priorityclasses", "/apis/scheduling.k8s.io/v1/priorityclasses",
            parse_priority_class, lambda c: c.name,
            lambda s: StoreEvents(s, s.listers.priority_classes, lambda c: c.name,
                                  lambda c: c.value)),
        Watch[Budget]("poddisruptionbudgets", "/apis/policy/v1/poddisruptionbudgets",
                      parse_budget, lambda b: b.key,
                      lambda s: StoreEvents(s, s.listers.pdbs, lambda b: b.key, lambda b: b)),
        group_watch(ours.API, kinds),
        Watch[Pod]("pods", "/api/v1/pods", parse_pod, lambda p: p.key, PodEvents,
                   field_selector="status.phase!=Succeeded,status.phase!=Failed",
                   stand_in=unreadable_pod, record_error=_bound_pod_error),
        Watch[Claim]("persistentvolumeclaims", "/api/v1/persistentvolumeclaims", parse_claim,
                     lambda c: c.key, volumes(lambda v: v.claims, lambda c: c.key)),
        Watch[Volume]("persistentvolumes", "/api/v1/persistentvolumes", parse_volume,
                      lambda pv: pv.name, volumes(lambda v: v.volumes, lambda pv: pv.name)),
        Watch[StorageClass]("storageclasses", f"{storage}/storageclasses",
                            parse_storage_class, lambda c: c.name,
                            volumes(lambda v: v.classes, lambda c: c.name)),
        Watch[CSINode]("csinodes", f"{storage}/csinodes", parse_csinode, lambda n: n.name,
                       volumes(lambda v: v.csinodes, lambda n: n.name)),
        Watch[DeviceClass]("deviceclasses", f"{API_PATH}/deviceclasses", parse_device_class,
                           lambda c: c.name, devices(lambda d: d.classes, lambda c: c.name)),
        Watch[ResourceSlice]("resourceslices", f"{API_PATH}/resourceslices",
                             parse_resource_slice, lambda r: r.name,
                             devices(lambda d: d.slices, lambda r: r.name)),
        Watch[ResourceClaim]("resourceclaims", f"{API_PATH}/resourceclaims",
                             parse_resource_claim, lambda c: c.key,
                             devices(lambda d: d.claims, lambda c: c.key), keep_previous=True),
        *finished,
    ]


class SchedulerService:
    """A running scheduler attached to one API server."""

    def __init__(self, config: SchedulerConfig, *, kubeconfig: str = "",
                 token: str = "", startup: StartupClock | None = None) -> None:
        self.config = config
        self.startup = startup  # a command's start-up phases, logged once scheduling starts
        # Taking up leadership (after the fencing probe) and losing it exclude each other, so
        # a lease lost during the probe is never followed by scheduling and the leader label.
        self._leadership = threading.Lock()
        elect = config.leader_election.leader_elect
        identity = default_identity() if elect else ""  # Bindings carry it (fencing)
        self.elector: LeaderElector | None = None
        self._connect(kubeconfig, token, identity)
        if elect:
            self.elector = LeaderElector(self.client, config.leader_election,
                                         on_started_leading=self._started_leading,
                                         on_stopped_leading=self._stopped_leading,
                                         identity=identity)
        self.scheduler = s = Scheduler(
            config, default_registry(), self.client, self.reporter,
            may_bind=self.elector.holds_lease if self.elector is not None else None)
        if self.elector is not None:
            s.active.clear()  # followers watch and keep their caches warm, but do not schedule
        self.unreadable = UnreadableObjects(
            self.reporter, lambda kind, count: s.metrics.objects_unreadable.set(count, kind))
        self.group_kinds = KindTable()
        self.informers: list[Informer[Any]] = [
            self._informer(w) for w in _watches(self.group_kinds)]
        # Other producers' group objects, watched while (and once) the API server serves them.
        self.discovery = GroupDiscovery(self.client, FOREIGN_APIS, self._group_informer)
        self.derived, self.workload_discovery = self._derived_groups()
        self.status_writer = self._group_status_writer()
        self.proportion, self.queue_writer = self._queues()
        self.http: HttpEndpoint | None = None
        if config.metrics_bind_address:
            self.http = HttpEndpoint(config.metrics_bind_address, s.metrics,
                                     ready=lambda: self.synced, alive=s.alive)
        self.lost_leadership = threading.Event()
        self.stopped = threading.Event()

    def _connect(self, kubeconfig: str, token: str, identity: str) -> None:
        """The scheduler's client (fenced when it elects a leader or a fault is injected) and
        its reporter's: events and conditions get a client, and so a rate limit, of their
        own, with the same limits, as kube-scheduler gives its event client."""
        conn = self.config.client_connection
        settings = ClientSettings(
            kubeconfig=kubeconfig or conn.kubeconfig, qps=conn.qps, burst=conn.burst,
            connection_pool=max(8, self.config.binding_parallelism * 2), token=token,
        )
        fault = faults.from_environment()
        # With leader election every write is fenced: sent only while this replica holds
        # the lease (the Lease's own writes excepted), Bindings carrying its identity.
        fence = self._holds_lease if identity else None
        if fault or identity:
            self.client: KubeClient = BindingClient(settings, fault=fault, leader=identity,
                                                    group_of=self._group_of,
                                                    holds_lease=fence)
        else:
            self.client = KubeClient(settings)
        report_settings = ClientSettings(settings.kubeconfig, qps=conn.qps, burst=conn.burst,
                                         connection_pool=REPORT_WRITERS, token=token)
        self.report_client = (BindingClient(report_settings, self.client.endpoint,
                                            holds_lease=fence)
                              if fence else KubeClient(report_settings, self.client.endpoint))
        self.reporter = Reporter(self.report_client, self.config.scheduler_name)
        # In a cluster, the leader labels its own pod: not fenced (a standby clears its own).
        pod, pod_namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
        self._own_pod = (f"/api/v1/namespaces/{q(pod_namespace)}/pods/{q(pod)}"
                         if identity and pod and pod_namespace else "")
        self._pod_client = KubeClient(settings, self.client.endpoint) if self._own_pod else None

    def _label_own_pod(self, leading: bool) -> None:
        """Mark (or unmark) this replica's pod as the leader's: the gRPC Service selects it."""
        if self._pod_client is None:
            return
        try:
            self._pod_client.patch(self._own_pod, {"metadata": {"labels": {
                LEADER_LABEL: "true" if leading else None}}})
        except ApiError as err:
            log.warning("could not label this replica's pod %s: %s", self._own_pod, err)

    def _holds_lease(self) -> bool:
        return self.elector is not None and self.elector.holds_lease()

    def _group_of(self, namespace: str, name: str) -> str:
        pod = self.scheduler.cache.pod(f"{namespace}/{name}")
        return pod.group_key if pod is not None else ""

    def _informer(self, watch: Watch[Any]) -> Informer[Any]:
        return Informer[Any](self.client, watch.path, watch.parse, watch.key,
                             watch.handler(self.scheduler), name=watch.name,
                             field_selector=watch.field_selector,
                             watch_read_timeout=WATCH_TIMEOUT, unreadable=self.unreadable,
                             stand_in=watch.stand_in, record_error=watch.record_error,
                             keep_previous=watch.keep_previous, object_key=watch.object_key,
                             protobuf=self.config.client_connection.protobuf)

    def _derived_groups(self) -> tuple[DerivedGroups, GroupDiscovery[WorkloadKind]]:
        """Groups derived from owners (coscheduling.core.derivedgroups): the pods watch derives
        every pod first; Jobs and ReplicaSets are watched from the start, the other
        workload kinds while they are served (those of CRDs once installed)."""
        s = self.scheduler
        by_name = {i.name: i for i in self.informers}
        ours_informer = by_name[f"podgroups.{ours.API.group}"]
        ours_events = ours_informer.handler
        derived = DerivedGroups(self.client, self.reporter, self.config.scheduler_names,
                                s.listers.podgroup, ours_events.on_update, s.active)
        ours_informer.handler = derived.group_events(ours_events)
        pods = by_name["pods"]
        pods.handler = derived.pod_events(pods.handler)
        for finished in (i for i in self.informers if i.name.startswith("pods-")):
            finished.handler = derived.finished_pod_events(finished.handler)
        derived.informers["Pod"] = pods
        built_in = [self._workload_informer(derived, derive_job.KIND),
                    self._workload_informer(derived, None)]  # ReplicaSets
        position = self.informers.index(pods)
        self.informers[position:position] = built_in
        return derived, GroupDiscovery(
            self.client, [k for k in WORKLOAD_KINDS if k is not derive_job.KIND],
            lambda kind: self._workload_informer(derived, kind))

    def _workload_informer(self, derived: DerivedGroups,
                           kind: WorkloadKind | None) -> Informer[Workload]:
        """A watch of one workload kind (None: ReplicaSets, walked through only)."""
        api_version, name, plural = ((kind.api_version, kind.kind, kind.plural) if kind
                                     else ("apps/v1", "ReplicaSet", "replicasets"))
        informer = Informer[Workload](
            self.client, f"/apis/{api_version}/{plural}", reader(api_version, name),
            lambda w: w.key, derived.workload_events(kind), name=plural,
            watch_read_timeout=WATCH_TIMEOUT, unreadable=self.unreadable)
        derived.informers[name] = informer
        return informer

    def _group_status_writer(self) -> GroupStatusWriter | None:
        """PodGroup status, written for the groups the gang plugin schedules."""
        gang = self.scheduler.framework.instances.get("Coscheduling")
        if not isinstance(gang, Coscheduling):
            return None
        active = self.scheduler.active  # only the leader writes PodGroup status
        lock = self.scheduler.cache.lock

        def status_of(key: str) -> StatusTarget | None:
            with lock:  # the gang's state is read as one
                return status_target(gang.status_of(key)) if active.is_set() else None

        writer = GroupStatusWriter(self.report_client, status_of)
        self.scheduler.notices.listeners.append(writer.mark)
        return writer

    def _queues(self) -> tuple[Proportion | None, QueueStatusWriter | None]:
        """The Queue watch and status writer, only when the profile uses queues."""
        s = self.scheduler
        proportion = s.framework.instances.get("Proportion")
        if not isinstance(proportion, Proportion):
            return None, None
        self.informers.append(Informer[Queue](
            self.client, QUEUES_PATH, parse_queue, lambda queue: queue.name,
            QueueEvents(s, proportion), name="queues", watch_read_timeout=WATCH_TIMEOUT,
            unreadable=self.unreadable))
        def status_of(name: str) -> dict[str, Any] | None:
            with s.cache.lock:
                return proportion.status_of(name) if s.active.is_set() else None

        writer = QueueStatusWriter(self.report_client, status_of)  # only the leader writes
        proportion.status_listeners.append(writer.mark)
        return proportion, writer

    def _group_informer(self, api: GroupApi) -> Informer[PodGroup]:
        return self._informer(group_watch(api, self.group_kinds))

    def start(self, *, sync_timeout: float | None = None, schedule: bool = True,
              stop: threading.Event | None = None) -> bool:
        """Start the watches, wait until they have listed (not past ``stop``), then start
        scheduling."""
        if self.http is not None:
            self.http.start()
        self._check_queues_served()
        self.informers += self.discovery.discover()
        self.informers += self.workload_discovery.discover()
        if self.startup is not None:
            self.startup.mark("discovery")
        for informer in self.informers:
            informer.start()
        if not wait_synced(self.informers, sync_timeout, stop):
            if stop is not None and stop.is_set():
                return False
            missing = [i.name for i in self.informers if not i.synced.is_set()]
            log.error("caches did not sync within %ss: %s", sync_timeout, ", ".join(missing))
            return False
        log.info("caches synced: %d nodes, %d podgroups", self.scheduler.cache.node_count(),
                 len(self.scheduler.listers.groups))
        if self.startup is not None:
            self.startup.mark("lists")
        if self.elector is None:  # with an election, the leader creates it (_activate)
            self._ensure_default_queue_later()
        # Bound members are known now: gangs a crash left partially bound go first.
        self.scheduler.refresh_queue_order()
        self.discovery.start(self._watch_late)
        self.workload_discovery.start(self._watch_late)
        self.derived.start()
        if schedule:
            self.scheduler.start_loops()
        if self.elector is not None:  # `serve` replicas elect a leader too: only it acts
            self._label_own_pod(False)  # a restarted leader is a follower until elected
            self.elector.start()
        if self.startup is not None:
            self.startup.mark("loops started")
            log.info("started: %s", self.startup.summary())
        return True

    def _watch_late(self, informer: Informer[Any]) -> None:
        """A kind of group object served only now (its CRD installed later)."""
        self.informers.append(informer)
        informer.start()

    def _check_queues_served(self) -> None:
        """Without the Queue CRD every gang is in the implicit default queue: no watch."""
        if not isinstance(self.proportion, Proportion):
            return
        try:
            self.client.get(QUEUES_PATH, limit=1)
        except ApiError as err:
            if not err.not_found:
                raise
            log.warning("the Queue CRD (crd/queues.batch.scheduler.tencent.com.yaml) is not "
                        "installed: every PodGroup is in the default queue")
            self.informers = [i for i in self.informers if i.name != "queues"]
            self.proportion = None

    def _ensure_default_queue_later(self) -> None:
        """Create the default Queue beside scheduling, not before it: the queue plugin treats
        a missing ``default`` as an empty one, and the first write to a just-installed Queue
        CRD took the API server 2 s (W8's start-up)."""
        if isinstance(self.proportion, Proportion) and DEFAULT_QUEUE not in self.proportion.queues:
            threading.Thread(target=self._ensure_default_queue, name="default-queue",
                             daemon=True).start()

    def _ensure_default_queue(self) -> None:
        """PodGroups without spec.queue name ``default``: create it when it is missing."""
        if not isinstance(self.proportion, Proportion) or DEFAULT_QUEUE in self.proportion.queues:
            return
        try:
            self.client.create(QUEUES_PATH, default_queue_object())
        except ApiError as err:
            if not err.conflict:
                log.warning("creating the default Queue failed: %s", err)

    def _started_leading(self) -> None:
        if isinstance(self.client, BindingClient) and self.client.leader:
            # Not on the election thread: it must go on renewing meanwhile.
            threading.Thread(target=self._activate_once_admitted, name="fencing-probe",
                             daemon=True).start()
        else:
            self._activate()

    def _activate_once_admitted(self) -> None:
        """Bind nothing until the fencing policy names this replica (cluster.fencing)."""
        assert isinstance(self.client, BindingClient) and self.elector is not None
        elector = self.elector
        if wait_admitted(self.client, self.config.leader_election.resource_namespace,
                         elector.holds_lease):
            with self._leadership:
                if elector.holds_lease():
                    self._activate()

    def _activate(self) -> None:
        # The previous leader's assumed and waiting pods are gone with it: look at every
        # parked pod again.
        self.scheduler.activator.capacity_freed()
        self.scheduler.active.set()
        self._label_own_pod(True)
        self.unreadable.warn_again()
        self._ensure_default_queue_later()
        self.derived.resync()
        if self.status_writer is not None:  # a follower wrote none: catch up
            for key in list(self.scheduler.listers.groups):
                self.status_writer.mark(key)
        if self.queue_writer is not None and isinstance(self.proportion, Proportion):
            for name in list(self.proportion.statuses):
                self.queue_writer.mark(name)

    def _stopped_leading(self) -> None:
        """Stop scheduling and binding at once; the process is expected to exit."""
        with self._leadership:
            self.scheduler.active.clear()
            self.scheduler.reject_all_waiting("this scheduler replica lost its leader lease")
            self._label_own_pod(False)
            self.lost_leadership.set()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def stop(self) -> None:
        """The scheduler first, while this replica still leads: its loop ends and the binds
        already under way finish (a released gang's members are all bound, or the gang was
        never released), and only then is the Lease handed back. Handing it back first
        fenced those binds off and left the gang partial until the next leader bound the
        rest."""
        self.scheduler.stop()
        if self.elector is not None:
            self.elector.stop()
        self.discovery.stop()
        self.workload_discovery.stop()
        self.derived.stop()
        for informer in self.informers:
            informer.stop()
        if self.http is not None:
            self.http.stop()
        if self.status_writer is not None:
            self.status_writer.stop()
        if self.queue_writer is not None:
            self.queue_writer.stop()
        self.reporter.stop()
        self.client.close()
        self.stopped.set()
