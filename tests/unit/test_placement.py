"""Node tables (coscheduling.core.placement) against Filter and Score run from scratch.

A table is only an optimisation: after any sequence of cache changes its feasible nodes,
failure reasons and per-node totals must equal what running every Filter plugin on every
node and ``Framework.run_score`` over the feasible ones gives.
"""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config import parse_config
from coscheduling.core.placement import Placer
from coscheduling.core.scheduler import Scheduler
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Status
from coscheduling.plugins.registry import default_registry

STRATEGIES: dict[str, dict[str, Any]] = {
    "LeastAllocated": {},
    "MostAllocated": {"scoringStrategy": {"type": "MostAllocated"}},
    "RequestedToCapacityRatio": {"scoringStrategy": {
        "type": "RequestedToCapacityRatio",
        "resources": [{"name": "cpu", "weight": 2}, {"name": "memory", "weight": 1}],
        "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                               {"utilization": 100, "score": 10}]}}},
}

TEMPLATES: list[dict[str, Any]] = [
    {"requests": {"cpu": "1", "memory": "1Gi"}},
    {"requests": {"cpu": "500m"},
     "tolerations": [{"key": "soft", "operator": "Exists", "effect": "PreferNoSchedule"}]},
    {"requests": {"cpu": "2", "memory": "2Gi"}, "nodeSelector": {"zone": "a"}},
    {"requests": {}},
    {"requests": {"cpu": "1"}, "ports": [{"containerPort": 80, "hostPort": 8080}]},
    {"requests": {"cpu": "3"},
     "tolerations": [{"key": "hard", "operator": "Exists", "effect": "NoSchedule"}]},
    # InterPodAffinity and PodTopologySpread: pods that bear on each other.
    {"requests": {"cpu": "500m"}, "labels": {"app": "web"}, "affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}]}}},
    {"requests": {"cpu": "1"}, "labels": {"app": "web"}},
    {"requests": {"cpu": "1"}, "labels": {"app": "db"}, "affinity": {"podAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm": {
            "topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "web"}}}}]}}},
    {"requests": {"cpu": "1"}, "labels": {"app": "web"}, "spread": [
        {"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
         "labelSelector": {"matchLabels": {"app": "web"}}},
        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
         "whenUnsatisfiable": "ScheduleAnyway",
         "labelSelector": {"matchLabels": {"app": "web"}}}]},
    # Preferred node affinity, images some nodes hold, uneven cpu / memory (balance).
    {"requests": {"cpu": "1", "memory": "6Gi"}, "images": ["big:1", "side"],
     "affinity": {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
         {"weight": 7, "preference": {"matchExpressions": [
             {"key": "zone", "operator": "In", "values": ["a"]}]}}]}}},
]

IMAGES = [{"names": ["big:1"], "sizeBytes": 700 * 1024 * 1024},
          {"names": ["side:latest"], "sizeBytes": 90 * 1024 * 1024}]

NODE_SHAPES: list[dict[str, Any]] = [
    {"cpu": "2", "taints": []},
    {"cpu": "4", "taints": [{"key": "soft", "effect": "PreferNoSchedule"}], "zone": "a",
     "images": IMAGES},
    {"cpu": "8", "taints": [{"key": "hard", "effect": "NoSchedule"}], "zone": "b"},
    {"cpu": "8", "taints": [{"key": "soft", "effect": "PreferNoSchedule"},
                            {"key": "other", "effect": "PreferNoSchedule"}]},
    {"cpu": "6", "taints": [], "zone": "a", "unschedulable": True},
    {"cpu": "3", "taints": [], "pods": "2", "images": IMAGES[:1]},
]


def node_doc(name: str, shape: dict[str, Any]) -> dict[str, Any]:
    labels = {"zone": shape["zone"]} if "zone" in shape else {}
    labels["kubernetes.io/hostname"] = name
    return {
        "metadata": {"name": name, "uid": name, "resourceVersion": "1", "labels": labels},
        "spec": {"taints": shape["taints"], "unschedulable": shape.get("unschedulable", False)},
        "status": {"allocatable": {"cpu": shape["cpu"], "memory": "8Gi",
                                   "pods": shape.get("pods", "110")},
                   "images": shape.get("images", [])},
    }


def pod_from(template: int, name: str) -> Pod:
    t = TEMPLATES[template]
    container: dict[str, Any] = {"name": "c", "resources": {"requests": t["requests"]}}
    if "ports" in t:
        container["ports"] = t["ports"]
    images = t.get("images", ["app:1"])
    containers = [container | {"image": images[0]}] + [
        {"name": f"c{i}", "image": image} for i, image in enumerate(images[1:])]
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "labels": t.get("labels", {}),
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"schedulerName": "batch-scheduler", "containers": containers,
                 "tolerations": t.get("tolerations", []),
                 "nodeSelector": t.get("nodeSelector", {}),
                 "affinity": t.get("affinity"),
                 "topologySpreadConstraints": t.get("spread", [])},
    })


def scheduler_with(strategy: str, fit_last: bool = False) -> Scheduler:
    """``fit_last``: NodeResourcesFit filters after every other plugin (re-enabling a
    plugin moves it to the end), so plugins that cannot sign a pod fail a node first."""
    registry = default_registry()
    doc: dict[str, Any] = {
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration",
        "pluginConfig": [{"name": "NodeResourcesFit", "args": STRATEGIES[strategy]}],
    }
    if fit_last:
        doc["plugins"] = {"filter": {"enabled": [{"name": "NodeResourcesFit"}]}}
    return Scheduler(parse_config(doc, registry), registry, client=None)


