"""The scheduling loop: one pod at a time through the framework, binding in a worker pool.

Scheduling cycle (one thread, under the cache lock): PreFilter -> Filter on a sample of
nodes -> PostFilter when none fits -> Score -> pick -> assume -> Reserve -> Permit.
Binding cycle (worker pool, no lock while talking to the API server): Bind -> PostBind.
A pod that must Wait at Permit occupies no worker: its decision (allow or reject) arrives
as a callback and only then is its binding, or its undoing, queued.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

from cachetools import LRUCache

from coscheduling.api.volumes import VolumeStore
from coscheduling.cache import Cache
from coscheduling.cluster.client import ApiError
from coscheduling.config.types import SchedulerConfig
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.interfaces import ClusterEventsPlugin, Plugin
from coscheduling.framework.registry import Registry
from coscheduling.framework.runtime import EnabledPlugins, Framework
from coscheduling.framework.status import Code, Status
from coscheduling.framework.waiting import WaitingPod, WaitingPods
from coscheduling.metrics import SchedulerMetrics
from coscheduling.placement import Placer
from coscheduling.plugins.coscheduling.plugin import PERMITTED, REJECTION, Rejection
from coscheduling.preemption.evict import ApiEvictor, Evictor
from coscheduling.queue import SchedulingQueue

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.cache import NodeInfo
    from coscheduling.cluster.client import KubeClient
    from coscheduling.cluster.reporter import Reporter
    from coscheduling.preemption.pdb import Budget

log = logging.getLogger(__name__)


@dataclass
class _Eviction:
    """One preemption's victims not seen gone yet, and the pods waiting for their room."""

    takers: tuple[str, ...]
    left: set[str]


@dataclass
class CycleResult:
    """What one scheduling attempt decided, for tests and the gRPC surface."""

    pod_key: str
    status: Status
    node_name: str = ""


