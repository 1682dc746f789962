"""NodeResourcesFit: Filter (claims included), the three scoring strategies, and its args.

Every expected score is computed by hand in the comment beside it.
"""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config.errors import ConfigError
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.framework.status import Code, Status
from coscheduling.plugins.noderesources import (
    STATE_KEY,
    FitArgs,
    NodeResourcesFit,
    fits,
    parse_args,
    validate_args,
)
from coscheduling.plugins.noderesources.fit import broken_linear

GPU = "nvidia.com/gpu"
GI = 2**30
MI = 2**20
ARGS_PATH = "pluginConfig[NodeResourcesFit].args"


def make_pod(name: str, requests: dict[str, Any] | None = None, *containers: dict[str, Any],
             namespace: str = "default") -> Pod:
    """A pod with one container requesting ``requests`` (none: a best-effort container)."""
    main: dict[str, Any] = {"name": "main"}
    if requests is not None:
        main["resources"] = {"requests": requests}
    pod = parse_pod({
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"containers": [main, *containers]},
    })
    assert not pod.parse_error, pod.parse_error
    return pod


def make_node(name: str, allocatable: dict[str, Any]) -> NodeInfo:
    node = parse_node({"metadata": {"name": name}, "status": {"allocatable": allocatable}})
    assert not node.parse_error, node.parse_error
    return NodeInfo(name, node)


def bound(info: NodeInfo, pod: Pod) -> NodeInfo:
    pod.node_name = info.name
    info.add_pod(pod)
    return info


def plugin(**strategy: Any) -> NodeResourcesFit:
    return NodeResourcesFit({"scoringStrategy": strategy} if strategy else {}, None)


def run_filter(fit: NodeResourcesFit, pod: Pod, node: NodeInfo) -> Status:
    state = CycleState()
    assert fit.pre_filter(state, pod).ok
    return fit.filter(state, pod, node)


def run_score(fit: NodeResourcesFit, pod: Pod, node: NodeInfo) -> int:
    state = CycleState()
    fit.pre_filter(state, pod)
    return fit.score(state, pod, node)