def from_scratch(s: Scheduler, state: CycleState, pod: Pod
                 ) -> tuple[dict[str, int], dict[str, Status]]:
    fw = s.framework
    feasible = []
    failed: dict[str, Status] = {}
    for info in s.cache.nodes():
        status = fw.run_filter(state, pod, info)
        if status.ok:
            feasible.append(info)
        else:
            failed[info.name] = status
    return (fw.run_score(state, pod, feasible) if feasible else {}), failed


def check(s: Scheduler, pod: Pod) -> None:
    state = CycleState()
    assert s.framework.run_pre_filter(state, pod).ok
    choice = s.placer.choose(state, pod)
    totals, failed = from_scratch(s, state, pod)
    signature = s.framework.signature(pod)
    if signature is None:  # other pods bear on it: some plugins run per node
        assert dict(choice.failures) == failed  # fewer than 100 nodes: all are examined
        if totals:
            assert choice.node is not None and totals[choice.node] == max(totals.values())
        else:
            assert choice.node is None
        return
    table = s.placer.table(signature)
    assert table is not None
    assert table.totals == totals
    assert table.failed == failed
    if totals:
        best = max(totals.values())
        assert choice.node is not None and totals[choice.node] == best
    else:
        assert choice.node is None and dict(choice.failures) == failed
        assert choice.summary().startswith(f"0/{len(failed)} nodes are available: ")


operations = st.lists(
    st.tuples(
        st.sampled_from(["assume", "claim", "forget", "release", "bind", "delete",
                         "set_node", "remove_node", "choose"]),
        st.integers(0, len(TEMPLATES) - 1),
        st.integers(0, 7),
        st.integers(0, len(NODE_SHAPES) - 1),
    ),
    min_size=1, max_size=60,
)


@pytest.mark.parametrize(("strategy", "fit_last"),
                         [(name, False) for name in sorted(STRATEGIES)]
                         + [("LeastAllocated", True)])
@settings(max_examples=60, deadline=None)
@given(ops=operations, tiny_log=st.booleans())
def test_tables_equal_filter_and_score_from_scratch(
        strategy: str, fit_last: bool, ops: list[tuple[str, int, int, int]],
        tiny_log: bool) -> None:
    s = scheduler_with(strategy, fit_last)
    cache = s.cache
    with mock.patch("coscheduling.core.cache.MIN_CHANGE_LOG", 3 if tiny_log else 4096), \
            mock.patch("coscheduling.core.cache.CHANGE_LOG_PER_NODE", 0 if tiny_log else 4):
        for index in range(4):
            cache.set_node(parse_node(node_doc(f"n{index}", NODE_SHAPES[index])))
        placed: list[Pod] = []
        for seq, (op, template, node_index, shape) in enumerate(ops):
            node_name = f"n{node_index}"
            exists = cache.node(node_name) is not None
            if op in ("assume", "claim") and exists:
                pod = pod_from(template, f"p{seq}")
                cache.set_pod(pod)
                (cache.assume if op == "assume" else cache.claim)(pod, node_name)
                placed.append(pod)
            elif op in ("forget", "release", "bind", "delete") and placed:
                pod = placed.pop(node_index % len(placed))
                if op == "forget":
                    cache.forget(pod.key)
                elif op == "release":
                    cache.drop_claim(pod.key)
                elif op == "delete":
                    cache.remove_pod(pod.key)
                elif cache.assumed_node(pod.key):
                    pod.node_name = cache.assumed_node(pod.key)
                    cache.set_pod(pod)
            elif op == "set_node":
                cache.set_node(parse_node(node_doc(node_name, NODE_SHAPES[shape])))
            elif op == "remove_node":
                cache.remove_node(node_name)
            check(s, pod_from(template, f"probe{seq}"))
        for template in range(len(TEMPLATES)):
            check(s, pod_from(template, "last"))


def test_pods_that_hold_a_claim_or_cannot_be_signed_are_sampled() -> None:
    s = scheduler_with("LeastAllocated")
    for index in range(3):
        s.cache.set_node(parse_node(node_doc(f"n{index}", NODE_SHAPES[0])))
    member = pod_from(0, "member")
    s.cache.set_pod(member)
    s.cache.claim(member, "n1")
    state = CycleState()
    s.framework.run_pre_filter(state, member)
    assert s.placer.choose(state, member).node is not None
    assert s.placer.table(s.framework.signature(member) or ()) is None

    off = Placer(s.framework, s.cache, 0, signature_cache_size=0)
    plain = pod_from(0, "plain")
    state = CycleState()
    s.framework.run_pre_filter(state, plain)
    assert off.choose(state, plain).node is not None
    assert off.table(s.framework.signature(plain) or ()) is None


def test_signature_ignores_what_no_plugin_reads_and_sees_what_one_does() -> None:
    s = scheduler_with("LeastAllocated")
    a, b = pod_from(0, "a"), pod_from(0, "b")
    b.labels = {"app": "other"}
    b.priority = 7
    assert s.framework.signature(a) == s.framework.signature(b)
    for template in range(1, len(TEMPLATES)):
        assert s.framework.signature(pod_from(template, "c")) != s.framework.signature(a)
