"""The scheduling loop: one pod at a time through the framework, binding in a worker pool.

Scheduling cycle (one thread, under the cache lock): PreFilter -> Filter on a sample of
nodes -> PostFilter when none fits -> Score -> pick, then the pod's cycle
(:mod:`coscheduling.core.cycle`): assume -> Reserve -> Permit. Binding cycle (worker pool, no
lock while talking to the API server): PreBind -> Bind -> PostBind. A pod that must Wait at
Permit occupies no worker: its decision (allow or reject) arrives as a callback and only then
is its binding, or its undoing, queued.

The scheduler builds the roles its plugins get (:class:`~coscheduling.framework.handle.Handle`)
from its parts; it is not itself the Handle.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coscheduling.api.dra import DeviceStore
from coscheduling.api.volumes import VolumeStore
from coscheduling.cluster.client import ApiError
from coscheduling.config.types import SchedulerConfig
from coscheduling.core.cache import Cache, Listers
from coscheduling.core.cycle import Cycles
from coscheduling.core.gangcycle import PluginsRunner
from coscheduling.core.placement import Placer
from coscheduling.core.queue import Activator, SchedulingQueue
from coscheduling.framework.cycle_state import FAILURE, CycleFailure, CycleState, settle
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import ClusterEventsPlugin, Plugin
from coscheduling.framework.metrics import SchedulerMetrics
from coscheduling.framework.pacing import Pace
from coscheduling.framework.registry import Registry
from coscheduling.framework.runtime import EnabledPlugins, Framework
from coscheduling.framework.status import SUCCESS, Code, Status
from coscheduling.framework.waiting import WaitingPod, WaitingPods
from coscheduling.preemption.evict import ApiEvictor, Evictor
from coscheduling.preemption.ledger import Ledger

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.cluster.client import KubeClient
    from coscheduling.cluster.reporter import Reporter

log = logging.getLogger(__name__)


@dataclass
class CycleResult:
    """What one scheduling attempt decided, for tests and the gRPC surface."""

    pod_key: str
    status: Status
    node_name: str = ""


class WallClock:
    def now(self) -> float:
        return time.time()


class GroupNotices:
    """The StatusPublisher role: who hears that a gang's state changed (the PodGroup status
    writer listens), and events about PodGroups."""

    def __init__(self, reporter: Reporter | None) -> None:
        self._reporter = reporter
        self.listeners: list[Callable[[str], None]] = []

    def group_changed(self, group_key: str) -> None:
        for listener in self.listeners:
            listener(group_key)

    def group_event(self, group: PodGroup, kind: str, reason: str, message: str) -> None:
        if self._reporter is not None:
            self._reporter.group_event(group, kind, reason, message)

    def pod_event(self, pod: Pod, kind: str, reason: str, message: str) -> None:
        if self._reporter is not None:
            self._reporter.event(pod, kind, reason, message)


class ApiBinder:
    """The Binder role: a Binding through the API server, only while this replica leads."""

    def __init__(self, client: KubeClient | None, leading: Callable[[], bool]) -> None:
        self._client = client
        self._leading = leading

    def bind(self, pod: Pod, node_name: str) -> Status:
        if self._client is None:
            return Status.error("no API client: this scheduler cannot bind")
        if not self._leading():
            return Status.error("not binding: this replica does not hold the leader lease")
        try:
            self._client.bind(pod.namespace, pod.name, pod.uid, node_name)
        except ApiError as err:
            return Status.error(f"binding {pod.key} to {node_name} failed: {err}")
        return Status()


WAITS_FOR_VICTIMS = "waits for the pods its gang preempted to terminate"


class Scheduler:
    """Owns the cache, queue, framework and binding pool, and builds its plugins' roles."""

    def __init__(
        self,
        config: SchedulerConfig,
        registry: Registry,
        client: KubeClient | None,
        reporter: Reporter | None = None,
        metrics: SchedulerMetrics | None = None,
        evictor: Evictor | None = None,
        may_bind: Callable[[], bool] | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.reporter = reporter
        self.metrics = metrics or SchedulerMetrics()
        self.cache = Cache()
        self.listers = Listers()
        self.volumes = VolumeStore()  # claims, volumes, classes, CSINodes (their watches)
        self.devices = DeviceStore()  # DeviceClasses, ResourceSlices, ResourceClaims
        # Devices taken or given back change their nodes' answers for tables of alike pods.
        self.devices.on_change = lambda devices: self.cache.touch(
            None if devices is None else self.devices.nodes_of(devices))
        self.waiting_pods = WaitingPods(self._on_decision)
        # Re-ranking gangs by share (DRF) sums every gang's pods: paced on large clusters.
        self._order_pace = Pace()
        self._pool = ThreadPoolExecutor(config.binding_parallelism, thread_name_prefix="bind")
        # Preemption's writes (evictions, nominations) on threads of their own, so a storm
        # of evictions does not queue the binds of the gangs it made room for.
        self._preemption_pool = ThreadPoolExecutor(
            max(1, config.binding_parallelism // 2), thread_name_prefix="preempt")
        self.queue = SchedulingQueue(
            self._sort_key,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            max_unschedulable_seconds=config.pod_max_unschedulable_seconds,
        )
        self.event_plugins: list[ClusterEventsPlugin] = []
        self.activator = Activator(self.queue, self.cache.lock, lambda: self.event_plugins,
                                   lambda key: self.ledger.waiting(key),
                                   lambda pod: self.framework.run_pre_enqueue(pod).ok)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.active = threading.Event()  # cleared: watch and answer, but do not schedule
        self.active.set()
        # With leader election, whether this replica holds the lease: a bind goes out only
        # while it answers True.
        self.may_bind: Callable[[], bool] = may_bind or (lambda: True)
        if evictor is None and client is not None:
            evictor = ApiEvictor(client, reporter, config.scheduler_name,
                                 self._preemption_pool, failed=self._eviction_failed)
        self.ledger = Ledger(self.cache, self.activator.activate, self.metrics, evictor,
                             self._preemption_pool)
        self.notices = GroupNotices(reporter)
        self._runner = PluginsRunner()
        self.framework = self._build_framework(registry)
        self.placer = Placer(self.framework, self.cache, config.percentage_of_nodes_to_score,
                             config.signature_cache_size)
        self.event_plugins += [p for p in self.framework.instances.values()
                               if isinstance(p, ClusterEventsPlugin)]
        self.cycles = Cycles(self.framework, self.cache, self.placer, self.queue,
                             self.activator, self.metrics, reporter, config.scheduler_names)
        self._runner.attach(self.framework, self.cycles.gangs)

    def _build_framework(self, registry: Registry) -> Framework:
        """Every plugin the profile names, built with the roles of :class:`Handle`."""
        config, plugins = self.config, self.config.plugins
        self.handle = handle = Handle(
            cache=self.cache, groups=self.listers, priorities=self.listers,
            runner=self._runner, activator=self.activator, preemption=self.ledger,
            status=self.notices, binder=ApiBinder(self.client, self._may_bind),
            clock=WallClock(), waiting_pods=self.waiting_pods, metrics=self.metrics,
            volumes=self.volumes, api=self.client, devices=self.devices,
            events=self.reporter,
            scheduler_names=tuple(config.scheduler_names),
        )
        instances: dict[str, Plugin] = {
            name: registry.build(name, config.plugin_args.get(name, {}), handle)
            for name in sorted(plugins.all_names())
        }
        handle.gangs.install(instances.values())
        return Framework(
            instances,
            EnabledPlugins(
                queue_sort=plugins.queue_sort, pre_filter=plugins.pre_filter,
                filter=plugins.filter, post_filter=plugins.post_filter, score=plugins.score,
                reserve=plugins.reserve, permit=plugins.permit, pre_bind=plugins.pre_bind,
                bind=plugins.bind, post_bind=plugins.post_bind,
            ),
            self.waiting_pods,
            observe=self.metrics.observe_extension_point,
        )

    def _sort_key(self, pod: Pod) -> tuple[object, ...]:
        return self.framework.queue_sort.sort_key(pod)

    def _may_bind(self) -> bool:
        return self.active.is_set() and self.may_bind()

    def _eviction_failed(self, pod: Pod) -> None:
        self.ledger.failed(pod)

    # -- the scheduling cycle -------------------------------------------------------------
    def schedule_one(self, timeout: float | None = None) -> CycleResult | None:
        queued = self.queue.pop(timeout)
        if queued is None:
            return None
        pod = queued.pod
        started = time.perf_counter()
        with self.cache.lock:
            current = self.cache.pod(pod.key)
            if current is None or current.uid != pod.uid or current.node_name or current.deleting:
                self.queue.done(pod.key)
                return CycleResult(pod.key, Status(Code.SKIP, ("pod is gone or bound",)))
            if self.ledger.waiting(pod.key):
                # Its gang preempted and its victims still terminate: only the last one's
                # departure (which activates it) can change its answer. No attempt.
                self.queue.requeue(current, queued.last_reason, unschedulable=True)
                return CycleResult(pod.key, Status(Code.SKIP, (WAITS_FOR_VICTIMS,)))
            pod = current
            result = self._cycle(pod)
        outcome = {
            Code.SUCCESS: "scheduled", Code.WAIT: "scheduled", Code.ERROR: "error",
        }.get(result.status.code, "unschedulable")
        self.metrics.observe_attempt(outcome, time.perf_counter() - started)
        return result

    def _cycle(self, pod: Pod) -> CycleResult:
        state = CycleState()
        selected = self.cycles.select(state, pod)
        if selected.node is None:
            self._fail(pod, selected.status, selected.status.message)
            return CycleResult(pod.key, selected.status)
        status = self.cycles.reserve(state, pod, selected.node, popped=True)
        if status.ok:
            status = self._permit(state, pod, selected.node)
        return CycleResult(pod.key, status, selected.node)

    def _permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        status = self.cycles.permit(state, pod, node_name)
        if status.code == Code.WAIT:
            if self.reporter is not None and self.waiting_pods.get(pod.key) is not None:
                self.reporter.waiting(pod, node_name, status.message)
        elif not status.ok:
            self.cycles.undo(state, pod, node_name, status, reserved=True)
        else:
            self._pool.submit(self.cycles.bind, state, pod, node_name)
        return status

    def enqueue(self, pod: Pod) -> None:
        """A pending pod (new, or a new record of it) enters the queue. A new one that a
        PreEnqueue plugin holds back (a member of a gang that lacks members) is parked with
        the reason, reported as an attempt's would be, but without the attempt."""
        with self.cache.lock:
            status = SUCCESS if self.queue.get(pod.key) is not None \
                else self.framework.run_pre_enqueue(pod)
            if status.ok:
                self.queue.add(pod)
                return
            self.queue.park(pod, status.message)
            log.debug("%s: %s", pod.key, status.message)
            self._report(pod, status, status.message)  # reads the gang: under the lock

    def wake_group(self, group_key: str) -> None:
        """Every pod of the group may enter now (a member arrived or lost its gates): those
        PreEnqueue still holds say anew why, e.g. that scheduling gates hold the rest."""
        self.activator.move_groups([group_key])
        with self.cache.lock:
            for queued in self.queue.held(group_key):
                pod = self.cache.pod(queued.key) or queued.pod
                status = self.framework.run_pre_enqueue(pod)
                if not status.ok:  # the reporter writes only what changed
                    self.queue.note(queued.key, status.message)
                    self._report(pod, status, status.message)

    def _fail(self, pod: Pod, status: Status, message: str) -> None:
        log.debug("%s: %s", pod.key, message)
        unschedulable = status.rejected
        self.queue.requeue(pod, message, unschedulable=unschedulable)
        self._report(pod, status, message)

    def _report(self, pod: Pod, status: Status, message: str) -> None:
        if self.reporter is None:
            return
        if pod.group_key and any(p.held_by_gates(pod, status) for p in self.event_plugins):
            self.reporter.gated(pod, message)
        else:
            self.reporter.unschedulable(pod, message)

    # -- the binding cycle ----------------------------------------------------------------
    def _on_decision(self, waiting: WaitingPod) -> None:
        """Called by WaitingPods (under its lock): hand the decision to a worker."""
        self._pool.submit(self._after_wait, waiting)

    def _after_wait(self, waiting: WaitingPod) -> None:
        decision = waiting.decision or Status.error("no decision")
        pod, node_name = waiting.pod, waiting.node_name
        self.metrics.observe_permit_wait(
            "allowed" if decision.ok else "rejected", waiting.decided_at - waiting.since)
        with self.cache.lock:
            state = waiting.cycle if isinstance(waiting.cycle, CycleState) else CycleState()
            settle(state, decision)
            if not decision.ok:
                self.cycles.undo(state, pod, node_name, decision, reserved=True)
                return
        self.cycles.bind(state, pod, node_name)

    def withdraw(self, pod: Pod, reason: str) -> None:
        """``pod`` went away while waiting at Permit: its cycle fails, for that reason (its
        gang learned nothing about whether it fits). Call under the cache lock."""
        waiting = self.waiting_pods.get(pod.key)
        if waiting is None:
            return
        if isinstance(waiting.cycle, CycleState):
            waiting.cycle.write(FAILURE, CycleFailure(reason, withdrawn=True))
        self.waiting_pods.reject(pod.key, "Scheduler", f"pod {pod.key} was deleted")

    # -- running -------------------------------------------------------------------------
    def start_loops(self) -> None:
        for target, name in ((self._run_loop, "schedule"), (self._run_housekeeping, "house")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def reject_all_waiting(self, reason: str) -> None:
        with self.cache.lock:
            for waiting in self.waiting_pods:
                self.waiting_pods.reject(waiting.key, "Scheduler", reason)

    def alive(self) -> bool:
        """Liveness: the loops this scheduler started are still running."""
        return all(thread.is_alive() for thread in self._threads)

    def _run_loop(self) -> None:
        while not self._stop.is_set():
            if not self.active.wait(0.5):
                continue
            try:
                self.schedule_one(timeout=0.5)
            except Exception:
                log.exception("scheduling cycle failed")

    def _run_housekeeping(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.housekeeping()
            except Exception:
                log.exception("housekeeping failed")

    def refresh_queue_order(self) -> None:
        with self.cache.lock:
            changed = [p.queue_order_changed() for p in self.event_plugins]
        if any(changed):
            self.queue.rekey()

    def housekeeping(self) -> None:
        now = time.time()
        with self.cache.lock:
            keys: list[str] = []
            for plugin in self.event_plugins:
                keys += plugin.housekeeping(now)
        self.activator.move_groups(keys)
        if self._order_pace.due():
            with self._order_pace.run():
                self.refresh_queue_order()
        self.queue.flush_stale()
        self.metrics.set_queue_counts(self.queue.counts())

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        self.waiting_pods.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._preemption_pool.shutdown(wait=True, cancel_futures=False)