# -- Filter -------------------------------------------------------------------------------
class TestFilter:
    def test_fits_exactly_at_the_boundary(self) -> None:
        node = bound(make_node("n", {"cpu": "4", "memory": "8Gi", "pods": 110}),
                     make_pod("a", {"cpu": "3", "memory": "6Gi"}))
        status = run_filter(plugin(), make_pod("p", {"cpu": "1", "memory": "2Gi"}), node)
        assert status.ok

    def test_every_insufficient_resource_is_listed_in_kube_scheduler_words(self) -> None:
        node = make_node("n", {"cpu": "2", "memory": "1Gi", "pods": 1, GPU: 1})
        bound(node, make_pod("a", {"cpu": "1500m", "memory": "512Mi", GPU: 1}))
        pod = make_pod("p", {"cpu": "1", "memory": "1Gi", "ephemeral-storage": "1Gi", GPU: 1})
        status = run_filter(plugin(), pod, node)
        assert status.code == Code.UNSCHEDULABLE
        assert status.plugin == "NodeResourcesFit"
        assert status.reasons == (
            "Too many pods",
            "Insufficient cpu",
            "Insufficient memory",
            "Insufficient ephemeral-storage",
            "Insufficient nvidia.com/gpu",
        )

    def test_extended_resource_missing_from_allocatable_counts_as_zero(self) -> None:
        node = make_node("n", {"cpu": "8", "memory": "8Gi", "pods": 110})
        status = run_filter(plugin(), make_pod("p", {"cpu": "1", GPU: 1}), node)
        assert status.reasons == ("Insufficient nvidia.com/gpu",)
        assert fits(make_pod("q", {"cpu": "1"}), node) == []

    def test_too_many_pods_alone(self) -> None:
        node = make_node("n", {"cpu": "8", "memory": "8Gi", "pods": 2})
        bound(node, make_pod("a", {"cpu": "1"}))
        bound(node, make_pod("b"))
        status = run_filter(plugin(), make_pod("p"), node)
        assert status.reasons == ("Too many pods",)

    def test_a_node_without_a_pods_allowance_takes_no_pod(self) -> None:
        node = make_node("n", {"cpu": "8", "memory": "8Gi"})
        assert fits(make_pod("p"), node) == ["Too many pods"]

    def test_best_effort_pod_only_needs_a_pod_slot(self) -> None:
        node = make_node("n", {"cpu": "1", "memory": "1Gi", "pods": 10})
        bound(node, make_pod("a", {"cpu": "1", "memory": "1Gi"}))
        assert run_filter(plugin(), make_pod("p"), node).ok

    def test_claims_of_other_pods_take_the_room(self) -> None:
        node = make_node("n", {"cpu": "4", "memory": "8Gi", "pods": 110})
        node.add_claim(make_pod("gang-0", {"cpu": "3"}))
        pod = make_pod("p", {"cpu": "2"})
        assert run_filter(plugin(), pod, node).reasons == ("Insufficient cpu",)
        assert fits(pod, node) == ["Insufficient cpu"]

    def test_the_pods_own_claim_does_not_count_against_itself(self) -> None:
        node = make_node("n", {"cpu": "4", "memory": "8Gi", "pods": 2})
        pod = make_pod("p", {"cpu": "2", GPU: 1})
        node.add_claim(pod)                                  # its gang claimed room for it
        node.add_claim(make_pod("sibling", {"cpu": "2"}))
        assert node.used("cpu") == 4000
        # The GPU check still applies: the node has none.
        assert run_filter(plugin(), pod, node).reasons == ("Insufficient nvidia.com/gpu",)
        cpu_only = make_pod("p", {"cpu": "2"})
        assert run_filter(plugin(), cpu_only, node).ok     # same key: own claim excluded
        # Another pod sees both claims: no cpu and no pod slot left.
        other = make_pod("other", {"cpu": "1"})
        assert run_filter(plugin(), other, node).reasons == ("Too many pods", "Insufficient cpu")

    def test_claimed_pod_slots_count(self) -> None:
        node = make_node("n", {"cpu": "8", "memory": "8Gi", "pods": 1})
        node.add_claim(make_pod("gang-0", {"cpu": "1"}))
        assert fits(make_pod("p"), node) == ["Too many pods"]
        assert fits(make_pod("gang-0", {"cpu": "1"}), node) == []

    def test_assumed_pods_count_like_bound_ones(self) -> None:
        node = make_node("n", {"cpu": "2", "memory": "8Gi", "pods": 110})
        node.add_pod(make_pod("assumed", {"cpu": "2"}))
        assert fits(make_pod("p", {"cpu": "100m"}), node) == ["Insufficient cpu"]

    def test_filter_without_prefilter_computes_the_request(self) -> None:
        node = make_node("n", {"cpu": "1", "memory": "8Gi", "pods": 110})
        state = CycleState()
        status = plugin().filter(state, make_pod("p", {"cpu": "2"}), node)
        assert status.reasons == ("Insufficient cpu",)
        assert state.read(STATE_KEY) is not None

    def test_prefilter_stores_the_request_once(self) -> None:
        fit = plugin()
        state = CycleState()
        pod = make_pod("p", {"memory": "1Gi", "cpu": "1", "example.com/foo": 2})
        status = fit.pre_filter(state, pod)
        assert status.code == Code.SUCCESS
        request = state.read(STATE_KEY)
        assert request.fit == (("cpu", 1000), ("memory", GI), ("example.com/foo", 2))

    def test_ignored_resources_and_groups(self) -> None:
        node = make_node("n", {"cpu": "8", "memory": "8Gi", "pods": 110})
        pod = make_pod("p", {"cpu": "1", "example.com/foo": 1, "vendor.io/bar": 1})
        assert run_filter(plugin(), pod, node).reasons == (
            "Insufficient example.com/foo", "Insufficient vendor.io/bar",
        )
        fit = NodeResourcesFit(
            {"ignoredResources": ["example.com/foo"], "ignoredResourceGroups": ["vendor.io"]},
            None,
        )
        assert run_filter(fit, pod, node).ok
        # Native resources cannot be ignored.
        fit = NodeResourcesFit({"ignoredResources": ["cpu"]}, None)
        assert run_filter(fit, make_pod("q", {"cpu": "9"}), node).reasons == (
            "Insufficient cpu",
        )

    def test_init_containers_and_overhead_are_part_of_the_request(self) -> None:
        pod = parse_pod({
            "metadata": {"name": "p", "namespace": "default"},
            "spec": {
                "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
                "initContainers": [{"name": "i", "resources": {"requests": {"cpu": "3"}}}],
                "overhead": {"cpu": "250m"},
            },
        })
        node = make_node("n", {"cpu": "3", "memory": "8Gi", "pods": 110})
        assert fits(pod, node) == ["Insufficient cpu"]  # needs 3250m


