"""NodeResourcesBalancedAllocation: prefer nodes whose resources stay evenly used.

kube-scheduler's rule, computed the same way (floating point, truncated at the end):

* for each configured resource (cpu and memory by default) the fraction
  ``(used on the node + the pod's request) / allocatable``, capped at 1, where *used* is
  the node's real requests (not the best-effort defaults NodeResourcesFit scores with) plus
  what other gangs claimed there; a resource the node does not have, or an extended resource
  the pod does not request, is left out;
* score ``int((1 - std) * 100)``, std being the standard deviation of those fractions
  (``|f1 - f2| / 2`` for two of them, 0 for fewer);
* a pod that requests none of the resources (best effort) is not scored by this plugin
  (every node gets 0), so best-effort pods do not all pile onto one node.

Args (kube-scheduler's ``NodeResourcesBalancedAllocationArgs``)::

    resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]  # weight must be 1
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.quantity import CPU, EPHEMERAL_STORAGE, MEMORY
from coscheduling.config.errors import ConfigError, as_mapping, reject_unknown
from coscheduling.framework.interfaces import MAX_NODE_SCORE, ScorePlugin
from coscheduling.plugins.noderesources.args import _resources as parse_resources

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodeResourcesBalancedAllocation"
_NATIVE = frozenset({CPU, MEMORY, EPHEMERAL_STORAGE})


def parse_args(raw: Mapping[str, Any] | None, path: str = "") -> tuple[str, ...]:
    """The resource names to balance; errors are ConfigError naming the field."""
    args = as_mapping(raw, path)
    reject_unknown(args, {"resources"}, path)
    where = f"{path}.resources" if path else "resources"
    resources = parse_resources(args.get("resources"), where)
    for index, (_, weight) in enumerate(resources):
        if weight != 1:
            raise ConfigError(f"{where}[{index}].weight", f"must be 1, got {weight}")
    return tuple(name for name, _ in resources)


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The registry's ArgsValidator: the args with defaults filled in."""
    return {"resources": [{"name": n, "weight": 1} for n in parse_args(raw, path)]}


def balance(fractions: list[float]) -> int:
    """``int((1 - std) * 100)`` of the usage fractions (already capped at 1)."""
    std = 0.0
    if len(fractions) == 2:
        std = abs(fractions[0] - fractions[1]) / 2
    elif len(fractions) > 2:
        # Plain left-to-right sums, as Go adds (Python's sum() compensates rounding).
        total = 0.0
        for fraction in fractions:
            total += fraction
        mean = total / len(fractions)
        squares = 0.0
        for fraction in fractions:
            squares += (fraction - mean) * (fraction - mean)
        std = math.sqrt(squares / len(fractions))
    return int((1 - std) * MAX_NODE_SCORE)


class NodeResourcesBalancedAllocation(ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        self.resources = parse_args(args, "args")
        # The last pod's request: the signature and every node's Score ask for the same pod.
        self._last: tuple[Pod, tuple[tuple[str, int], ...]] | None = None

    def requests(self, pod: Pod) -> tuple[tuple[str, int], ...]:
        """(resource, the pod's real request) for each resource to balance: extended
        resources the pod does not ask for are left out; () for a best-effort pod."""
        last = self._last  # one tuple, read once: safe if another thread replaces it
        if last is not None and last[0] is pod:
            return last[1]
        requests = pod.requests
        kept = []
        asked = False
        for name in self.resources:
            amount = requests.get(name, 0)
            if amount:
                asked = True
                kept.append((name, amount))
            elif name in _NATIVE:
                kept.append((name, 0))
        wanted = tuple(kept) if asked else ()
        self._last = (pod, wanted)
        return wanted

    def sign(self, pod: Pod) -> Hashable:
        """Score reads the pod's requests and the one node (a pod's own claim aside, which
        only matters to a pod that holds one; such pods are not served from shared tables)."""
        return self.requests(pod)

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        info = node.node
        wanted = self.requests(pod)
        if info is None or not wanted:
            return 0
        allocatable = info.allocatable
        key = pod.key
        fractions = []
        for name, amount in wanted:
            alloc = allocatable.get(name, 0)
            if alloc <= 0:
                continue
            fraction = float(node.used(name, key) + amount) / float(alloc)
            fractions.append(1.0 if fraction > 1 else fraction)
        return balance(fractions)
