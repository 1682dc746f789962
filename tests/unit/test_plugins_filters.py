"""NodeUnschedulable, NodeName, NodeAffinity, TaintToleration, NodePorts and PrioritySort."""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.framework.runtime import EnabledPlugins, Framework
from coscheduling.framework.status import SUCCESS, Code, Status
from coscheduling.framework.waiting import WaitingPods
from coscheduling.plugins.nodeaffinity import NodeAffinity
from coscheduling.plugins.nodename import NodeName
from coscheduling.plugins.nodeports import NodePorts, conflicts
from coscheduling.plugins.nodeunschedulable import NodeUnschedulable
from coscheduling.plugins.prioritysort import PrioritySort
from coscheduling.plugins.tainttoleration import TaintToleration


def make_pod(name: str = "p", namespace: str = "default", **spec: Any) -> Pod:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"uid-{name}"}
    if "creationTimestamp" in spec:
        meta["creationTimestamp"] = spec.pop("creationTimestamp")
    spec.setdefault("containers", [{"name": "main"}])
    pod = parse_pod({"metadata": meta, "spec": spec})
    assert not pod.parse_error, pod.parse_error
    return pod


def make_node(name: str = "n", *, labels: dict[str, str] | None = None,
              taints: list[dict[str, str]] | None = None, unschedulable: bool = False) -> NodeInfo:
    node = parse_node({
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": 110}},
    })
    return NodeInfo(name, node)


def check(plugin: FilterPlugin, pod: Pod, node: NodeInfo) -> Status:
    state = CycleState()
    if isinstance(plugin, PreFilterPlugin):
        plugin.pre_filter(state, pod)
    return plugin.filter(state, pod, node)


# -- NodeUnschedulable -----------------------------------------------------------------------
class TestNodeUnschedulable:
    def test_schedulable_node_passes(self) -> None:
        assert check(NodeUnschedulable({}, None), make_pod(), make_node()).ok

    def test_cordoned_node_rejects(self) -> None:
        status = check(NodeUnschedulable({}, None), make_pod(), make_node(unschedulable=True))
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == ("node(s) were unschedulable",)
        assert status.plugin == "NodeUnschedulable"

    @pytest.mark.parametrize("toleration", [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
         "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists"},
        {"operator": "Exists"},
    ])
    def test_tolerating_pod_passes(self, toleration: dict[str, str]) -> None:
        pod = make_pod(tolerations=[toleration])
        assert check(NodeUnschedulable({}, None), pod, make_node(unschedulable=True)).ok

    @pytest.mark.parametrize("toleration", [
        {"key": "node.kubernetes.io/unschedulable", "operator": "Exists",
         "effect": "NoExecute"},
        {"key": "other", "operator": "Exists"},
        {"key": "node.kubernetes.io/unschedulable", "operator": "Equal", "value": "true"},
    ])
    def test_other_tolerations_do_not_help(self, toleration: dict[str, str]) -> None:
        pod = make_pod(tolerations=[toleration])
        assert not check(NodeUnschedulable({}, None), pod, make_node(unschedulable=True)).ok


# -- NodeName ------------------------------------------------------------------------------
class TestNodeName:
    def test_unpinned_pod_fits_anywhere(self) -> None:
        assert check(NodeName({}, None), make_pod(), make_node("a")).ok

    def test_pinned_pod_fits_only_its_node(self) -> None:
        pod = make_pod(nodeName="b")
        assert check(NodeName({}, None), pod, make_node("b")).ok
        status = check(NodeName({}, None), pod, make_node("a"))
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == ("node(s) didn't match the requested node name",)