# -- LeastAllocated / MostAllocated ------------------------------------------------------
def gpu_node(name: str = "n1") -> NodeInfo:
    """4 cpu, 8Gi, 4 GPUs; one bound pod uses 1 cpu, 2Gi, 1 GPU."""
    node = make_node(name, {"cpu": "4", "memory": "8Gi", "pods": 110, GPU: 4})
    return bound(node, make_pod(f"{name}-existing", {"cpu": "1", "memory": "2Gi", GPU: 1}))


INCOMING = {"cpu": "1", "memory": "1Gi", GPU: 1}


class TestLeastAndMostAllocated:
    def test_least_allocated_defaults(self) -> None:
        # cpu: 2000 of 4000 -> 2000*100//4000 = 50; memory 3Gi of 8Gi -> 5*100//8 = 62
        # (50 + 62) // 2 = 56
        assert run_score(plugin(), make_pod("p", INCOMING), gpu_node()) == 56

    def test_most_allocated_defaults(self) -> None:
        # cpu 2000*100//4000 = 50; memory 3*100//8 = 37; (50 + 37) // 2 = 43
        fit = plugin(type="MostAllocated")
        assert run_score(fit, make_pod("p", INCOMING), gpu_node()) == 43

    def test_gpu_with_weights(self) -> None:
        resources = [{"name": "cpu"}, {"name": "memory", "weight": 1},
                     {"name": GPU, "weight": 2}]
        pod = make_pod("p", INCOMING)
        # gpu 2 of 4: least 50, most 50
        # least: (50 + 62 + 2*50) // 4 = 212 // 4 = 53
        assert run_score(plugin(type="LeastAllocated", resources=resources), pod,
                         gpu_node()) == 53
        # most: (50 + 37 + 2*50) // 4 = 187 // 4 = 46
        assert run_score(plugin(type="MostAllocated", resources=resources), pod,
                         gpu_node()) == 46

    def test_resource_with_empty_allocatable_is_left_out_with_its_weight(self) -> None:
        resources = [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                     {"name": GPU, "weight": 5}]
        node = make_node("cpu-only", {"cpu": "4", "memory": "8Gi", "pods": 110})
        pod = make_pod("p", INCOMING)
        # cpu 1000 of 4000 -> 75; memory 1Gi of 8Gi -> 7*100//8 = 87; gpu skipped
        # (75 + 87) // 2 = 81
        assert run_score(plugin(resources=resources), pod, node) == 81
        # most: cpu 25, memory 12 -> 37 // 2 = 18
        assert run_score(plugin(type="MostAllocated", resources=resources), pod, node) == 18
        # Nothing scorable at all: 0.
        bare = make_node("bare", {"pods": 110})
        assert run_score(plugin(resources=resources), pod, bare) == 0

    def test_extended_resource_the_pod_does_not_request_is_left_out(self) -> None:
        resources = [{"name": "cpu", "weight": 1}, {"name": GPU, "weight": 3}]
        pod = make_pod("p", {"cpu": "1"})
        # cpu: 1000 + 1000 of 4000 -> least 50; gpu not requested -> skipped
        assert run_score(plugin(resources=resources), pod, gpu_node()) == 50

    def test_ephemeral_storage_counts_even_when_not_requested(self) -> None:
        resources = [{"name": "cpu", "weight": 1}, {"name": "ephemeral-storage", "weight": 1}]
        node = make_node("n", {"cpu": "4", "memory": "8Gi", "ephemeral-storage": "100Gi",
                               "pods": 110})
        bound(node, make_pod("a", {"cpu": "1", "ephemeral-storage": "40Gi"}))
        # cpu 2000/4000 -> 50; storage 40/100 used -> 60; (50 + 60) // 2 = 55
        assert run_score(plugin(resources=resources), make_pod("p", {"cpu": "1"}), node) == 55

    def test_over_requested_node(self) -> None:
        node = make_node("n", {"cpu": "1", "memory": "1Gi", "pods": 110})
        bound(node, make_pod("a", {"cpu": "1500m", "memory": "512Mi"}))
        pod = make_pod("p", {"cpu": "500m", "memory": "256Mi"})
        # least: cpu 2000 > 1000 -> 0; memory 768Mi of 1Gi -> 256*100//1024 = 25 -> 25 // 2 = 12
        assert run_score(plugin(), pod, node) == 12
        # most: cpu clamps to 100; memory 768*100//1024 = 75 -> 175 // 2 = 87
        assert run_score(plugin(type="MostAllocated"), pod, node) == 87

    def test_best_effort_containers_count_with_the_scoring_defaults(self) -> None:
        node = make_node("n", {"cpu": "1", "memory": "1Gi", "pods": 110})
        # cpu 100m of 1000m -> 90; memory 200Mi of 1024Mi -> 824*100//1024 = 80; 170 // 2 = 85
        assert run_score(plugin(), make_pod("p"), node) == 85
        # A best-effort pod on the node counts 100m / 200Mi too:
        bound(node, make_pod("a"))
        # cpu 200 -> 80; memory 400Mi -> 624*100//1024 = 60; 140 // 2 = 70
        assert run_score(plugin(), make_pod("p"), node) == 70

    def test_claims_of_others_count_and_the_own_claim_does_not(self) -> None:
        node = make_node("n", {"cpu": "4", "memory": "4Gi", "pods": 110})
        pod = make_pod("p", {"cpu": "1", "memory": "1Gi"})
        # Empty node: cpu 1000/4000 -> 75, memory 1/4 -> 75
        assert run_score(plugin(), pod, node) == 75
        node.add_claim(pod)
        assert run_score(plugin(), pod, node) == 75
        node.add_claim(make_pod("other", {"cpu": "2", "memory": "1Gi"}))
        # cpu 3000/4000 -> 25; memory 2Gi/4Gi -> 50; (25 + 50) // 2 = 37
        assert run_score(plugin(), pod, node) == 37

    def test_score_without_prefilter(self) -> None:
        fit = plugin()
        assert fit.score(CycleState(), make_pod("p", INCOMING), gpu_node()) == 56


