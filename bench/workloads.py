"""The workloads (W1-W4 of issue 7, W5 of issue 14, W6, W7 and trickled arrival of issue
18, W8 and W9 of issues 24 and 25, W10 and W11 of issue 28), with sizes that a `--scale`
factor shrinks for smoke runs. Published figures come from scale 1.

Every pod asks for the same resources, so a node's capacity is a number of pod slots and
"capacity for about half of the gangs" in W3 is exact arithmetic, not a guess.

W10 is the large-cluster point: 15000 nodes and 50000 pending gang pods (6250 gangs of 8).
W11-1000, W11-2000 and W11-3000 are kube-scheduler's scheduler_perf gang workloads
(test/integration/scheduler_perf/podgroup/gangscheduling, 5000Nodes_{1000,2000,3000}Gangs):
5000 nodes of its default shape (4 cpu, 32Gi, 110 pods), gangs of 3 pods of 100m cpu and
100Mi; their figure is the average gang attempt time (bench.run.gang_attempts).
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field, replace

# Node shape: 8 slots of 1 CPU; memory and the pod count never bind first.
NODE_CPU = 8
NODE_MEMORY = "32Gi"
NODE_PODS = 110
POD_CPU = "1"
POD_MEMORY = "1Gi"
SLOTS_PER_NODE = NODE_CPU  # one pod is 1 CPU
W3_SEED = 20260407
# Trickled arrival: members of TRICKLE_WINDOW consecutive gangs are created interleaved
# (member 0 of each, then member 1 of each, ...) at TRICKLE_RATE pods/s in all, so a gang's
# members arrive spread over time and mixed with other gangs' members.
TRICKLE_WINDOW = 8
TRICKLE_RATE = 100.0
# W6 and W7 end when no pod was bound or deleted for this long (no gang waits for a timeout
# there: the outcome is what preemption and queues decide).
QUIET_SECONDS = 20.0
PRIORITY_CLASSES = {"bench-low": 100, "bench-high": 1000}
STORM_PRIORITY = "bench-high"  # W6's second wave
# W8 (bench.w8): how long jobs keep arriving, the plain gangs' sizes, and how often a large
# gang (half the slots) arrives.
ARRIVAL_SECONDS = 120.0
GANG_SIZES = (2, 6)
LARGE_EVERY = 40.0
# W9: devices each node publishes through dynamic resource allocation.
DEVICES_PER_NODE = 8
# W7: three queues, the weights of seed 000's example and one more.
QUEUE_WEIGHTS = (("q-w1", 1), ("q-w2", 2), ("q-w3", 3))
# W11: scheduler_perf's gang workloads, by their number of gangs.
PERF_GANGS = (1000, 2000, 3000)


@dataclass(frozen=True)
class Shape:
    """What a node offers and what each pod asks for."""

    node_cpu: str = str(NODE_CPU)
    node_memory: str = NODE_MEMORY
    node_pods: int = NODE_PODS
    pod_cpu: str = POD_CPU
    pod_memory: str = POD_MEMORY

    def describe(self) -> str:
        return (f"nodes of {self.node_cpu} cpu/{self.node_memory}/{self.node_pods} pods, "
                f"pods of {self.pod_cpu} cpu/{self.pod_memory}")


# scheduler_perf's default node (makeBaseNode) and its gang pod template.
PERF_SHAPE = Shape(node_cpu="4", node_memory="32Gi", node_pods=110, pod_cpu="100m",
                   pod_memory="100Mi")


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
    # Gang index -> PriorityClass (W6). Gangs of PRIORITY_CLASSES' highest class are created
    # only once every other gang is bound: the preemption storm.
    priorities: tuple[str, ...] = ()
    # Gang index -> Queue name (W7); gangs are created queue after queue, lightest first.
    queues: tuple[str, ...] = ()
    trickle: bool = False
    # W8: pods arrive over time (bench.w8's schedule) and finish after their runtime.
    stream: bool = False
    # W9: devices each node publishes (DRA); every gang member asks for one (bench.dra).
    devices: int = 0
    settle: float | None = None  # how long a quiet spell ends the run (None: --settle)
    shape: Shape = field(default_factory=Shape)

    def constraint(self, gang_index: int) -> str:
        return self.constraints[gang_index] if self.constraints else ""

    def priority(self, gang_index: int) -> str:
        return self.priorities[gang_index] if self.priorities else ""

    def queue(self, gang_index: int) -> str:
        return self.queues[gang_index] if self.queues else ""

    def second_wave(self, gang_index: int) -> bool:
        """Whether the gang is created only after the first wave is bound (W6's arrivals)."""
        return self.priority(gang_index) == STORM_PRIORITY

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
        if self.priorities:
            high = sum(1 for i in range(len(self.priorities)) if self.second_wave(i))
            parts.append(f"{len(self.priorities) - high} low-priority gangs fill it, then "
                         f"{high} high-priority gangs arrive")
        if self.queues:
            weights = dict(QUEUE_WEIGHTS)
            parts.append("queues " + ", ".join(
                f"{name} (weight {weights[name]}, {self.queues.count(name)} gangs)"
                for name in dict.fromkeys(self.queues)))
        if self.devices:
            parts.append(f"{self.devices} DRA devices per node, one claim (from a template) "
                         "per member")
        if self.stream:
            parts.append(f"{self.slots} pod slots; for {ARRIVAL_SECONDS:.0f} s, short jobs "
                         f"and gangs of {GANG_SIZES[0]}-{GANG_SIZES[1]} arrive beyond capacity "
                         f"and a gang of {self.slots // 2} every {LARGE_EVERY:.0f} s; pods "
                         "finish after their declared runtime")
        if self.shape != Shape():
            parts.append(self.shape.describe())
        if self.trickle:
            parts.append(f"trickled ({TRICKLE_WINDOW} gangs interleaved, "
                         f"{TRICKLE_RATE:.0f} pods/s)")
        return ", ".join(parts)


def deserved_slots(workload: Workload) -> dict[str, float]:
    """W7: each queue's weighted share of the slots (every queue asks for more than that)."""
    weights = {name: weight for name, weight in QUEUE_WEIGHTS if name in workload.queues}
    total = sum(weights.values())
    return {name: workload.slots * weight / total for name, weight in weights.items()}


def _scaled(value: int, scale: float, minimum: int = 1) -> int:
    return max(minimum, round(value * scale))


def large_workloads(scale: float) -> dict[str, Workload]:
    """W10 and W11-<gangs> (issue 28): the large-cluster point and scheduler_perf's gang
    workloads, every count multiplied by `scale`."""
    found = {"W10": Workload("W10", "large cluster: 50000 pending gang pods on 15000 nodes",
                             _scaled(15000, scale), (8,) * _scaled(6250, scale))}
    for gangs in PERF_GANGS:
        name = f"W11-{gangs}"
        found[name] = Workload(name, f"scheduler_perf's 5000Nodes_{gangs}Gangs",
                               _scaled(5000, scale), (3,) * _scaled(gangs, scale),
                               shape=PERF_SHAPE)
    return found


def build_workloads(scale: float = 1.0) -> dict[str, Workload]:
    """W1..W11 (and W1t, W2t: W1, W2 trickled) as the issues define them, every count
    multiplied by `scale` (W8: its nodes; arrival rates are per node)."""
    w3_gangs = _scaled(400, scale, minimum=4)
    rng = random.Random(W3_SEED)  # the same mix of sizes on every run
    sizes = tuple(rng.randint(2, 32) for _ in range(w3_gangs))
    # W5: 600 gangs of 2-8 (about 3000 pods on 1000 nodes): a third keep one member per
    # node, a third spread evenly over the zones, a third are plain gangs.
    w5_sizes = tuple(rng.randint(2, 8) for _ in range(_scaled(600, scale)))
    # Capacity for about half of the gangs: half of the pods, in whole nodes.
    w3_nodes = max(1, math.ceil(sum(sizes) / 2 / SLOTS_PER_NODE))
    w1 = Workload("W1", "gangs of 5, all fit", _scaled(1000, scale),
                  (5,) * _scaled(1000, scale))
    w2 = Workload("W2", "gangs of 20 on 5000 nodes, all fit", _scaled(5000, scale),
                  (20,) * _scaled(500, scale))
    # W6: gangs of 4 fill every slot at low priority; high-priority gangs of 4 then ask
    # for half of the slots.
    w6_nodes = _scaled(250, scale)
    low, high = w6_nodes * SLOTS_PER_NODE // 4, w6_nodes * SLOTS_PER_NODE // 8
    # W7: each queue asks for the whole cluster in gangs of 4.
    w7_nodes = _scaled(150, scale)
    per_queue = w7_nodes * SLOTS_PER_NODE // 4
    return {
        "W1": w1,
        "W2": w2,
        "W1t": replace(w1, name="W1t", title="W1, trickled", trickle=True),
        "W2t": replace(w2, name="W2t", title="W2, trickled", trickle=True),
        "W3": Workload("W3", "contention: room for about half of the gangs", w3_nodes, sizes,
                       contention=True),
        "W4": Workload("W4", "plain pods, no groups", _scaled(1000, scale), (),
                       plain_pods=_scaled(5000, scale)),
        "W5": Workload("W5", "gangs with anti-affinity and topology spread, all fit",
                       _scaled(1000, scale), w5_sizes,
                       constraints=tuple(("anti", "spread", "")[i % 3]
                                         for i in range(len(w5_sizes)))),
        "W6": Workload("W6", "preemption storm", w6_nodes, (4,) * (low + high),
                       contention=True, settle=QUIET_SECONDS,
                       priorities=("bench-low",) * low + (STORM_PRIORITY,) * high),
        "W7": Workload("W7", "three weighted queues, each asking for the whole cluster",
                       w7_nodes, (4,) * (3 * per_queue), contention=True,
                       settle=QUIET_SECONDS,
                       queues=tuple(name for name, _ in QUEUE_WEIGHTS
                                    for _ in range(per_queue))),
        "W8": Workload("W8", "reservations: a large gang among a stream of small jobs",
                       _scaled(16, scale, minimum=2), (), contention=True, stream=True),
        # W9: DRA gangs of 8 filling 90% of the devices.
        "W9": Workload("W9", "gangs of 8 on DRA devices", _scaled(250, scale),
                       (8,) * _scaled(225, scale), devices=DEVICES_PER_NODE),
        **large_workloads(scale),
    }
