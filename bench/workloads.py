"""The workloads (W1-W4 of issue 7, W5 of issue 14), with sizes that a `--scale` factor
shrinks for smoke runs.

Every pod asks for the same resources, so a node's capacity is a number of pod slots and
"capacity for about half of the gangs" in W3 is exact arithmetic, not a guess.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

# Node shape: 8 slots of 1 CPU; memory and the pod count never bind first.
NODE_CPU = 8
NODE_MEMORY = "32Gi"
NODE_PODS = 110
POD_CPU = "1"
POD_MEMORY = "1Gi"
SLOTS_PER_NODE = NODE_CPU  # one pod is 1 CPU
W3_SEED = 20260407


@dataclass(frozen=True)
class Workload:
    """Nodes to create and the gangs (sizes) and plain pods to create against them."""

    name: str
    title: str
    nodes: int
    gang_sizes: tuple[int, ...]
    plain_pods: int = 0
    contention: bool = False
    # Gang index -> "anti" / "spread" / "" (see bench.cluster.constrain), for W5.
    constraints: tuple[str, ...] = ()

    def constraint(self, gang_index: int) -> str:
        return self.constraints[gang_index] if self.constraints else ""

    @property
    def pods(self) -> int:
        return sum(self.gang_sizes) + self.plain_pods

    @property
    def slots(self) -> int:
        return self.nodes * SLOTS_PER_NODE

    def describe(self) -> str:
        parts = [f"{self.nodes} nodes"]
        if self.gang_sizes:
            sizes = sorted(set(self.gang_sizes))
            shape = (f"of {sizes[0]}" if len(sizes) == 1 else f"of {sizes[0]}-{sizes[-1]}")
            parts.append(f"{len(self.gang_sizes)} gangs {shape} ({sum(self.gang_sizes)} pods)")
        if self.plain_pods:
            parts.append(f"{self.plain_pods} pods without groups")
        if self.contention:
            parts.append(f"{self.slots} pod slots")
        if self.constraints:
            parts.append(f"{self.constraints.count('anti')} with hostname anti-affinity, "
                         f"{self.constraints.count('spread')} spread over zones")
        return ", ".join(parts)


def _scaled(value: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(value * scale))


def build_workloads(scale: float = 1.0) -> dict[str, Workload]:
    """W1..W5 as the issues define them, every count multiplied by `scale`."""
    w3_gangs = _scaled(400, scale, minimum=4)
    rng = random.Random(W3_SEED)  # the same mix of sizes on every run
    sizes = tuple(rng.randint(2, 32) for _ in range(w3_gangs))
    # W5: 600 gangs of 2-8 (about 3000 pods on 1000 nodes): a third keep one member per
    # node, a third spread evenly over the zones, a third are plain gangs.
    w5_sizes = tuple(rng.randint(2, 8) for _ in range(_scaled(600, scale)))
    # Capacity for about half of the gangs: half of the pods, in whole nodes.
    w3_nodes = max(1, math.ceil(sum(sizes) / 2 / SLOTS_PER_NODE))
    return {
        "W1": Workload("W1", "gangs of 5, all fit", _scaled(1000, scale),
                       (5,) * _scaled(1000, scale)),
        "W2": Workload("W2", "gangs of 20 on 5000 nodes, all fit", _scaled(5000, scale),
                       (20,) * _scaled(500, scale)),
        "W3": Workload("W3", "contention: room for about half of the gangs", w3_nodes, sizes,
                       contention=True),
        "W4": Workload("W4", "plain pods, no groups", _scaled(1000, scale), (),
                       plain_pods=_scaled(5000, scale)),
        "W5": Workload("W5", "gangs with anti-affinity and topology spread, all fit",
                       _scaled(1000, scale), w5_sizes,
                       constraints=tuple(("anti", "spread", "")[i % 3]
                                         for i in range(len(w5_sizes)))),
    }
