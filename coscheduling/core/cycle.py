"""A pod's cycle from PreFilter to PostBind, or its undoing: one owner, used by the
scheduling loop, by the gRPC server's caller-driven cycles and by its one-call Schedule alike.

Selecting a node runs PreFilter, then the one node choice of
:meth:`~coscheduling.core.placement.Placer.select` (the node the pod's gang claimed for it if
that node still passes Filter, else Filter and Score over the nodes), which a gang's cycle
(:mod:`~coscheduling.core.gangcycle`) uses for each member it places too. Assume takes the
pod's room in the cache before Reserve; Permit's answer is recorded in the cycle state as
framework data (permitted, or why it failed), which Unreserve plugins read; a Permit wait's
decision is settled the same way. Undoing a cycle unreserves it, forgets the assumed pod,
tells waiting gangs there is room, and gives the pod back to the queue.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coscheduling.core.gangcycle import GangCycle
from coscheduling.framework.cycle_state import FAILURE, PERMITTED, CycleFailure, CycleState
from coscheduling.framework.status import Code, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.cluster.reporter import Reporter
    from coscheduling.core.cache import Cache
    from coscheduling.core.placement import Placer
    from coscheduling.core.queue import Activator, SchedulingQueue
    from coscheduling.framework.metrics import SchedulerMetrics
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.framework.runtime import Framework

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Selection:
    """The node chosen for a pod, or why none was: PreFilter's status when it refused it,
    else Filter's summary ('0/N nodes are available: ...') and ``failures``."""

    node: str | None
    status: Status
    failures: Mapping[str, Status] | None = None
    """When no node passed Filter: each failed node's status (PostFilter may help)."""


class Cycles:
    """Every step of a pod's cycle; call under the cache lock, except :meth:`bind` (the
    binding cycle talks to the API server)."""

    def __init__(self, framework: Framework, cache: Cache, placer: Placer,
                 queue: SchedulingQueue, activator: Activator, metrics: SchedulerMetrics,
                 reporter: Reporter | None, scheduler_names: Collection[str]) -> None:
        self._fw = framework
        self._cache = cache
        self._placer = placer
        self._queue = queue
        self._activator = activator
        self._metrics = metrics
        self._reporter = reporter
        self._names = frozenset(scheduler_names)
        self.gangs = GangCycle(framework, placer)

    def select(self, state: CycleState, pod: Pod) -> Selection:
        """PreFilter, then the node for ``pod`` (see the module's docstring); when no node
        passes Filter, PostFilter (which may preempt: the victims go, the pod is nominated
        and tries again later), its answer added to Filter's. Nothing is held for the pod
        itself (PreFilter of a gang member may claim room for its gang)."""
        status = self.pre_filter(state, pod)
        if not status.ok:
            return Selection(None, status)
        choice = self._placer.select(state, pod)
        if choice.node is None:
            message = choice.summary()
            post = self._fw.run_post_filter(state, pod, choice.failures)
            if post.reasons:
                message = f"{message} {post.message}."
            why = Status(Code.UNSCHEDULABLE, (message,), "Filter")
            return Selection(None, why, choice.failures)
        return Selection(choice.node, status)

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """PreFilter, with the gang's cycle run where the gang plugin's PreFilter asks for
        it (:meth:`~coscheduling.core.gangcycle.GangCycle.admit`): one owner of both, for
        the loop and the gRPC server."""
        return self._fw.run_pre_filter(state, pod, self.gangs.admit)

    def reserve_chosen(self, state: CycleState, pod: Pod, info: NodeInfo) -> Status:
        """Reserve ``pod`` on a node its caller chose (no selection ran): the node's Filter
        first, as the loop filters every node it places on, so no caller can put a pod
        where it does not fit; refused with Filter's status, nothing held."""
        status = self._fw.run_filter(state, pod, info)
        if not status.ok:
            return status
        return self.reserve(state, pod, info.name, popped=False)

    def reserve(self, state: CycleState, pod: Pod, node_name: str, *,
                popped: bool) -> Status:
        """Assume ``pod`` on ``node_name`` (its room is taken), take it off the queue
        (``popped``: the loop took it from there), then run Reserve; undone on failure (a
        remote caller hears why from the answer, with no event)."""
        self._cache.assume(pod, node_name)
        if popped:
            self._queue.done(pod.key)
        else:
            self._queue.delete(pod.key)  # an assumed pod is not queued
        status = self._fw.run_reserve(state, pod, node_name)
        if not status.ok:
            self.undo(state, pod, node_name, status, reserved=False, report=popped)
        return status

    def permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Run Permit and record its answer: a waiting pod keeps its cycle state (where a
        deletion records why it failed), a permitted one is marked so, a rejected one
        carries the reason to Unreserve."""
        status = self._fw.run_permit(state, pod, node_name)
        if status.code == Code.WAIT:
            waiting = self._fw.waiting_pods.get(pod.key)
            if waiting is not None:  # None: its deadline had already passed
                waiting.cycle = state
        elif status.ok:
            state.write(PERMITTED, True)
        else:
            state.write(FAILURE, CycleFailure(status.message))
        return status

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """The binding cycle of a permitted pod: PreBind, Bind, PostBind; undone (and the
        pod retried) when PreBind or Bind fails, an unexpected exception included: it runs
        on a worker that would otherwise drop it, leaving the pod assumed and never bound
        (a released gang's member: a partial gang)."""
        try:
            status = self._fw.run_pre_bind(state, pod, node_name)
            if status.ok:
                status = self._fw.run_bind(state, pod, node_name)
        except Exception as err:  # any plugin failure is this pod's error, not the worker's
            log.exception("binding cycle of %s to %s raised", pod.key, node_name)
            status = Status.error(f"binding failed: {type(err).__name__}: {err}")
        if not status.ok:
            log.warning("bind of %s to %s failed: %s", pod.key, node_name, status.message)
            with self._cache.lock:
                self.undo(state, pod, node_name, Status.error(status.message), reserved=True)
            return
        self._metrics.pods_bound.inc()
        log.debug("%s: bound to %s", pod.key, node_name)
        self._fw.run_post_bind(state, pod, node_name)
        if self._reporter is not None:
            self._reporter.scheduled(pod, node_name)

    def undo(self, state: CycleState, pod: Pod, node_name: str, status: Status, *,
             reserved: bool, report: bool = True) -> None:
        """Unreserve (if Reserve ran) and forget the assumed pod; waiting gangs hear there
        is room; the pod, if it is still there and still this scheduler's, waits again
        (with a FailedScheduling event when ``report``)."""
        if reserved:
            self._fw.run_unreserve(state, pod, node_name)
        self._cache.forget(pod.key)
        self._activator.capacity_freed_locked(exclude=pod.group_key)
        current = self._cache.pod(pod.key)
        if current is None or current.uid != pod.uid or current.scheduler_name not in self._names:
            return
        self._queue.requeue(current, status.message, unschedulable=status.rejected)
        if report and self._reporter is not None:
            self._reporter.unschedulable(current, status.message)

