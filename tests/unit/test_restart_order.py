"""A restarted scheduler learns the cluster from its informers' initial lists, which run
side by side: pods, PodGroups and nodes reach the event handlers in any interleaving. In
every one of them, each pending member of a gang must be retried once its gang has
minMember members, whatever came first: a gang left partly bound by a crash is completed.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.simulation import GROUP_LABEL, SimCluster, group_record, node_record, pod_record

# (gang name, minMember, members bound before the restart, members that exist)
GANGS = [("a", 7, 6, 7), ("b", 4, 2, 4), ("c", 3, 0, 3), ("d", 5, 5, 6), ("e", 2, 1, 2)]
NODES = 4  # 8 cpu each: room for every member (1 cpu each) with some to spare


def initial_lists(sim: SimCluster) -> list[Callable[[], None]]:
    """One arrival per object of the cluster a crash left behind (bound members on their
    nodes, pending ones not), each as the handler call its informer would make."""
    arrivals: list[Callable[[], None]] = []
    seq = 0
    for index in range(NODES):
        node = node_record(f"n{index}")
        arrivals.append(lambda node=node: sim.nodes.on_add(node))
    for name, min_member, bound, members in GANGS:
        seq += 1
        group = group_record(name, "ns", {"minMember": min_member}, seq)
        arrivals.append(lambda group=group: sim.groups.on_add(group))
        for member in range(members):
            seq += 1
            spec = {"nodeName": f"n{member % NODES}"} if member < bound else {}
            pod = pod_record(f"{name}-{member}", "ns", seq, labels={GROUP_LABEL: name},
                             requests={"cpu": "1", "memory": "1Gi"}, spec=spec)
            arrivals.append(lambda pod=pod: sim.pods.on_add(pod))
    return arrivals


@settings(max_examples=60, deadline=None)
@given(st.randoms(use_true_random=False))
def test_every_pending_member_is_retried_whatever_order_the_lists_arrive_in(
        rng: object) -> None:
    sim = SimCluster()
    try:
        arrivals = initial_lists(sim)
        rng.shuffle(arrivals)  # type: ignore[attr-defined]
        for arrive in arrivals:
            arrive()
        sim.run()
        for name, min_member, _, members in GANGS:
            assert sim.bound_in_group(name) == members, (
                f"gang {name}: {sim.bound_in_group(name)} of {members} bound "
                f"(minMember {min_member}); queue: {sim.scheduler.queue.counts()}")
        assert not sim.violations, sim.violations
    finally:
        sim.close()
