"""Wiring: client, watches, scheduler and reporter, started and stopped together."""

from __future__ import annotations

import logging
import threading
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION, faults
from coscheduling.api.namespaces import Namespace, parse_namespace
from coscheduling.api.nodes import Node, parse_node
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.api.priorityclasses import PriorityClass, parse_priority_class
from coscheduling.api.queues import DEFAULT_QUEUE, Queue, default_queue_object, parse_queue
from coscheduling.api.queues import PLURAL as QUEUES
from coscheduling.api.volumes import (
    Claim,
    CSINode,
    StorageClass,
    Volume,
    parse_claim,
    parse_csinode,
    parse_storage_class,
    parse_volume,
)
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.cluster.fencing import BindingClient, wait_admitted
from coscheduling.cluster.groupstatus import GroupStatusWriter
from coscheduling.cluster.informer import Informer, wait_synced
from coscheduling.cluster.leaderelection import LeaderElector
from coscheduling.cluster.queuestatus import QueueStatusWriter
from coscheduling.cluster.reporter import Reporter
from coscheduling.config.types import SchedulerConfig
from coscheduling.eventhandlers import (
    FinishedPodEvents,
    NamespaceEvents,
    NodeEvents,
    PodEvents,
    PodGroupEvents,
    QueueEvents,
    StoreEvents,
    VolumeEvents,
)
from coscheduling.groups import FOREIGN_APIS, GroupApi, ours, scheduled_here
from coscheduling.groups.discovery import GroupDiscovery
from coscheduling.groups.table import KindTable
from coscheduling.httpendpoint import HttpEndpoint
from coscheduling.plugins.coscheduling import Coscheduling
from coscheduling.plugins.proportion import Proportion
from coscheduling.plugins.registry import default_registry
from coscheduling.preemption.pdb import Budget, parse_budget
from coscheduling.scheduler import Scheduler

log = logging.getLogger(__name__)

QUEUES_PATH = f"/apis/{GROUP_API}/{GROUP_VERSION}/{QUEUES}"
# A watch that sends nothing (not even a bookmark) for this long is assumed dead and
# re-established from its last resourceVersion: a frozen connection costs at most this.
WATCH_TIMEOUT = 30.0