# -- RequestedToCapacityRatio ---------------------------------------------------------------
SHAPE = [{"utilization": 10, "score": 2}, {"utilization": 50, "score": 8},
         {"utilization": 80, "score": 4}]


def ratio(shape: list[dict[str, int]] | None = None,
          resources: list[dict[str, Any]] | None = None) -> NodeResourcesFit:
    strategy: dict[str, Any] = {"type": "RequestedToCapacityRatio"}
    if shape is not None:
        strategy["requestedToCapacityRatio"] = {"shape": shape}
    if resources is not None:
        strategy["resources"] = resources
    return NodeResourcesFit({"scoringStrategy": strategy}, None)


class TestRequestedToCapacityRatio:
    @pytest.mark.parametrize(("utilization", "expected"), [
        (0, 20),     # below the first point: its score (2 x 10)
        (10, 20),
        (30, 50),    # 20 + 60*20//40
        (37, 60),    # 20 + 60*27//40 = 20 + 40 (40.5 truncated)
        (50, 80),
        (61, 66),    # 80 + (-40*11)/30 = 80 - 14 (Go truncates -14.67 toward zero)
        (80, 40),
        (95, 40),    # above the last point: its score
        (100, 40),
    ])
    def test_broken_linear(self, utilization: int, expected: int) -> None:
        shape = ((10, 20), (50, 80), (80, 40))
        assert broken_linear(shape, utilization) == expected

    def test_default_shape_is_utilization(self) -> None:
        # cpu 50% -> 50; memory 3Gi/8Gi -> 37% -> 37; round(87 / 2 = 43.5) = 44
        assert run_score(ratio(), make_pod("p", INCOMING), gpu_node()) == 44

    def test_round_half_up_like_go(self) -> None:
        node = make_node("n", {"cpu": "4", "memory": "20Gi", "pods": 110})
        bound(node, make_pod("a", {"cpu": "1", "memory": "6Gi"}))
        # cpu 50 -> 50; memory 7/20 = 35 -> 35; 85 / 2 = 42.5 -> 43 (banker's would be 42)
        assert run_score(ratio(), make_pod("p", {"cpu": "1", "memory": "1Gi"}), node) == 43

    def test_custom_shape_interpolation_and_clamps(self) -> None:
        fit = ratio(SHAPE, [{"name": "cpu", "weight": 1}])
        node = make_node("n", {"cpu": "10", "memory": "8Gi", "pods": 110})
        # 500m of 10 cpu = 5% -> below first point -> 20
        assert run_score(fit, make_pod("p", {"cpu": "500m"}), node) == 20
        # 3700m = 37% -> 60
        assert run_score(fit, make_pod("p", {"cpu": "3700m"}), node) == 60
        # 6100m = 61% -> 66
        assert run_score(fit, make_pod("p", {"cpu": "6100m"}), node) == 66
        # 9500m = 95% -> above last point -> 40
        assert run_score(fit, make_pod("p", {"cpu": "9500m"}), node) == 40
        # over-requested: utilization counts as 100 -> 40
        assert run_score(fit, make_pod("p", {"cpu": "12"}), node) == 40

    def test_gpu_binpack_prefers_the_fuller_node(self) -> None:
        resources = [{"name": "cpu", "weight": 1}, {"name": GPU, "weight": 3}]
        fit = ratio(resources=resources)
        pod = make_pod("p", {"cpu": "1", GPU: 1})
        busy = make_node("busy", {"cpu": "8", "memory": "8Gi", "pods": 110, GPU: 4})
        bound(busy, make_pod("a", {GPU: 2}))
        idle = make_node("idle", {"cpu": "8", "memory": "8Gi", "pods": 110, GPU: 4})
        # a's container had no cpu request: it counts 100m for scoring.
        # busy: cpu 1100/8000 -> 13; gpu 3/4 -> 75; round((13 + 225) / 4 = 59.5) = 60
        assert run_score(fit, pod, busy) == 60
        # idle: cpu 1000/8000 -> 12; gpu 1/4 -> 25; round((12 + 75) / 4 = 21.75) = 22
        assert run_score(fit, pod, idle) == 22

    def test_zero_scores_do_not_count_their_weight(self) -> None:
        node = make_node("n", {"cpu": "4", "memory": "1000Gi", "pods": 110})
        pod = make_pod("p", {"cpu": "2", "memory": "1Gi"})
        # cpu 50 -> 50; memory 1Gi*100//1000Gi = 0 -> f = 0, left out: 50 / 1 = 50
        assert run_score(ratio(), pod, node) == 50
        # Every resource at zero: 0.
        assert run_score(ratio(), make_pod("q", {"cpu": "1m", "memory": "1"}),
                         make_node("big", {"cpu": "1000", "memory": "1000Gi", "pods": 1})) == 0

    def test_empty_allocatable_and_unrequested_gpu_are_left_out(self) -> None:
        resources = [{"name": "cpu", "weight": 1}, {"name": GPU, "weight": 9}]
        fit = ratio(resources=resources)
        cpu_node = make_node("c", {"cpu": "4", "memory": "8Gi", "pods": 110})
        # gpu allocatable 0 -> skipped; cpu 1000/4000 -> 25
        assert run_score(fit, make_pod("p", {"cpu": "1", GPU: 1}), cpu_node) == 25
        # cpu-only pod on a GPU node: gpu skipped; cpu 2000/4000 -> 50
        assert run_score(fit, make_pod("p", {"cpu": "1"}), gpu_node()) == 50

    def test_flat_shape_point(self) -> None:
        fit = ratio([{"utilization": 40, "score": 7}])
        # A single point: its score everywhere -> 70 for both resources
        assert run_score(fit, make_pod("p", INCOMING), gpu_node()) == 70


