"""Runs the plugins a profile enables at each extension point, and times each point."""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.interfaces import (
    MAX_NODE_SCORE,
    BindPlugin,
    FilterPlugin,
    GangAdmissionPlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreEnqueuePlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from coscheduling.framework.status import SUCCESS, Code, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.framework.waiting import WaitingPods

ObserveFn = Callable[[str, Status, float], None]
"""Called with (extension point, status, seconds) after each extension point runs."""

AdmitGang = Callable[[GangAdmissionPlugin, CycleState, "Pod"], Status]
"""The gang's cycle, run after a gang plugin's PreFilter passed (the core's Cycles)."""


@dataclass(frozen=True)
class EnabledPlugins:
    """Plugin names per extension point, in the order they run, and the score weights."""

    queue_sort: str
    pre_filter: Sequence[str] = ()
    filter: Sequence[str] = ()
    post_filter: Sequence[str] = ()
    score: Mapping[str, int] | None = None
    reserve: Sequence[str] = ()
    permit: Sequence[str] = ()
    pre_bind: Sequence[str] = ()
    bind: Sequence[str] = ()
    post_bind: Sequence[str] = ()


def _pick(instances: Mapping[str, Plugin], names: Iterable[str], kind: type[Any]) -> list[Any]:
    chosen: list[Any] = []
    for name in names:
        plugin = instances[name]
        if not isinstance(plugin, kind):
            raise TypeError(f"plugin {name} does not implement {kind.__name__}")
        chosen.append(plugin)
    return chosen


def _no_observer(point: str, status: Status, seconds: float) -> None:
    return None


class Framework:
    """The plugin runtime of one scheduling profile."""

    def __init__(
        self,
        instances: Mapping[str, Plugin],
        enabled: EnabledPlugins,
        waiting_pods: WaitingPods,
        observe: ObserveFn = _no_observer,
    ) -> None:
        self.instances = dict(instances)
        sorter = instances[enabled.queue_sort]
        if not isinstance(sorter, QueueSortPlugin):
            raise TypeError(f"plugin {enabled.queue_sort} does not implement QueueSortPlugin")
        self.queue_sort: QueueSortPlugin = sorter
        self.pre_filter_plugins: list[PreFilterPlugin] = _pick(
            instances, enabled.pre_filter, PreFilterPlugin)
        self.pre_enqueue_plugins = [p for p in self.pre_filter_plugins
                                    if isinstance(p, PreEnqueuePlugin)]
        self.filter_plugins: list[FilterPlugin] = _pick(instances, enabled.filter, FilterPlugin)
        self.post_filter_plugins: list[PostFilterPlugin] = _pick(
            instances, enabled.post_filter, PostFilterPlugin)
        weights = dict(enabled.score or {})
        self.score_plugins: list[ScorePlugin] = _pick(instances, weights, ScorePlugin)
        self.score_weights = [weights[p.name] for p in self.score_plugins]
        self.reserve_plugins: list[ReservePlugin] = _pick(
            instances, enabled.reserve, ReservePlugin)
        self.permit_plugins: list[PermitPlugin] = _pick(instances, enabled.permit, PermitPlugin)
        self.pre_bind_plugins: list[PreBindPlugin] = _pick(
            instances, enabled.pre_bind, PreBindPlugin)
        self.bind_plugins: list[BindPlugin] = _pick(instances, enabled.bind, BindPlugin)
        self.post_bind_plugins: list[PostBindPlugin] = _pick(
            instances, enabled.post_bind, PostBindPlugin)
        self.waiting_pods = waiting_pods
        self._observe = observe
        signers: dict[int, FilterPlugin | ScorePlugin] = {id(p): p for p in self.filter_plugins}
        signers.update((id(p), p) for p in self.score_plugins)
        self._signers = list(signers.values())

    def signature(self, pod: Pod) -> Hashable | None:
        """What decides Filter and Score for ``pod``: pods with equal signatures get equal
        results from a node in the same state. None if some plugin does not sign."""
        parts, unsigned = self.split_signature(pod)
        return None if unsigned else parts

    def split_signature(self, pod: Pod) -> tuple[Hashable, frozenset[str]]:
        """The signature of the plugins that sign ``pod`` (equal for pods whose results
        from those plugins are equal), and the names of the plugins that do not."""
        parts = []
        unsigned: list[str] = []
        for plugin in self._signers:
            part = plugin.sign(pod)
            if part is None:
                unsigned.append(plugin.name)
            else:
                parts.append(part)
        return tuple(parts), frozenset(unsigned)

    def _timed(self, point: str, started: float, status: Status) -> Status:
        self._observe(point, status, time.perf_counter() - started)
        return status

    # -- scheduling cycle ----------------------------------------------------------------
    def run_pre_enqueue(self, pod: Pod) -> Status:
        """The first PreEnqueue rejection, or success."""
        for plugin in self.pre_enqueue_plugins:
            status = plugin.pre_enqueue(pod)
            if not status.ok:
                return status.with_plugin(plugin.name)
        return SUCCESS

    def run_pre_filter(self, state: CycleState, pod: Pod,
                       admit: AdmitGang | None = None) -> Status:
        """PreFilter of every plugin, timed; ``admit`` is the gang's cycle (see
        :meth:`pre_filter_except`)."""
        started = time.perf_counter()
        return self._timed("PreFilter", started,
                           self.pre_filter_except(state, pod, "", admit))

    def pre_filter_except(self, state: CycleState, pod: Pod, skip_plugin: str,
                          admit: AdmitGang | None = None) -> Status:
        """PreFilter of every plugin but ``skip_plugin``, untimed (the gang's cycle places
        members with every PreFilter but the gang plugin's). A gang plugin's PreFilter that
        passes is followed at once by ``admit``, the gang's cycle, whose answer stands for
        it: the PreFilters after it see the gang admitted, as they always have."""
        for plugin in self.pre_filter_plugins:
            if plugin.name == skip_plugin:
                continue
            status = plugin.pre_filter(state, pod)
            if status.ok and admit is not None and isinstance(plugin, GangAdmissionPlugin):
                status = admit(plugin, state, pod)
            if status.code == Code.SKIP:
                state.skip_filter.add(plugin.name)
            elif not status.ok:
                return status.with_plugin(plugin.name)
        return SUCCESS

    def active_filters(self, state: CycleState) -> Sequence[FilterPlugin]:
        """The Filter plugins whose PreFilter did not skip them, for a pass over nodes."""
        skip = state.skip_filter
        if not skip:
            return self.filter_plugins
        return [plugin for plugin in self.filter_plugins if plugin.name not in skip]

    def run_filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        """All Filter plugins on one node; the first failure decides (not timed per node)."""
        return run_filters(self.active_filters(state), state, pod, node)

    def run_post_filter(
        self, state: CycleState, pod: Pod, filtered: Mapping[str, Status]
    ) -> Status:
        started = time.perf_counter()
        reasons: list[str] = []
        result: Status | None = None
        for plugin in self.post_filter_plugins:
            status = plugin.post_filter(state, pod, filtered)
            if status.ok or status.code == Code.ERROR:
                result = status.with_plugin(plugin.name)
                break
            # As kube-scheduler: the reasons of every plugin that could not help are kept
            # for the pod's condition; an unresolvable one ends the round.
            reasons.extend(status.reasons)
            if status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE:
                break
        if result is None:
            result = Status(Code.UNSCHEDULABLE, tuple(reasons))
        return self._timed("PostFilter", started, result)

    def run_score(self, state: CycleState, pod: Pod, nodes: Sequence[NodeInfo],
                  only: frozenset[str] | None = None) -> dict[str, int]:
        """Weighted sum of every Score plugin (of those named in ``only``) for each node."""
        started = time.perf_counter()
        totals = dict.fromkeys((n.name for n in nodes), 0)
        for plugin, weight in zip(self.score_plugins, self.score_weights, strict=True):
            if plugin.name in state.skip_score or (only is not None and plugin.name not in only):
                continue
            scores = {n.name: plugin.score(state, pod, n) for n in nodes}
            plugin.normalize_scores(state, pod, scores)
            for name, value in scores.items():
                totals[name] += weight * max(0, min(MAX_NODE_SCORE, value))
        self._timed("Score", started, SUCCESS)
        return totals

    def run_reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        started = time.perf_counter()
        for index, plugin in enumerate(self.reserve_plugins):
            status = plugin.reserve(state, pod, node_name)
            if not status.ok:
                for done in reversed(self.reserve_plugins[: index + 1]):
                    done.unreserve(state, pod, node_name)
                return self._timed("Reserve", started, status.with_plugin(plugin.name))
        return self._timed("Reserve", started, SUCCESS)

    def run_unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        started = time.perf_counter()
        for plugin in reversed(self.reserve_plugins):
            plugin.unreserve(state, pod, node_name)
        self._timed("Unreserve", started, SUCCESS)

    def run_permit(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Success, a rejection, or Wait (the pod is then parked in ``waiting_pods``)."""
        started = time.perf_counter()
        waiting_on: set[str] = set()
        reasons: list[str] = []
        timeout = float("inf")
        for plugin in self.permit_plugins:
            status, plugin_timeout = plugin.permit(state, pod, node_name)
            if status.code == Code.WAIT:
                waiting_on.add(plugin.name)
                reasons += status.reasons
                timeout = min(timeout, plugin_timeout)
            elif not status.ok and status.code != Code.SKIP:
                code = Code.ERROR if status.code == Code.ERROR else Code.UNSCHEDULABLE
                return self._timed(
                    "Permit", started, Status(code, status.reasons, plugin.name)
                )
        if waiting_on:
            self.waiting_pods.add(pod, node_name, timeout, waiting_on)
            waiting = Status(Code.WAIT, tuple(reasons), ",".join(sorted(waiting_on)))
            return self._timed("Permit", started, waiting)
        return self._timed("Permit", started, SUCCESS)

    # -- binding cycle -------------------------------------------------------------------
    def run_pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Every PreBind plugin in order; the first failure stops the binding."""
        started = time.perf_counter()
        for plugin in self.pre_bind_plugins:
            status = plugin.pre_bind(state, pod, node_name)
            if not status.ok and status.code != Code.SKIP:
                return self._timed("PreBind", started, status.with_plugin(plugin.name))
        return self._timed("PreBind", started, SUCCESS)

    def run_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        started = time.perf_counter()
        for plugin in self.bind_plugins:
            status = plugin.bind(state, pod, node_name)
            if status.code != Code.SKIP:
                return self._timed("Bind", started, status.with_plugin(plugin.name))
        return self._timed("Bind", started, Status.error("no bind plugin bound the pod"))

    def run_post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        started = time.perf_counter()
        for plugin in self.post_bind_plugins:
            plugin.post_bind(state, pod, node_name)
        self._timed("PostBind", started, SUCCESS)


def run_filters(plugins: Sequence[FilterPlugin], state: CycleState, pod: Pod,
                node: NodeInfo) -> Status:
    """``plugins`` (from ``Framework.active_filters``) on one node: the first failure."""
    for plugin in plugins:
        status = plugin.filter(state, pod, node)
        if status is not SUCCESS and status.code != Code.SUCCESS:
            return status.with_plugin(plugin.name)
    return SUCCESS