class SchedulerService:
    """A running scheduler attached to one API server."""

    def __init__(self, config: SchedulerConfig, *, kubeconfig: str = "",
                 token: str = "") -> None:
        self.config = config
        conn = config.client_connection
        settings = ClientSettings(
            kubeconfig=kubeconfig or conn.kubeconfig, qps=conn.qps, burst=conn.burst,
            connection_pool=max(8, config.binding_parallelism * 2), token=token,
        )
        fault = faults.from_environment()
        fenced = config.leader_election.leader_elect
        self.client = BindingClient(settings) if fault or fenced else KubeClient(settings)
        # Events and conditions get their own client, and so their own rate limit: the same
        # limits as the main client's, as kube-scheduler gives its event client.
        self.report_client = KubeClient(
            ClientSettings(settings.kubeconfig, qps=conn.qps, burst=conn.burst, token=token),
            self.client.endpoint,
        )
        self.reporter = Reporter(self.report_client, config.scheduler_name)
        self.scheduler = Scheduler(config, default_registry(), self.client, self.reporter)
        s = self.scheduler
        self.group_kinds = KindTable()
        self.informers: list[Informer[Any]] = [
            Informer[Node](self.client, "/api/v1/nodes", parse_node, lambda n: n.name,
                           NodeEvents(s), name="nodes", watch_read_timeout=WATCH_TIMEOUT),
            Informer[Namespace](self.client, "/api/v1/namespaces", parse_namespace,
                                lambda n: n.name, NamespaceEvents(s), name="namespaces",
                                watch_read_timeout=WATCH_TIMEOUT),
            Informer[PriorityClass](self.client, "/apis/scheduling.k8s.io/v1/priorityclasses",
                                    parse_priority_class, lambda c: c.name,
                                    StoreEvents(s, s.priority_classes, lambda c: c.name,
                                                lambda c: c.value),
                                    name="priorityclasses",
                                    watch_read_timeout=WATCH_TIMEOUT),
            Informer[Budget](self.client, "/apis/policy/v1/poddisruptionbudgets", parse_budget,
                             lambda b: b.key,
                             StoreEvents(s, s.pdbs, lambda b: b.key, lambda b: b),
                             name="poddisruptionbudgets",
                             watch_read_timeout=WATCH_TIMEOUT),
            self._group_informer(ours.API),
            Informer[Pod](self.client, "/api/v1/pods", parse_pod, lambda p: p.key, PodEvents(s),
                          field_selector="status.phase!=Succeeded,status.phase!=Failed",
                          name="pods", watch_read_timeout=WATCH_TIMEOUT),
        ]
        storage, v = "/apis/storage.k8s.io/v1", s.volumes
        self.informers += [  # what the volume plugins read
            Informer[Claim](self.client, "/api/v1/persistentvolumeclaims", parse_claim,
                            lambda c: c.key, VolumeEvents(s, v.claims, lambda c: c.key),
                            name="persistentvolumeclaims", watch_read_timeout=WATCH_TIMEOUT),
            Informer[Volume](self.client, "/api/v1/persistentvolumes", parse_volume,
                             lambda pv: pv.name, VolumeEvents(s, v.volumes, lambda pv: pv.name),
                             name="persistentvolumes", watch_read_timeout=WATCH_TIMEOUT),
            Informer[StorageClass](self.client, f"{storage}/storageclasses",
                                   parse_storage_class, lambda c: c.name,
                                   VolumeEvents(s, v.classes, lambda c: c.name),
                                   name="storageclasses", watch_read_timeout=WATCH_TIMEOUT),
            Informer[CSINode](self.client, f"{storage}/csinodes", parse_csinode,
                              lambda n: n.name, VolumeEvents(s, v.csinodes, lambda n: n.name),
                              name="csinodes", watch_read_timeout=WATCH_TIMEOUT),
        ]
        v.client = self.client  # PreBind writes claimRefs and annotations through it
        self.informers += [  # every producer marks members differently: no label selector
            Informer[Pod](self.client, "/api/v1/pods", parse_pod, lambda p: p.key,
                          FinishedPodEvents(s), field_selector=f"status.phase={phase}",
                          name=f"pods-{phase.lower()}", watch_read_timeout=WATCH_TIMEOUT)
            for phase in ("Succeeded", "Failed")
        ]
        # Other producers' group objects, watched while (and once) the API server serves them.
        self.discovery = GroupDiscovery(self.client, FOREIGN_APIS, self._group_informer)
        self.status_writer: GroupStatusWriter | None = None
        gang = s.framework.instances.get("Coscheduling")
        if isinstance(gang, Coscheduling):
            names = config.scheduler_names
            gang.owns = lambda group, members: scheduled_here(
                group, (p.scheduler_name for p in members), names)
            self.status_writer = GroupStatusWriter(self.report_client, gang.status_of)
            s.group_listeners.append(self.status_writer.mark)
        self.queue_writer: QueueStatusWriter | None = None
        self.proportion = s.framework.instances.get("Proportion")
        if isinstance(self.proportion, Proportion):  # queues only when the profile uses them
            self.informers.append(Informer[Queue](
                self.client, QUEUES_PATH, parse_queue, lambda queue: queue.name,
                QueueEvents(s, self.proportion), name="queues",
                watch_read_timeout=WATCH_TIMEOUT))
            proportion = self.proportion  # only the leader writes Queue status
            self.queue_writer = QueueStatusWriter(
                self.report_client,
                lambda name: proportion.status_of(name) if s.active.is_set() else None)
            self.proportion.status_listeners.append(self.queue_writer.mark)
        self.http: HttpEndpoint | None = None
        if config.metrics_bind_address:
            self.http = HttpEndpoint(config.metrics_bind_address, s.metrics,
                                     ready=lambda: self.synced, alive=s.alive)
        self.elector: LeaderElector | None = None
        self.lost_leadership = threading.Event()
        if config.leader_election.leader_elect:
            s.active.clear()  # followers watch and keep their caches warm, but do not schedule
            self.elector = LeaderElector(self.client, config.leader_election,
                                         on_started_leading=self._started_leading,
                                         on_stopped_leading=self._stopped_leading)
            s.may_bind = self.elector.holds_lease
        if isinstance(self.client, BindingClient):
            self.client.fault = fault
            self.client.group_of = lambda namespace, name: (
                pod.group_key if (pod := s.cache.pod(f"{namespace}/{name}")) else "")
            if self.elector is not None:  # the API server checks it against the Lease
                self.client.leader = self.elector.identity
        self.stopped = threading.Event()

    def _group_informer(self, api: GroupApi) -> Informer[PodGroup]:
        """A watch of one kind of group object; every kind's handler shares one table."""
        return Informer[PodGroup](self.client, api.path, api.parse, lambda g: g.key,
                                  PodGroupEvents(self.scheduler, self.group_kinds),
                                  name=f"podgroups.{api.group}",
                                  watch_read_timeout=WATCH_TIMEOUT)

    def start(self, *, sync_timeout: float | None = None, schedule: bool = True) -> bool:
        """Start the watches, wait until they have listed, then start scheduling."""
        if self.http is not None:
            self.http.start()
        self._check_queues_served()
        self.informers += self.discovery.discover()
        for informer in self.informers:
            informer.start()
        if not wait_synced(self.informers, sync_timeout):
            missing = [i.name for i in self.informers if not i.synced.is_set()]
            log.error("caches did not sync within %ss: %s", sync_timeout, ", ".join(missing))
            return False
        log.info("caches synced: %d nodes, %d podgroups", self.scheduler.cache.node_count(),
                 len(self.scheduler.podgroups()))
        self._ensure_default_queue()
        # Bound members are known now: gangs a crash left partially bound go first.
        self.scheduler.refresh_queue_order()
        self.discovery.start(self._watch_late)
        if schedule:
            self.scheduler.start_loops()
            if self.elector is not None:
                self.elector.start()
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
            self._activate()

    def _activate(self) -> None:
        # The previous leader's assumed and waiting pods are gone with it: look at every
        # parked pod again.
        self.scheduler.capacity_freed()
        self.scheduler.active.set()
        if self.queue_writer is not None and isinstance(self.proportion, Proportion):
            for name in list(self.proportion.statuses):
                self.queue_writer.mark(name)

    def _stopped_leading(self) -> None:
        """Stop scheduling and binding at once; the process is expected to exit."""
        self.scheduler.active.clear()
        self.scheduler.reject_all_waiting("this scheduler replica lost its leader lease")
        self.lost_leadership.set()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers)

    def stop(self) -> None:
        if self.elector is not None:
            self.elector.stop()
        self.discovery.stop()
        for informer in self.informers:
            informer.stop()
        if self.http is not None:
            self.http.stop()
        self.scheduler.stop()
        if self.status_writer is not None:
            self.status_writer.stop()
        if self.queue_writer is not None:
            self.queue_writer.stop()
        self.reporter.stop()
        self.client.close()
        self.stopped.set()
