"""NodeResourcesFit: does the pod fit the node's free room, and how full would the node be.

Free room counts three kinds of usage (see ``coscheduling.core.cache``): bound pods, assumed
pods, and capacity *claimed* by gangs for members not placed yet. Everything goes through
``NodeInfo.used(resource, excluding=pod.key)`` / ``pod_count(excluding=pod.key)`` so a
gang member is not blocked by the room its own gang claimed for it.

Scoring follows kube-scheduler's resource-allocation scorers with exact integer arithmetic:

* requested of cpu / memory = the node's *non-zero* requests (best-effort containers count as
  100m / 200Mi) of its pods and of what other gangs' members claimed there, + the pod's
  non-zero request; any other resource = ``used(resource, excluding=pod.key)`` + the pod's request;
* a resource whose allocatable is 0 on the node is left out (its weight does not count);
* a resource that is not cpu, memory or ephemeral-storage (a GPU, say) is left out when the
  pod does not request it, so a cpu-only pod is not steered by how busy the GPUs are;
* LeastAllocated ``(alloc - req) * 100 // alloc`` (0 when over-requested), MostAllocated
  ``min(req, alloc) * 100 // alloc``; node score ``sum(w * s) // sum(w)``;
* RequestedToCapacityRatio: ``u = req * 100 // alloc`` (100 when over-requested), shape
  scores 0..10 scaled x10, first / last point's score outside the shape, linear
  interpolation between points with Go's truncating division; node score
  ``round(sum(w * f(u)) / sum(w))`` (half up) over the resources with ``f(u) > 0``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coscheduling.api.quantity import CPU, EPHEMERAL_STORAGE, MEMORY, PODS
from coscheduling.framework.interfaces import (
    MAX_NODE_SCORE,
    FilterPlugin,
    PreFilterPlugin,
    ScorePlugin,
)
from coscheduling.framework.status import SUCCESS, Status
from coscheduling.plugins.noderesources.args import (
    LEAST_ALLOCATED,
    MAX_SHAPE_SCORE,
    MAX_UTILIZATION,
    MOST_ALLOCATED,
    FitArgs,
    parse_args,
)

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodeResourcesFit"
STATE_KEY = "NodeResourcesFit/request"

TOO_MANY_PODS = "Too many pods"
_NATIVE_ORDER = {CPU: 0, MEMORY: 1, EPHEMERAL_STORAGE: 2}
# Resources every node has a notion of; the others are skipped in Score when not requested.
_ALWAYS_SCORED = frozenset(_NATIVE_ORDER)
_SKIP = -1
"""Marks a scoring resource the pod does not take part in."""


def insufficient_reason(resource: str) -> str:
    """kube-scheduler's wording, which users grep events for."""
    return f"Insufficient {resource}"


def is_extended(resource: str) -> bool:
    """Extended resources (``vendor.com/thing``) are the only ones that can be ignored."""
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
    )


@dataclass(frozen=True, slots=True)
class PodRequest:
    """What PreFilter computes once per cycle for every Filter and Score call."""

    fit: tuple[tuple[str, int], ...]
    """Requested resources to check, cpu / memory / ephemeral-storage first."""
    score: tuple[int, ...]
    """The pod's amount per scoring resource (non-zero cpu / memory), or _SKIP."""


def fit_items(
    pod: Pod, ignored: frozenset[str] = frozenset(), ignored_groups: frozenset[str] = frozenset()
) -> tuple[tuple[str, int], ...]:
    """The pod's requests Filter checks, in a stable order so messages are too."""
    items = []
    for name, amount in pod.requests.items():
        if amount <= 0 or name == PODS:
            continue
        if (ignored or ignored_groups) and is_extended(name) and (
            name in ignored or name.split("/", 1)[0] in ignored_groups
        ):
            continue
        items.append((name, amount))
    items.sort(key=lambda item: (_NATIVE_ORDER.get(item[0], 3), item[0]))
    return tuple(items)


def insufficient(
    pod_key: str, items: tuple[tuple[str, int], ...], info: NodeInfo
) -> tuple[str, ...]:
    """Reasons ``items`` do not fit ``info`` (``()`` when they do); allocation-free on fit."""
    node = info.node
    if node is None:
        return ("node not found",)
    if info.closed:
        return (info.closed_reason(),)
    reasons: list[str] | None = None
    if info.pod_count(pod_key) + 1 > node.allowed_pods:
        reasons = [TOO_MANY_PODS]
    allocatable = node.allocatable
    for name, amount in items:
        if amount > allocatable.get(name, 0) - info.used(name, pod_key):
            if reasons is None:
                reasons = []
            reasons.append(insufficient_reason(name))
    return () if reasons is None else tuple(reasons)


def fits(pod: Pod, node: NodeInfo) -> list[str]:
    """Why ``pod`` does not fit ``node`` (empty when it fits), for other plugins to reuse.

    Same rules as NodeResourcesFit's Filter with default args (nothing ignored). In a loop
    over many nodes, call ``fit_items`` once and ``insufficient`` per node instead.
    """
    return list(insufficient(pod.key, fit_items(pod), node))