class Scheduler:
    """Owns the cache, queue, framework and binding pool; is the plugins' Handle."""

    def __init__(
        self,
        config: SchedulerConfig,
        registry: Registry,
        client: KubeClient | None,
        reporter: Reporter | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.config = config
        self.client = client
        self.reporter = reporter
        self.metrics = metrics or SchedulerMetrics()
        self._cache = Cache()
        self.volumes = VolumeStore()  # claims, volumes, classes, CSINodes (their watches)
        self._podgroups: dict[str, PodGroup] = {}
        self._waiting = WaitingPods(self._on_decision)
        self._pool = ThreadPoolExecutor(config.binding_parallelism, thread_name_prefix="bind")
        # Preemption's writes (evictions, nominations) on threads of their own, so a storm
        # of evictions does not queue the binds of the gangs it made room for.
        self._preemption_pool = ThreadPoolExecutor(
            max(1, config.binding_parallelism // 2), thread_name_prefix="preempt")
        plugins = config.plugins
        instances: dict[str, Plugin] = {
            name: registry.build(name, config.plugin_args.get(name, {}), self)
            for name in sorted(plugins.all_names())
        }
        self.framework = Framework(
            instances,
            EnabledPlugins(
                queue_sort=plugins.queue_sort, pre_filter=plugins.pre_filter,
                filter=plugins.filter, post_filter=plugins.post_filter, score=plugins.score,
                reserve=plugins.reserve, permit=plugins.permit, pre_bind=plugins.pre_bind,
                bind=plugins.bind,
                post_bind=plugins.post_bind,
            ),
            self._waiting,
            observe=self.metrics.observe_extension_point,
        )
        self.placer = Placer(self.framework, self._cache, config.percentage_of_nodes_to_score,
                             config.signature_cache_size)
        self.event_plugins = [p for p in instances.values() if isinstance(p, ClusterEventsPlugin)]
        self.queue = SchedulingQueue(
            self.framework.queue_sort.sort_key,
            initial_backoff=config.pod_initial_backoff_seconds,
            max_backoff=config.pod_max_backoff_seconds,
            max_unschedulable_seconds=config.pod_max_unschedulable_seconds,
        )
        # Members that finished (Succeeded/Failed), by group: the main pod watch leaves them out.
        self.finished: dict[str, dict[str, str]] = {}
        self.group_listeners: list[Callable[[str], None]] = []
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.active = threading.Event()  # cleared: watch and answer, but do not schedule
        self.active.set()
        # What preemption reads and writes: PriorityClass values and PodDisruptionBudgets
        # (from their watches), and the writer of evictions and nominations.
        self.priority_classes: dict[str, int] = {}
        self.pdbs: dict[str, Budget] = {}
        # Uids of the pods preemption evicted (their room goes to the preemptor, not to a
        # replacement of their own), the latest few thousand, with their preemption.
        self._evicted: LRUCache[str, _Eviction] = LRUCache(maxsize=10_000)
        self.evictor: Evictor | None = (
            ApiEvictor(client, reporter, config.scheduler_name, self._preemption_pool,
                       failed=self.eviction_failed)
            if client is not None else None)
        # Leader election sets this; a bind goes out only while it answers True.
        self.may_bind: Callable[[], bool] = lambda: True

    # -- Handle ------------------------------------------------------------------------
    @property
    def cache(self) -> Cache:
        return self._cache

    @property
    def waiting_pods(self) -> WaitingPods:
        return self._waiting

    def podgroup(self, key: str) -> PodGroup | None:
        return self._podgroups.get(key)

    def podgroups(self) -> dict[str, PodGroup]:
        return self._podgroups

    def activate(self, pod_keys: Iterable[str]) -> None:
        self.queue.move_keys(pod_keys, skip_backoff=True)

    def now(self) -> float:
        return time.time()

    def finished_members(self, group_key: str) -> dict[str, str]:
        return self.finished.get(group_key, {})

    def group_changed(self, group_key: str) -> None:
        for listener in self.group_listeners:
            listener(group_key)

    def bind(self, pod: Pod, node_name: str) -> Status:
        if self.client is None:
            return Status.error("no API client: this scheduler cannot bind")
        if not self.active.is_set() or not self.may_bind():
            return Status.error("not binding: this replica does not hold the leader lease")
        try:
            self.client.bind(pod.namespace, pod.name, pod.uid, node_name)
        except ApiError as err:
            return Status.error(f"binding {pod.key} to {node_name} failed: {err}")
        return Status()

    def filter_node(self, pod: Pod, node: NodeInfo, skip_plugin: str = "") -> Status:
        state = CycleState()
        status = self.framework.pre_filter_except(state, pod, skip_plugin)
        return status if not status.ok else self.framework.run_filter(state, pod, node)

    def evicted_by_us(self, pod: Pod) -> bool:
        return pod.uid in self._evicted

    def eviction_failed(self, pod: Pod) -> None:
        """``pod``'s eviction could not be sent: it is no victim any more, and its room is its
        own again. The pods that waited for it stop waiting and, at their next attempt (after
        their backoff: a refusal may well repeat), find room elsewhere or preempt again. A
        victim already seen terminating was evicted after all (an answer was lost)."""
        with self._cache.lock:
            current = self._cache.pod(pod.key)
            if current is not None and current.uid == pod.uid and current.deleting:
                return
            eviction = self._evicted.pop(pod.uid, None)
            self._cache.take_back(pod)
            if eviction is not None:
                eviction.left.discard(pod.uid)
                eviction.takers = ()

    def victim_gone(self, pod: Pod) -> None:
        """A pod preemption evicted is gone: once all of its preemption's victims are, the
        pods they made room for go straight to the active queue. Their room is claimed, so
        waiting out a backoff would only leave it idle."""
        eviction = self._evicted.get(pod.uid)
        if eviction is None:
            return
        eviction.left.discard(pod.uid)
        if not eviction.left and eviction.takers:
            self.activate(eviction.takers)
            eviction.takers = ()

    def group_event(self, group: PodGroup, kind: str, reason: str, message: str) -> None:
        if self.reporter is not None:
            self.reporter.group_event(group, kind, reason, message)

    def priority_class(self, name: str) -> int | None:
        return self.priority_classes.get(name)

    def budgets(self) -> Iterable[Budget]:
        return list(self.pdbs.values())

    def preemption_enabled(self) -> bool:
        return any(p.name == "DefaultPreemption" for p in self.framework.post_filter_plugins)

    def evict(self, victims: Sequence[Pod], preemptor: str, takers: Sequence[str]) -> None:
        self.metrics.preemption_victims.observe(float(len(victims)))
        self._cache.hand_over(victims, takers)
        eviction = _Eviction(tuple(takers), {v.uid for v in victims})
        for victim in victims:
            self._evicted[victim.uid] = eviction
        evictor = self.evictor
        if evictor is not None and victims:
            evictor.evict(list(victims), preemptor)

    def nominate(self, pod: Pod, node_name: str) -> None:
        evictor = self.evictor
        if evictor is not None:
            self._preemption_pool.submit(evictor.nominate, pod, node_name)

    def select_node(self, pod: Pod, skip_plugin: str) -> tuple[str | None, str]:
        state = CycleState()
        status = self.framework.pre_filter_except(state, pod, skip_plugin)
        if not status.ok:
            return None, f"{pod.name}: {status.message}"
        choice = self.placer.choose(state, pod)
        return choice.node, "" if choice.node else choice.summary()

    # -- hooks for cluster events -------------------------------------------------------
    def move_groups(self, group_keys: Iterable[str]) -> None:
        keys = set(group_keys)
        if keys:
            self.queue.move(lambda q: q.pod.group_key in keys)

    def capacity_freed(self) -> None:
        with self._cache.lock:
            self.capacity_freed_locked()

    # -- the scheduling cycle -------------------------------------------------------------
    def schedule_one(self, timeout: float | None = None) -> CycleResult | None:
        queued = self.queue.pop(timeout)
        if queued is None:
            return None
        pod = queued.pod
        started = time.perf_counter()
        with self._cache.lock:
            current = self._cache.pod(pod.key)
            if current is None or current.uid != pod.uid or current.node_name or current.deleting:
                self.queue.done(pod.key)
                return CycleResult(pod.key, Status(Code.SKIP, ("pod is gone or bound",)))
            pod = current
            result = self._cycle(pod)
        outcome = {
            Code.SUCCESS: "scheduled", Code.WAIT: "scheduled", Code.ERROR: "error",
        }.get(result.status.code, "unschedulable")
        self.metrics.observe_attempt(outcome, time.perf_counter() - started)
        return result

    def _cycle(self, pod: Pod) -> CycleResult:
        fw = self.framework
        state = CycleState()
        status = fw.run_pre_filter(state, pod)
        if not status.ok:
            self._fail(pod, status, status.message)
            return CycleResult(pod.key, status)
        node_name = self._claimed_node(state, pod)
        if not node_name:
            choice = self.placer.choose(state, pod)
            if choice.node is None:
                message = choice.summary()
                post = fw.run_post_filter(state, pod, choice.failures)
                if post.reasons:
                    message = f"{message} {post.message}."
                status = Status(Code.UNSCHEDULABLE, (message,), "Filter")
                self._fail(pod, status, message)
                return CycleResult(pod.key, status)
            node_name = choice.node
        self._cache.assume(pod, node_name)
        self.queue.done(pod.key)
        status = fw.run_reserve(state, pod, node_name)
        if not status.ok:
            self._undo(state, pod, node_name, status, reserved=False)
            return CycleResult(pod.key, status, node_name)
        status = fw.run_permit(state, pod, node_name)
        if status.code == Code.WAIT:
            waiting = self._waiting.get(pod.key)
            if waiting is not None:
                waiting.cycle = state
                if self.reporter is not None:
                    self.reporter.waiting(pod, node_name, status.message)
            return CycleResult(pod.key, status, node_name)
        if not status.ok:
            state.write(REJECTION, Rejection(status.message))
            self._undo(state, pod, node_name, status, reserved=True)
            return CycleResult(pod.key, status, node_name)
        state.write(PERMITTED, True)
        self._pool.submit(self._bind_cycle, state, pod, node_name)
        return CycleResult(pod.key, status, node_name)

    def _claimed_node(self, state: CycleState, pod: Pod) -> str:
        """The node a gang claimed for ``pod``, if it still passes Filter: the pod goes
        there without scoring, as kube-scheduler tries a nominated node first."""
        claimed = self._cache.claimed_node(pod.key)
        info = self._cache.node(claimed) if claimed else None
        if info is None or not self.framework.run_filter(state, pod, info).ok:
            return ""
        return claimed

    def _fail(self, pod: Pod, status: Status, message: str) -> None:
        log.debug("%s: %s", pod.key, message)
        unschedulable = status.rejected
        self.queue.requeue(pod, message, unschedulable=unschedulable)
        if self.reporter is None:
            return
        if pod.group_key and any(p.held_by_gates(pod, status) for p in self.event_plugins):
            self.reporter.gated(pod, message)
        else:
            self.reporter.unschedulable(pod, message)

    def _undo(self, state: CycleState, pod: Pod, node_name: str, status: Status,
              *, reserved: bool, requeue: bool = True) -> None:
        """Unreserve and forget a pod that got as far as assume; then retry it later."""
        if reserved:
            self.framework.run_unreserve(state, pod, node_name)
        self._cache.forget(pod.key)
        self.capacity_freed_locked(exclude=pod.group_key)
        if requeue and self._cache.pod(pod.key) is not None:
            self.queue.requeue(pod, status.message, unschedulable=status.rejected)
            if self.reporter is not None:
                self.reporter.unschedulable(pod, status.message)

    def capacity_freed_locked(self, exclude: str = "") -> None:
        """Room appeared: frozen gangs and parked pods may fit now (not ``exclude``'s)."""
        for plugin in self.event_plugins:
            plugin.capacity_freed(exclude)
        if exclude:
            self.queue.move(lambda q: q.pod.group_key != exclude)
        else:
            self.queue.move()

    # -- the binding cycle ----------------------------------------------------------------
    def _on_decision(self, waiting: WaitingPod) -> None:
        """Called by WaitingPods (under its lock): hand the decision to a worker."""
        self._pool.submit(self._after_wait, waiting)

    def _after_wait(self, waiting: WaitingPod) -> None:
        decision = waiting.decision or Status.error("no decision")
        pod, node_name = waiting.pod, waiting.node_name
        self.metrics.observe_permit_wait(
            "allowed" if decision.ok else "rejected", waiting.decided_at - waiting.since)
        with self._cache.lock:
            state = waiting.cycle if isinstance(waiting.cycle, CycleState) else CycleState()
            if not decision.ok:
                if state.read(REJECTION) is None:
                    timed_out = decision.plugin == "Permit"
                    state.write(REJECTION, Rejection(decision.message, freeze=True,
                                                     timed_out=timed_out))
                self._undo(state, pod, node_name, decision, reserved=True)
                return
            state.write(PERMITTED, True)
        self._bind_cycle(state, pod, node_name)

    def _bind_cycle(self, state: CycleState, pod: Pod, node_name: str) -> None:
        status = self.framework.run_pre_bind(state, pod, node_name)
        if status.ok:
            status = self.framework.run_bind(state, pod, node_name)
        if not status.ok:
            log.warning("bind of %s to %s failed: %s", pod.key, node_name, status.message)
            with self._cache.lock:
                self._undo(state, pod, node_name, Status.error(status.message), reserved=True)
            return
        self.metrics.pods_bound.inc()
        log.debug("%s: bound to %s", pod.key, node_name)
        self.framework.run_post_bind(state, pod, node_name)
        if self.reporter is not None:
            self.reporter.scheduled(pod, node_name)

    # -- running -------------------------------------------------------------------------
    def start_loops(self) -> None:
        for target, name in ((self._run_loop, "schedule"), (self._run_housekeeping, "house")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def reject_all_waiting(self, reason: str) -> None:
        with self._cache.lock:
            for waiting in self._waiting:
                self._waiting.reject(waiting.key, "Scheduler", reason)

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
        with self._cache.lock:
            changed = [p.queue_order_changed() for p in self.event_plugins]
        if any(changed):
            self.queue.rekey()

    def housekeeping(self) -> None:
        now = self.now()
        with self._cache.lock:
            keys: list[str] = []
            for plugin in self.event_plugins:
                keys += plugin.housekeeping(now)
        self.move_groups(keys)
        self.refresh_queue_order()
        self.queue.flush_stale()
        self.metrics.set_queue_counts(self.queue.counts())

    def stop(self) -> None:
        self._stop.set()
        self.queue.close()
        self._waiting.stop()
        for thread in self._threads:
            thread.join(timeout=5)
        self._pool.shutdown(wait=True, cancel_futures=False)
        self._preemption_pool.shutdown(wait=True, cancel_futures=False)
