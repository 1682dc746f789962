"""Score plugins of kube-scheduler's default profile: NodeAffinity (preferred terms),
NodeResourcesBalancedAllocation and ImageLocality, table-driven from upstream's rules."""

from __future__ import annotations

from typing import Any, cast

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, normalized_image, parse_pod
from coscheduling.config.errors import ConfigError
from coscheduling.core.cache import Cache
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import scale_to_best
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.plugins.imagelocality import ImageLocality, priority
from coscheduling.plugins.nodeaffinity import NodeAffinity
from coscheduling.plugins.noderesources.balanced import (
    NodeResourcesBalancedAllocation,
    balance,
    parse_args,
)

MB = 1024 * 1024


def pod_with(*, requests: dict[str, str] | None = None, images: tuple[str, ...] = ("app",),
             init_images: tuple[str, ...] = (), affinity: dict[str, Any] | None = None,
             name: str = "p", volumes: list[dict[str, Any]] | None = None) -> Pod:
    containers = [{"name": f"c{i}", "image": image,
                   "resources": {"requests": requests or {}}}
                  for i, image in enumerate(images)]
    spec: dict[str, Any] = {"containers": containers,
                            "initContainers": [{"name": f"i{i}", "image": image}
                                               for i, image in enumerate(init_images)]}
    if affinity is not None:
        spec["affinity"] = affinity
    if volumes is not None:
        spec["volumes"] = volumes
    pod = parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}"},
                     "spec": spec})
    assert not pod.parse_error, pod.parse_error
    return pod


def node_doc(name: str, *, labels: dict[str, str] | None = None, cpu: str = "4",
             memory: str = "8Gi", images: list[dict[str, Any]] | None = None,
             **extra: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels or {}},
            "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110", **extra},
                       "images": images or []}}


def info(name: str = "n", **kwargs: Any) -> NodeInfo:
    return NodeInfo(name, parse_node(node_doc(name, **kwargs)))


# -- NodeAffinity: preferred terms ---------------------------------------------------------
def preferred(*terms: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": weight, "preference": preference} for weight, preference in terms]}}


ZONE_A = {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
GPU = {"matchExpressions": [{"key": "gpu", "operator": "Exists"}]}
NAMED_N2 = {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]}


@pytest.mark.parametrize(("affinity", "nodes", "raw", "normalized"), [
    # One term: matching nodes score its weight, then the best is scaled to 100.
    (preferred((5, ZONE_A)), {"n1": {"zone": "a"}, "n2": {"zone": "b"}},
     {"n1": 5, "n2": 0}, {"n1": 100, "n2": 0}),
    # Weights of every matching term add up.
    (preferred((20, ZONE_A), (60, GPU)),
     {"n1": {"zone": "a"}, "n2": {"zone": "a", "gpu": "1"}, "n3": {"gpu": "1"}},
     {"n1": 20, "n2": 80, "n3": 60}, {"n1": 25, "n2": 100, "n3": 75}),
    # matchFields on the node name.
    (preferred((3, NAMED_N2)), {"n1": {}, "n2": {}}, {"n1": 0, "n2": 3}, {"n1": 0, "n2": 100}),
    # Nothing matches: every node stays 0.
    (preferred((9, GPU)), {"n1": {}, "n2": {}}, {"n1": 0, "n2": 0}, {"n1": 0, "n2": 0}),
    # A term with no requirement, or of weight 0, counts for nothing.
    (preferred((50, {}), (0, ZONE_A), (1, GPU)), {"n1": {"zone": "a"}, "n2": {"gpu": "x"}},
     {"n1": 0, "n2": 1}, {"n1": 0, "n2": 100}),
    # No preferred terms at all.
    (None, {"n1": {"zone": "a"}}, {"n1": 0}, {"n1": 0}),
])
def test_node_affinity_scores_preferred_terms(
        affinity: dict[str, Any] | None, nodes: dict[str, dict[str, str]],
        raw: dict[str, int], normalized: dict[str, int]) -> None:
    plugin = NodeAffinity()
    pod = pod_with(affinity=affinity)
    state = CycleState()
    plugin.pre_filter(state, pod)
    assert ("NodeAffinity" in state.skip_score) == (not pod.preferred_terms)
    scores = {name: plugin.score(state, pod, info(name, labels=labels))
              for name, labels in nodes.items()}
    assert scores == raw
    plugin.normalize_scores(state, pod, scores)
    assert scores == normalized


def test_preferred_terms_enter_the_signature() -> None:
    plugin = NodeAffinity()
    assert plugin.sign(pod_with(affinity=preferred((5, ZONE_A)))) != plugin.sign(
        pod_with(affinity=preferred((6, ZONE_A))))
    assert plugin.sign(pod_with()) == plugin.sign(pod_with(name="other"))


@pytest.mark.parametrize("affinity", [
    preferred((5, {"matchExpressions": [{"key": "zone", "operator": "Near"}]})),
    {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": "high", "preference": ZONE_A}]}},
])
def test_malformed_preferred_terms_are_parse_errors(affinity: dict[str, Any]) -> None:
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns"},
                     "spec": {"containers": [{"name": "c"}], "affinity": affinity}})
    assert pod.parse_error.startswith("spec.affinity: ")