# -- NodeAffinity ----------------------------------------------------------------------------
def affinity(
    *terms: list[dict[str, Any]], fields: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    node_terms: list[dict[str, Any]] = [{"matchExpressions": t} for t in terms]
    if fields is not None:
        node_terms.append({"matchFields": fields})
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": node_terms}}}


REASON_AFFINITY = "node(s) didn't match Pod's node affinity/selector"


class TestNodeAffinity:
    def test_prefilter_skips_unconstrained_pods(self) -> None:
        plugin = NodeAffinity({}, None)
        assert plugin.pre_filter(CycleState(), make_pod()).code == Code.SKIP
        assert plugin.pre_filter(CycleState(), make_pod(nodeSelector={"a": "b"})).ok
        assert plugin.pre_filter(
            CycleState(), make_pod(affinity=affinity([{"key": "a", "operator": "Exists"}]))
        ).ok
        # Filter itself is still correct if called anyway.
        assert plugin.filter(CycleState(), make_pod(), make_node()).ok

    def test_node_selector_needs_every_label(self) -> None:
        pod = make_pod(nodeSelector={"zone": "a", "disk": "ssd"})
        plugin = NodeAffinity({}, None)
        assert check(plugin, pod, make_node(labels={"zone": "a", "disk": "ssd", "x": "y"})).ok
        status = check(plugin, pod, make_node(labels={"zone": "a", "disk": "hdd"}))
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == (REASON_AFFINITY,)
        assert not check(plugin, pod, make_node(labels={"zone": "a"})).ok

    def test_terms_are_ored_and_requirements_anded(self) -> None:
        pod = make_pod(affinity=affinity(
            [{"key": "zone", "operator": "In", "values": ["a", "b"]},
             {"key": "gpu", "operator": "Exists"}],
            [{"key": "pool", "operator": "In", "values": ["spare"]}],
        ))
        plugin = NodeAffinity({}, None)
        assert check(plugin, pod, make_node(labels={"zone": "b", "gpu": "true"})).ok
        assert check(plugin, pod, make_node(labels={"pool": "spare"})).ok
        assert not check(plugin, pod, make_node(labels={"zone": "b"})).ok
        assert not check(plugin, pod, make_node(labels={"zone": "c", "gpu": "1"})).ok

    @pytest.mark.parametrize(("requirement", "labels", "expected"), [
        ({"key": "k", "operator": "NotIn", "values": ["x"]}, {}, True),
        ({"key": "k", "operator": "NotIn", "values": ["x"]}, {"k": "x"}, False),
        ({"key": "k", "operator": "DoesNotExist"}, {"k": "x"}, False),
        ({"key": "k", "operator": "DoesNotExist"}, {}, True),
        ({"key": "k", "operator": "Gt", "values": ["4"]}, {"k": "5"}, True),
        ({"key": "k", "operator": "Gt", "values": ["4"]}, {"k": "4"}, False),
        ({"key": "k", "operator": "Lt", "values": ["4"]}, {"k": "3"}, True),
    ])
    def test_operators(self, requirement: dict[str, Any], labels: dict[str, str],
                       expected: bool) -> None:
        pod = make_pod(affinity=affinity([requirement]))
        assert check(NodeAffinity({}, None), pod, make_node(labels=labels)).ok is expected

    def test_match_fields_on_node_name(self) -> None:
        pod = make_pod(affinity=affinity(fields=[
            {"key": "metadata.name", "operator": "In", "values": ["n2"]}]))
        plugin = NodeAffinity({}, None)
        assert check(plugin, pod, make_node("n2")).ok
        assert not check(plugin, pod, make_node("n1")).ok

    def test_selector_and_affinity_must_both_hold(self) -> None:
        pod = make_pod(nodeSelector={"zone": "a"},
                       affinity=affinity([{"key": "gpu", "operator": "Exists"}]))
        plugin = NodeAffinity({}, None)
        assert check(plugin, pod, make_node(labels={"zone": "a", "gpu": "1"})).ok
        assert not check(plugin, pod, make_node(labels={"zone": "a"})).ok
        assert not check(plugin, pod, make_node(labels={"gpu": "1"})).ok

    def test_framework_skips_filter_after_prefilter_skip(self) -> None:
        calls: list[str] = []

        class Spy(NodeAffinity):
            def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
                calls.append(node.name)
                return super().filter(state, pod, node)

        waiting = WaitingPods(lambda _: None)
        try:
            framework = Framework(
                {"PrioritySort": PrioritySort({}, None), "NodeAffinity": Spy({}, None)},
                EnabledPlugins(queue_sort="PrioritySort", pre_filter=["NodeAffinity"],
                               filter=["NodeAffinity"]),
                waiting,
            )
            state = CycleState()
            assert framework.run_pre_filter(state, make_pod()).ok
            assert framework.run_filter(state, make_pod(), make_node()) is SUCCESS
            assert calls == []
            state = CycleState()
            pod = make_pod(nodeSelector={"zone": "a"})
            framework.run_pre_filter(state, pod)
            assert framework.run_filter(state, pod, make_node()).plugin == "NodeAffinity"
            assert calls == ["n"]
        finally:
            waiting.stop()


# -- TaintToleration --------------------------------------------------------------------------
class TestTaintToleration:
    def test_untolerated_hard_taint_rejects_naming_it(self) -> None:
        node = make_node(taints=[
            {"key": "soft", "value": "x", "effect": "PreferNoSchedule"},
            {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"},
        ])
        status = check(TaintToleration({}, None), make_pod(), node)
        assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
        assert status.reasons == ("node(s) had untolerated taint {dedicated: gpu}",)
        assert status.plugin == "TaintToleration"

    def test_no_execute_and_valueless_taint(self) -> None:
        node = make_node(taints=[{"key": "node.kubernetes.io/not-ready", "effect": "NoExecute"}])
        status = check(TaintToleration({}, None), make_pod(), node)
        assert status.reasons == ("node(s) had untolerated taint {node.kubernetes.io/not-ready}",)

    @pytest.mark.parametrize("toleration", [
        {"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"},
        {"key": "dedicated", "value": "gpu"},
        {"key": "dedicated", "operator": "Exists"},
        {"operator": "Exists"},
    ])
    def test_tolerated(self, toleration: dict[str, str]) -> None:
        node = make_node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        assert check(TaintToleration({}, None), make_pod(tolerations=[toleration]), node).ok

    @pytest.mark.parametrize("toleration", [
        {"key": "dedicated", "value": "cpu"},
        {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
        {"key": "other", "operator": "Exists"},
    ])
    def test_not_tolerated(self, toleration: dict[str, str]) -> None:
        node = make_node(taints=[{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}])
        assert not check(TaintToleration({}, None), make_pod(tolerations=[toleration]), node).ok

    def test_prefer_no_schedule_does_not_filter(self) -> None:
        node = make_node(taints=[{"key": "soft", "effect": "PreferNoSchedule"}])
        assert check(TaintToleration({}, None), make_pod(), node).ok

    def test_score_counts_untolerated_soft_taints_and_normalize_reverses(self) -> None:
        plugin = TaintToleration({}, None)
        pod = make_pod(tolerations=[{"key": "ok", "operator": "Exists",
                                     "effect": "PreferNoSchedule"}])
        soft = "PreferNoSchedule"
        nodes = [
            make_node("clean"),
            make_node("tolerated", taints=[{"key": "ok", "effect": soft}]),
            make_node("one", taints=[{"key": "a", "effect": soft},
                                     {"key": "hard", "effect": "NoSchedule"}]),
            make_node("three", taints=[{"key": "a", "effect": soft}, {"key": "b", "effect": soft},
                                       {"key": "c", "value": "v", "effect": soft}]),
        ]
        state = CycleState()
        scores = {n.name: plugin.score(state, pod, n) for n in nodes}
        assert scores == {"clean": 0, "tolerated": 0, "one": 1, "three": 3}
        plugin.normalize_scores(state, pod, scores)
        # 100 - count * 100 // max: one -> 100 - 33 = 67
        assert scores == {"clean": 100, "tolerated": 100, "one": 67, "three": 0}

    def test_normalize_all_zero_gives_every_node_full_marks(self) -> None:
        scores = {"a": 0, "b": 0}
        TaintToleration({}, None).normalize_scores(CycleState(), make_pod(), scores)
        assert scores == {"a": 100, "b": 100}
        empty: dict[str, int] = {}
        TaintToleration({}, None).normalize_scores(CycleState(), make_pod(), empty)
        assert empty == {}


# -- NodePorts ---------------------------------------------------------------------------------
def port_pod(name: str, *ports: dict[str, Any]) -> Pod:
    return make_pod(name, containers=[{"name": "main", "ports": list(ports)}])


class TestNodePorts:
    def test_prefilter_skips_pods_without_host_ports(self) -> None:
        plugin = NodePorts({}, None)
        assert plugin.pre_filter(CycleState(), port_pod("p", {"containerPort": 80})).code \
            == Code.SKIP
        assert plugin.pre_filter(CycleState(), port_pod("p", {"hostPort": 80})).ok

    def test_same_port_conflicts(self) -> None:
        node = make_node()
        node.add_pod(port_pod("a", {"containerPort": 80, "hostPort": 8080}))
        status = check(NodePorts({}, None), port_pod("p", {"hostPort": 8080}), node)
        assert status.code == Code.UNSCHEDULABLE
        assert status.reasons == ("node(s) didn't have free ports for the requested pod ports",)

    @pytest.mark.parametrize(("used", "wanted", "conflict"), [
        (("0.0.0.0", "TCP", 80), ("0.0.0.0", "TCP", 80), True),
        (("0.0.0.0", "TCP", 80), ("10.0.0.1", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("0.0.0.0", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("10.0.0.1", "TCP", 80), True),
        (("10.0.0.1", "TCP", 80), ("10.0.0.2", "TCP", 80), False),
        (("0.0.0.0", "TCP", 80), ("0.0.0.0", "UDP", 80), False),
        (("0.0.0.0", "TCP", 80), ("0.0.0.0", "TCP", 81), False),
        (("10.0.0.1", "UDP", 53), ("0.0.0.0", "TCP", 53), False),
    ])
    def test_conflict_rules(
        self, used: tuple[str, str, int], wanted: tuple[str, str, int], conflict: bool
    ) -> None:
        assert conflicts((wanted,), {used: 1}) is conflict

    def test_released_ports_are_free_again(self) -> None:
        node = make_node()
        node.add_pod(port_pod("a", {"hostPort": 9000}))
        node.remove_pod("default/a")
        assert node.ports  # the entry lingers at 0
        assert check(NodePorts({}, None), port_pod("p", {"hostPort": 9000}), node).ok

    def test_any_of_several_ports(self) -> None:
        node = make_node()
        node.add_pod(port_pod("a", {"hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}))
        pod = port_pod("p", {"hostPort": 80}, {"hostPort": 53, "protocol": "UDP"})
        assert not check(NodePorts({}, None), pod, node).ok
        pod = port_pod("q", {"hostPort": 80}, {"hostPort": 53, "protocol": "TCP"})
        assert check(NodePorts({}, None), pod, node).ok


# -- PrioritySort ------------------------------------------------------------------------------
class TestPrioritySort:
    def test_order(self) -> None:
        sorter = PrioritySort({}, None)
        old = "2024-01-01T00:00:00Z"
        new = "2024-01-02T00:00:00Z"
        pods = [
            make_pod("low-old", priority=0, creationTimestamp=old),
            make_pod("high-new", priority=10, creationTimestamp=new),
            make_pod("b", priority=0, creationTimestamp=new),
            make_pod("a", priority=0, creationTimestamp=new),
            make_pod("high-old", priority=10, creationTimestamp=old),
            make_pod("negative", priority=-5, creationTimestamp=old),
        ]
        ordered = sorted(pods, key=sorter.sort_key)
        assert [p.name for p in ordered] == [
            "high-old", "high-new", "low-old", "a", "b", "negative",
        ]
        assert sorter.less(pods[1], pods[0])
        assert not sorter.less(pods[0], pods[1])
        assert sorter.sort_key(pods[3]) == (0, pods[3].created, "default/a")