# -- args ------------------------------------------------------------------------------
class TestArgs:
    def test_defaults(self) -> None:
        assert validate_args({}, ARGS_PATH) == {
            "scoringStrategy": {
                "type": "LeastAllocated",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
            },
            "ignoredResources": [],
            "ignoredResourceGroups": [],
        }

    def test_ratio_defaults_and_idempotence(self) -> None:
        out = validate_args({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}, ARGS_PATH)
        assert out["scoringStrategy"]["requestedToCapacityRatio"] == {
            "shape": [{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]
        }
        assert out["scoringStrategy"]["resources"] == [
            {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
        ]
        assert validate_args(out, ARGS_PATH) == out
        assert parse_args(out, ARGS_PATH) == FitArgs(strategy="RequestedToCapacityRatio")

    def test_constructor_accepts_validated_or_raw_args(self) -> None:
        raw = {"scoringStrategy": {"type": "MostAllocated"}}
        a = NodeResourcesFit(validate_args(raw, ARGS_PATH), None)
        b = NodeResourcesFit(raw, None)
        assert a.args == b.args
        assert NodeResourcesFit(parse_args(raw), None).args == a.args

    @pytest.mark.parametrize(("raw", "path", "message"), [
        ({"scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}]}},
         "scoringStrategy.resources[1].weight", "must be >= 1, got 0"),
        ({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 101}]}},
         "scoringStrategy.resources[0].weight", "must be <= 100, got 101"),
        ({"scoringStrategy": {"resources": [{"name": "cpu", "weight": "2"}]}},
         "scoringStrategy.resources[0].weight", "must be an integer"),
        ({"scoringStrategy": {"resources": [{"weight": 1}]}},
         "scoringStrategy.resources[0].name", "is required"),
        ({"scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "cpu"}]}},
         "scoringStrategy.resources[1].name", "duplicate"),
        ({"scoringStrategy": {"resources": [{"name": "pods"}]}},
         "scoringStrategy.resources[0].name", "pods"),
        ({"scoringStrategy": {"resources": []}},
         "scoringStrategy.resources", "at least one"),
        ({"scoringStrategy": {"resources": [{"name": "cpu", "wieght": 1}]}},
         "scoringStrategy.resources[0].wieght", "unknown field"),
        ({"scoringStrategy": {"type": "BinPack"}},
         "scoringStrategy.type", "must be one of LeastAllocated, MostAllocated, "
         "RequestedToCapacityRatio, got 'BinPack'"),
        ({"scoringStrategy": {"kind": "x"}}, "scoringStrategy.kind", "unknown field"),
        ({"scoring": {}}, "scoring", "unknown field"),
        ({"scoringStrategy": []}, "scoringStrategy", "must be a mapping"),
        ({"scoringStrategy": {"type": "LeastAllocated",
                              "requestedToCapacityRatio": {"shape": []}}},
         "scoringStrategy.requestedToCapacityRatio", "only valid with type"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": []}}},
         "scoringStrategy.requestedToCapacityRatio.shape", "at least one point"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [
                                  {"utilization": 50, "score": 1},
                                  {"utilization": 50, "score": 2}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
         "must be greater than the previous point's 50, got 50"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [
                                  {"utilization": 60, "score": 1},
                                  {"utilization": 20, "score": 2}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
         "must be greater than"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [
                                  {"utilization": 101, "score": 1}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
         "must be <= 100, got 101"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [
                                  {"utilization": -1, "score": 1}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[0].utilization",
         "must be >= 0, got -1"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [
                                  {"utilization": 0, "score": 0},
                                  {"utilization": 100, "score": 100}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[1].score",
         "must be <= 10, got 100 (shape scores are 0..10"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"shape": [{"utilization": 0}]}}},
         "scoringStrategy.requestedToCapacityRatio.shape[0].score", "is required"),
        ({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                              "requestedToCapacityRatio": {"functionshape": []}}},
         "scoringStrategy.requestedToCapacityRatio.functionshape", "unknown field"),
        ({"ignoredResources": "example.com/foo"}, "ignoredResources", "must be a list"),
        ({"ignoredResourceGroups": ["example.com/foo"]}, "ignoredResourceGroups[0]", "no '/'"),
    ])
    def test_errors_name_the_field(self, raw: dict[str, Any], path: str, message: str) -> None:
        with pytest.raises(ConfigError) as caught:
            validate_args(raw, ARGS_PATH)
        assert caught.value.path == f"{ARGS_PATH}.{path}"
        assert message in caught.value.message
        assert str(caught.value).startswith(f"{ARGS_PATH}.{path}: ")

    def test_brief_example_message(self) -> None:
        raw = {"scoringStrategy": {"resources": [{"name": "cpu"}, {"name": "memory",
                                                                   "weight": 0}]}}
        with pytest.raises(ConfigError) as caught:
            validate_args(raw, ARGS_PATH)
        assert str(caught.value) == (
            "pluginConfig[NodeResourcesFit].args.scoringStrategy.resources[1].weight: "
            "must be >= 1, got 0"
        )

    def test_constructor_rejects_bad_args(self) -> None:
        with pytest.raises(ConfigError):
            NodeResourcesFit({"scoringStrategy": {"type": "Nope"}}, None)
