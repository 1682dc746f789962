"""Placing a gang as one, against the real API server: seed 004 with the seed's exact pod
shapes, and topology-aware gangs (spec.topology) on racks and zones of nodes."""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from typing import Any

from coscheduling import GROUP_LABEL
from coscheduling.cluster.client import ApiError, KubeClient
from tests.integration.kube import (
    bound_count,
    create_pod,
    create_podgroup,
    delete_pod,
    placement,
    pod_body,
    podgroups_path,
    wait_until,
)

StartScheduler = Callable[..., Any]
RACK = "example.com/rack"
ZONE = "topology.kubernetes.io/zone"


def _binpack_config(strategy: str) -> dict[str, Any]:
    """examples/binpack-config.yaml's scoring (seed 004), or another strategy on the same
    resources."""
    args: dict[str, Any] = {"type": strategy,
                            "resources": [{"name": "cpu", "weight": 1},
                                          {"name": "nvidia.com/gpu", "weight": 1}]}
    if strategy == "RequestedToCapacityRatio":
        args["requestedToCapacityRatio"] = {"shape": [{"utilization": 0, "score": 0},
                                                      {"utilization": 100, "score": 10}]}
    return {"pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": args}}]}


def _seed004_pod(name: str, scheduler: str, limits: dict[str, Any],
                 selector: dict[str, str]) -> dict[str, Any]:
    """A TFJob replica as seed 004 writes it: limits only (the API server copies them into
    requests), the parameter server 1 cpu, each worker 1 nvidia.com/gpu."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {GROUP_LABEL: "tf-smoke-gpu"}},
            "spec": {"schedulerName": scheduler, "nodeSelector": selector,
                     "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "tensorflow", "image": "tf-benchmarks",
                                     "resources": {"limits": limits}}]}}


def _seed004_gang(kube: KubeClient, namespace: str, scheduler: str,
                  selector: dict[str, str]) -> None:
    create_podgroup(kube, namespace, "tf-smoke-gpu", 5)
    create_pod(kube, namespace, _seed004_pod("tf-smoke-gpu-ps-0", scheduler, {"cpu": "1"},
                                             selector))
    for i in range(4):
        create_pod(kube, namespace, _seed004_pod(f"tf-smoke-gpu-worker-{i}", scheduler,
                                                 {"nvidia.com/gpu": 1}, selector))


def test_seed004_exact_shapes_binpack_one_node_in_20_fresh_rounds(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler(_binpack_config("RequestedToCapacityRatio"))
    stored = None
    for round_no in range(20):
        selector = {"seed004-round": str(round_no)}
        nodes = [f"s4-{round_no}-a", f"s4-{round_no}-b"]
        for node in nodes:
            make_node(node, cpu="8", labels=selector, extended={"nvidia.com/gpu": "4"})
        _seed004_gang(kube, namespace, sched.name, selector)
        if stored is None:  # the shape really is the seed's: no cpu asked by a worker
            stored = kube.get(f"/api/v1/namespaces/{namespace}/pods/tf-smoke-gpu-worker-0")
            assert stored["spec"]["containers"][0]["resources"]["requests"] == {
                "nvidia.com/gpu": "1"}
        wait_until(lambda: bound_count(kube, namespace, "tf-smoke-gpu") == 5,
                   what=f"round {round_no}: the gang bound")
        where = placement(kube, namespace)
        assert len(set(where.values())) == 1, f"round {round_no}: {where}"
        for name in where:
            delete_pod(kube, namespace, name)
        kube.delete(f"{podgroups_path(namespace)}/tf-smoke-gpu")
        wait_until(lambda: not placement(kube, namespace) and not _group_exists(
            kube, namespace, "tf-smoke-gpu"), what=f"round {round_no}: cleaned up")
        for node in nodes:
            kube.delete(f"/api/v1/nodes/{node}")  # later rounds must not see its room


def _group_exists(kube: KubeClient, namespace: str, name: str) -> bool:
    try:
        kube.get(f"{podgroups_path(namespace)}/{name}")
    except ApiError as err:
        if err.not_found:
            return False
        raise
    return True


def test_seed004_least_allocated_spreads_the_same_gang(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    selector = {"seed004-spread": namespace}
    for i in range(3):
        make_node(f"spread-{namespace}-{i}", cpu="8", labels=selector,
                  extended={"nvidia.com/gpu": "4"})
    sched = start_scheduler(_binpack_config("LeastAllocated"))
    _seed004_gang(kube, namespace, sched.name, selector)
    wait_until(lambda: bound_count(kube, namespace, "tf-smoke-gpu") == 5, what="spread gang")
    per_node = Counter(placement(kube, namespace).values())
    assert len(per_node) == 3 and max(per_node.values()) <= 2, per_node


# -- topology -------------------------------------------------------------------------------

class Racks:
    """Nodes labelled with a rack and a zone; pods of the test are held to them by a
    nodeSelector, so nodes of other tests never count."""

    def __init__(self, make_node: Any, tag: str) -> None:
        self.make_node = make_node
        self.tag = tag
        self.selector = {"topology-test": tag}

    def node(self, name: str, cpu: str, rack: str | None, zone: str) -> str:
        labels = {**self.selector, ZONE: zone}
        if rack is not None:
            labels[RACK] = rack
        full = f"{self.tag}-{name}"
        self.make_node(full, cpu=cpu, labels=labels)
        return full


def _topology_gang(kube: KubeClient, namespace: str, scheduler: str, racks: Racks,
                   group: str, size: int, cpu: str, mode: str, keys: list[str]) -> None:
    create_podgroup(kube, namespace, group, size, topology={"mode": mode, "keys": keys})
    for i in range(size):
        body = pod_body(f"{group}-{i}", scheduler=scheduler, cpu=cpu, group=group)
        body["spec"]["nodeSelector"] = racks.selector
        create_pod(kube, namespace, body)


def _nodes_of(kube: KubeClient, namespace: str, group: str) -> set[str]:
    return {node for pod, node in placement(kube, namespace).items()
            if pod.startswith(f"{group}-")}


def _condition(kube: KubeClient, namespace: str, group: str, kind: str) -> dict[str, Any]:
    status = kube.get(f"{podgroups_path(namespace)}/{group}").get("status") or {}
    return next((c for c in status.get("conditions") or () if c.get("type") == kind), {})


def _layout(racks: Racks) -> dict[str, list[str]]:
    """r1: two 4-cpu nodes (two 3-cpu members); r2: two 8-cpu nodes (four); r3: one
    8-cpu node (two). r1 and r2 in zone z1, r3 in z2."""
    return {
        "r1": [racks.node("r1-a", "4", "r1", "z1"), racks.node("r1-b", "4", "r1", "z1")],
        "r2": [racks.node("r2-a", "8", "r2", "z1"), racks.node("r2-b", "8", "r2", "z1")],
        "r3": [racks.node("r3-a", "8", "r3", "z2")],
    }


def _racks_and_scheduler(make_node: Any, start_scheduler: StartScheduler
                         ) -> tuple[Racks, dict[str, list[str]], Any]:
    """The racks of ``_layout`` on fresh nodes, and a scheduler for the test."""
    racks = Racks(make_node, f"t{uuid.uuid4().hex[:6]}")
    return racks, _layout(racks), start_scheduler()


def test_required_gang_lands_only_in_the_rack_that_holds_it(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    racks, layout, sched = _racks_and_scheduler(make_node, start_scheduler)
    _topology_gang(kube, namespace, sched.name, racks, "g", 4, "3", "Required", [RACK])
    wait_until(lambda: bound_count(kube, namespace, "g") == 4, what="the gang in rack r2")
    assert _nodes_of(kube, namespace, "g") <= set(layout["r2"])


def test_required_gang_that_fits_no_rack_binds_nothing_and_says_why(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    """Six 3-cpu members fit in the cluster (r1 + r2 + r3 hold eight) but in no rack."""
    racks, _, sched = _racks_and_scheduler(make_node, start_scheduler)
    _topology_gang(kube, namespace, sched.name, racks, "g", 6, "3", "Required", [RACK])
    expected = (f"topology Required: no domain of {RACK} can hold the gang's 6 missing "
                f"members, which need cpu 18, memory 768Mi; the largest, {RACK}=r2, has "
                f"cpu 16, memory 64Gi free")
    wait_until(lambda: expected in _condition(kube, namespace, "g", "Unschedulable").get(
        "message", ""), what="the gang's Unschedulable condition with the numbers")
    sched.watcher.check_settled()
    assert bound_count(kube, namespace, "g") == 0


def test_preferred_gang_that_fits_no_rack_is_placed_across_racks(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    racks, layout, sched = _racks_and_scheduler(make_node, start_scheduler)
    _topology_gang(kube, namespace, sched.name, racks, "g", 6, "3", "Preferred", [RACK])
    wait_until(lambda: bound_count(kube, namespace, "g") == 6, what="the gang, anywhere")
    used = _nodes_of(kube, namespace, "g")
    assert len({rack for rack, nodes in layout.items() if used & set(nodes)}) > 1, used


def test_two_level_keys_take_the_rack_when_one_fits_and_the_zone_otherwise(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    racks, layout, sched = _racks_and_scheduler(make_node, start_scheduler)
    _topology_gang(kube, namespace, sched.name, racks, "small", 4, "3", "Required",
                   [RACK, ZONE])
    wait_until(lambda: bound_count(kube, namespace, "small") == 4, what="the small gang")
    assert _nodes_of(kube, namespace, "small") <= set(layout["r2"])
    # r2 is full now (2 cpu left per node). A node in zone z1 without a rack label: no rack
    # holds four more 3-cpu members (r1 two, r2 none, r3 two), zone z1 does (r1 two + the
    # new node two).
    loose = racks.node("z1-loose", "8", None, "z1")
    _topology_gang(kube, namespace, sched.name, racks, "big", 4, "3", "Required",
                   [RACK, ZONE])
    wait_until(lambda: bound_count(kube, namespace, "big") == 4, what="the big gang")
    assert _nodes_of(kube, namespace, "big") == {*layout["r1"], loose}