def _trunc_div(numerator: int, denominator: int) -> int:
    """Integer division rounding toward zero, as Go's, for decreasing shape segments."""
    if numerator >= 0:
        return numerator // denominator
    return -(-numerator // denominator)


def broken_linear(shape: tuple[tuple[int, int], ...], utilization: int) -> int:
    """The piecewise-linear shape at ``utilization``; flat outside its first / last point."""
    previous_x, previous_y = shape[0]
    if utilization <= previous_x:
        return previous_y
    for x, y in shape[1:]:
        if utilization <= x:
            return previous_y + _trunc_div(
                (y - previous_y) * (utilization - previous_x), x - previous_x
            )
        previous_x, previous_y = x, y
    return previous_y


def least_allocated(requested: int, allocatable: int) -> int:
    if allocatable == 0 or requested > allocatable:
        return 0
    return (allocatable - requested) * MAX_NODE_SCORE // allocatable


def most_allocated(requested: int, allocatable: int) -> int:
    if allocatable == 0:
        return 0
    return min(requested, allocatable) * MAX_NODE_SCORE // allocatable


class NodeResourcesFit(PreFilterPlugin, FilterPlugin, ScorePlugin):
    """Filter on free room (claims included); Score by one of three allocation strategies."""

    name = NAME

    def __init__(
        self, args: Mapping[str, Any] | FitArgs | None = None, handle: Handle | None = None
    ) -> None:
        # Validating again is idempotent and lets tests and factories pass raw args.
        parsed = args if isinstance(args, FitArgs) else parse_args(args or {}, "args")
        self.args: FitArgs = parsed
        self._resources = parsed.resources
        self._shape = tuple((u, s * (MAX_NODE_SCORE // MAX_SHAPE_SCORE)) for u, s in parsed.shape)
        self._ratio = parsed.strategy not in (LEAST_ALLOCATED, MOST_ALLOCATED)
        # The last pod's request: PreFilter and the signature ask for the same pod in turn.
        self._last: tuple[Pod, PodRequest] | None = None
        self._resource_score: Callable[[int, int], int] = (
            least_allocated if parsed.strategy == LEAST_ALLOCATED
            else most_allocated if parsed.strategy == MOST_ALLOCATED
            else self._ratio_score
        )

    # -- per-cycle request ---------------------------------------------------------------
    def compute_request(self, pod: Pod) -> PodRequest:
        last = self._last  # one tuple, read once: safe if another thread replaces it
        if last is not None and last[0] is pod:
            return last[1]
        request = self._compute_request(pod)
        self._last = (pod, request)
        return request

    def _compute_request(self, pod: Pod) -> PodRequest:
        score = []
        for name, _ in self._resources:
            if name == CPU:
                score.append(pod.nonzero_cpu)
            elif name == MEMORY:
                score.append(pod.nonzero_memory)
            else:
                amount = pod.requests.get(name, 0)
                score.append(amount if amount or name in _ALWAYS_SCORED else _SKIP)
        return PodRequest(
            fit_items(pod, self.args.ignored_resources, self.args.ignored_groups), tuple(score)
        )

    def _request(self, state: CycleState, pod: Pod) -> PodRequest:
        request = state.read(STATE_KEY)
        if request is None:
            request = self.compute_request(pod)
            state.write(STATE_KEY, request)
        return request  # type: ignore[no-any-return]

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        state.write(STATE_KEY, self.compute_request(pod))
        return SUCCESS

    def sign(self, pod: Pod) -> Hashable:
        """Filter and Score read the request and the node (a pod's own claim aside, which
        only matters to a pod that holds one; such pods are not served from shared tables)."""
        return self.compute_request(pod)

    # -- filter --------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        reasons = insufficient(pod.key, self._request(state, pod).fit, node)
        if not reasons:
            return SUCCESS
        if node.closed:  # it opens when the pod or node can be read, or is gone
            return Status.unresolvable(*reasons, plugin=NAME)
        return Status.unschedulable(*reasons, plugin=NAME)

    # -- score ---------------------------------------------------------------------------
    def _ratio_score(self, requested: int, allocatable: int) -> int:
        if requested > allocatable:
            return broken_linear(self._shape, MAX_UTILIZATION)
        return broken_linear(self._shape, requested * MAX_UTILIZATION // allocatable)

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        if node.node is None:
            return 0
        pod_amounts = self._request(state, pod).score
        allocatable = node.node.allocatable
        key = pod.key
        resource_score = self._resource_score
        ratio = self._ratio
        total = 0
        weights = 0
        for index, (name, weight) in enumerate(self._resources):
            amount = pod_amounts[index]
            if amount == _SKIP:
                continue
            alloc = allocatable.get(name, 0)
            if alloc <= 0:
                continue
            if name in (CPU, MEMORY):
                requested = node.nonzero_used(name == CPU, key) + amount
            else:
                requested = node.used(name, key) + amount
            value = resource_score(requested, alloc)
            if ratio and value <= 0:
                continue
            total += weight * value
            weights += weight
        if weights == 0:
            return 0
        if ratio:
            return (2 * total + weights) // (2 * weights)  # round half up, as Go's math.Round
        return total // weights