@pytest.mark.parametrize(("scores", "reverse", "expected"), [
    ({"a": 1, "b": 3}, False, {"a": 33, "b": 100}),
    ({"a": 1, "b": 3}, True, {"a": 67, "b": 0}),
    ({"a": 0, "b": 0}, False, {"a": 0, "b": 0}),
    ({"a": 0, "b": 0}, True, {"a": 100, "b": 100}),
    ({}, False, {}),
])
def test_scale_to_best(scores: dict[str, int], reverse: bool, expected: dict[str, int]) -> None:
    scale_to_best(scores, reverse=reverse)
    assert scores == expected


# -- NodeResourcesBalancedAllocation -------------------------------------------------------
@pytest.mark.parametrize(("fractions", "expected"), [
    ([0.5, 0.5], 100),
    ([0.25, 0.75], 75),          # std = |0.25 - 0.75| / 2
    ([1.0, 0.0], 50),
    ([0.3], 100),                # fewer than two: std 0
    ([], 100),
    ([0.0, 0.5, 1.0], 59),       # sqrt(((0.5)^2 + 0 + (0.5)^2) / 3) = 0.408...
])
def test_balance(fractions: list[float], expected: int) -> None:
    assert balance(fractions) == expected


@pytest.mark.parametrize(("requests", "node", "used", "expected"), [
    # cpu 1/4, memory 4Gi/8Gi: std 0.125 -> 87
    ({"cpu": "1", "memory": "4Gi"}, {}, {}, 87),
    # real requests of placed pods count: cpu (1+1)/4, memory (2+2)/8 -> balanced
    ({"cpu": "1", "memory": "2Gi"}, {}, {"cpu": 1000, "memory": 2 * 1024 * MB}, 100),
    # over-requested fractions are capped at 1: cpu 1, memory 0.5 -> 75
    ({"cpu": "6", "memory": "4Gi"}, {}, {}, 75),
    # best effort: not scored
    ({}, {}, {}, 0),
    # an extended resource the node lacks is left out of a 3-resource config
    ({"cpu": "2", "memory": "4Gi"}, {}, {}, 100),
])
def test_balanced_allocation_scores(requests: dict[str, str], node: dict[str, str],
                                    used: dict[str, int], expected: int) -> None:
    plugin = NodeResourcesBalancedAllocation({"resources": [
        {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
        {"name": "example.com/gpu", "weight": 1}]})
    target = info(**node)
    target.requested.update(used)
    pod = pod_with(requests=requests)
    assert plugin.score(CycleState(), pod, target) == expected


def test_balanced_allocation_counts_other_gangs_claims_not_its_own() -> None:
    plugin = NodeResourcesBalancedAllocation()
    pod = pod_with(requests={"cpu": "1", "memory": "2Gi"})
    other = pod_with(requests={"cpu": "2", "memory": "0"}, name="other")
    target = info()
    target.add_claim(pod)
    assert plugin.score(CycleState(), pod, target) == 100  # its own claim is its own room
    target.add_claim(other)  # cpu (2+1)/4 against memory 2/8
    assert plugin.score(CycleState(), pod, target) == 75


def test_balanced_allocation_scores_a_requested_extended_resource() -> None:
    plugin = NodeResourcesBalancedAllocation({"resources": [
        {"name": "cpu", "weight": 1}, {"name": "example.com/gpu", "weight": 1}]})
    pod = pod_with(requests={"cpu": "1", "example.com/gpu": "3"})
    # cpu 1/4 and gpu 3/4: std 0.25 -> 75
    assert plugin.score(CycleState(), pod, info(**{"example.com/gpu": "4"})) == 75
    # The node has no such resource: cpu alone, std 0.
    assert plugin.score(CycleState(), pod, info()) == 100


@pytest.mark.parametrize(("args", "path"), [
    ({"resources": [{"name": "cpu", "weight": 2}]}, "args.resources[0].weight"),
    ({"resources": [{"name": "cpu"}, {"name": "cpu"}]}, "args.resources[1].name"),
    ({"resources": []}, "args.resources"),
    ({"resource": []}, "args.resource"),
])
def test_balanced_allocation_args_errors_name_the_field(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_args(args, "args")
    assert err.value.path == path


def test_balanced_allocation_default_args() -> None:
    assert parse_args(None) == ("cpu", "memory")


# -- ImageLocality -------------------------------------------------------------------------
class _Handle:
    def __init__(self, cache: Cache) -> None:
        self.cache = cache


def image(names: list[str], size_mb: int) -> dict[str, Any]:
    return {"names": names, "sizeBytes": size_mb * MB}


def locality(nodes: dict[str, list[dict[str, Any]]]) -> tuple[ImageLocality, Cache]:
    cache = Cache()
    for name, images in nodes.items():
        cache.set_node(parse_node(node_doc(name, images=images)))
    return ImageLocality({}, cast(Handle, _Handle(cache))), cache


@pytest.mark.parametrize(("name", "normalized"), [
    ("nginx", "nginx:latest"),
    ("nginx:1.27", "nginx:1.27"),
    ("registry:5000/app", "registry:5000/app:latest"),
    ("registry:5000/app:v2", "registry:5000/app:v2"),
    ("app@sha256:abc", "app@sha256:abc"),
])
def test_image_names_get_the_latest_tag_when_untagged(name: str, normalized: str) -> None:
    assert normalized_image(name) == normalized


@pytest.mark.parametrize(("total", "images", "expected"), [
    (0, 1, 0),
    (23 * MB, 1, 0),
    (1000 * MB, 1, 100),
    (5000 * MB, 1, 100),
    (1000 * MB, 2, (100 * (977 * MB)) // (2000 * MB - 23 * MB)),
    (500 * MB, 1, (100 * 477 * MB) // (977 * MB)),
    (500 * MB, 0, 0),
])
def test_priority_clamps_and_scales(total: int, images: int, expected: int) -> None:
    assert priority(total, images) == expected


@pytest.mark.parametrize(("pod", "nodes", "expected"), [
    # A 500 MiB image on 1 of 2 nodes: int(500 MiB * 1/2) = 250 MiB on that node.
    (pod_with(images=("app:v1",)),
     {"n1": [image(["app:v1"], 500)], "n2": []},
     {"n1": (100 * (250 - 23) * MB) // (977 * MB), "n2": 0}),
    # On both nodes: spread 1, the full size counts.
    (pod_with(images=("app:v1",)),
     {"n1": [image(["app:v1"], 500)], "n2": [image(["app:v1"], 500)]},
     {"n1": (100 * 477 * MB) // (977 * MB), "n2": (100 * 477 * MB) // (977 * MB)}),
    # Untagged image in the pod matches ':latest' on the node; init containers count.
    (pod_with(images=("app",), init_images=("tool:1",)),
     {"n1": [image(["docker.io/app:latest", "app:latest"], 1000), image(["tool:1"], 100)]},
     {"n1": (100 * (1100 * MB - 23 * MB)) // (2000 * MB - 23 * MB)}),
    # Image volumes count as images too.
    (pod_with(images=("app:v1",), volumes=[{"name": "m", "image": {"reference": "model:7"}}]),
     {"n1": [image(["model:7"], 3000)], "n2": [image(["model:7"], 3000)]},
     {"n1": 100, "n2": 100}),
    # Small images score nothing.
    (pod_with(images=("tiny:1",)), {"n1": [image(["tiny:1"], 5)]}, {"n1": 0}),
])
def test_image_locality_scores(pod: Pod, nodes: dict[str, list[dict[str, Any]]],
                               expected: dict[str, int]) -> None:
    plugin, cache = locality(nodes)
    scores = {}
    for name in nodes:
        node = cache.node(name)
        assert node is not None
        scores[name] = plugin.score(CycleState(), pod, node)
    assert scores == expected


def test_image_locality_signature_follows_how_many_nodes_hold_the_images() -> None:
    plugin, cache = locality({"n1": [image(["app:v1"], 500)], "n2": []})
    pod = pod_with(images=("app:v1",))
    first = plugin.sign(pod)
    assert plugin.sign(pod_with(images=("app:v1",), name="twin")) == first
    cache.set_node(parse_node(node_doc("n2", images=[image(["app:v1"], 500)])))
    second = plugin.sign(pod)
    assert second != first
    cache.set_node(parse_node(node_doc("n3")))  # one more node: the spread changes
    assert plugin.sign(pod) not in (first, second)
    cache.remove_node("n1")
    cache.remove_node("n2")
    # Nobody holds it any more: the number of nodes no longer matters.
    nowhere = plugin.sign(pod)
    cache.set_node(parse_node(node_doc("n4")))
    assert plugin.sign(pod) == nowhere
    assert plugin.index.holders == {}


def test_image_index_rebuilds_when_the_change_log_is_gone(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setattr("coscheduling.core.cache.MIN_CHANGE_LOG", 2)
    monkeypatch.setattr("coscheduling.core.cache.CHANGE_LOG_PER_NODE", 0)
    plugin, cache = locality({"n1": [image(["a:1"], 100)]})
    plugin.index.sync(cache)
    for index in range(6):
        cache.set_node(parse_node(node_doc(f"m{index}", images=[image(["a:1", "b:1"], 100)])))
    cache.remove_node("n1")
    plugin.index.sync(cache)
    assert plugin.index.holders == {"a:1": 6, "b:1": 6}
