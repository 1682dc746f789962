"""Fields that change where a pod may run: what this scheduler cannot honour is refused out
loud, by field (UnsupportedFields); the rest is honoured."""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.framework.status import Code
from coscheduling.plugins.nodeports import NodePorts
from coscheduling.plugins.unsupported import UnsupportedFields, refusal
from tests.simulation import GROUP_LABEL, SimCluster

NOT_PLACED = "not implemented by this scheduler; the pod is not placed"


def pod_with(name: str = "p", group: str = "", **spec: Any) -> Pod:
    spec.setdefault("containers", [{"name": "c", "image": "app:1",
                                    "resources": {"requests": {"cpu": "1"}}}])
    spec.setdefault("schedulerName", "batch-scheduler")
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                                   "labels": {GROUP_LABEL: group} if group else {}},
                      "spec": spec})


HARMLESS_VOLUMES = [
    {"name": "cfg", "configMap": {"name": "cfg"}},
    {"name": "tmp", "emptyDir": {}},
    {"name": "key", "secret": {"secretName": "key"}},
    {"name": "host", "hostPath": {"path": "/data"}},
    {"name": "all", "projected": {"sources": []}},
    {"name": "model", "image": {"reference": "model:1"}},
]


@pytest.mark.parametrize(("spec", "message"), [
    ({"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                  {"name": "disk", "gcePersistentDisk": {"pdName": "d"}}]},
     "spec.volumes[1].gcePersistentDisk: the gcePersistentDisk volume type (conflicts, attach "
     f"limits) is {NOT_PLACED}"),
    ({"volumes": [{"name": "disk", "gcePersistentDisk": {"pdName": "d"}}]},
     "spec.volumes[0].gcePersistentDisk: the gcePersistentDisk volume type (conflicts, attach "
     f"limits) is {NOT_PLACED}"),
    ({"volumes": [{"name": "blk", "rbd": {"image": "i", "monitors": ["m"]}}]},
     f"spec.volumes[0].rbd: the rbd volume type (conflicts, attach limits) is {NOT_PLACED}"),
    ({"workloadRef": {"name": "w", "podGroup": "workers"}},
     "spec.workloadRef: the v1.35 alpha Workload API is not implemented by this scheduler; "
     "name a scheduling.k8s.io PodGroup in spec.schedulingGroup.podGroupName; the pod is not "
     "placed"),
    ({"schedulingGroup": {"podGroupName": ""}},
     "spec.schedulingGroup.podGroupName: must name a PodGroup, got ''; the pod spec cannot "
     "be read, so the pod is not placed"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Near"}]}]}}}},
     "spec.affinity: unknown node selector operator 'Near'; the pod spec cannot be read, so "
     "the pod is not placed"),
])
def test_refused_with_the_field_named(spec: dict[str, Any], message: str) -> None:
    pod = pod_with(**spec)
    status = UnsupportedFields().pre_filter(CycleState(), pod)
    assert status.code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert status.plugin == "UnsupportedFields"
    assert status.message == message == refusal(pod)


@pytest.mark.parametrize("spec", [
    {},
    {"volumes": HARMLESS_VOLUMES},
    {"volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]},
    {"volumes": [{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]},
    {"resources": {}},
    {"resources": {"requests": {"cpu": "2"}}},
    {"resourceClaims": []},
    {"resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}]},  # DRA's
    {"nodeSelector": {"zone": "a"}, "tolerations": [{"operator": "Exists"}]},
])
def test_what_is_handled_passes(spec: dict[str, Any]) -> None:
    pod = pod_with(**spec)
    assert UnsupportedFields().pre_filter(CycleState(), pod).ok
    assert refusal(pod) == ""


def test_a_refused_pod_stays_pending_with_the_reason(sim: SimCluster) -> None:
    sim.add_node("n1")
    pod = pod_with(volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": "gone"}}])
    sim.pods.on_add(pod)
    sim.add_pod("plain")
    sim.run()
    assert sim.bound == {"ns/plain": "n1"}
    queued = sim.scheduler.queue.get(pod.key)
    assert queued is not None and queued.where == "unschedulable"
    assert queued.last_reason == 'persistentvolumeclaim "gone" not found'


def test_a_gang_with_a_refused_member_waits_whole_and_names_the_field(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_group("g", 3)
    sim.add_pod("a", group="g")
    sim.add_pod("b", group="g")
    refused = pod_with("c", group="g", volumes=[{"name": "d", "rbd": {"image": "i"}}])
    sim.pods.on_add(refused)
    sim.run()
    assert sim.bound == {}
    reasons = {key: q.last_reason for key in ("ns/a", "ns/b", "ns/c")
               if (q := sim.scheduler.queue.get(key)) is not None}
    assert reasons["ns/c"].startswith("spec.volumes[0].rbd: the rbd volume type")
    assert any("spec.volumes[0].rbd" in reasons[key] for key in ("ns/a", "ns/b"))


def test_sidecar_host_ports_are_honoured_not_ignored() -> None:
    """Restartable init containers hold their host ports while the pod runs (kube-scheduler
    checks them since 1.34); ordinary init containers are done before the pod runs."""
    sidecar = pod_with("sidecar", initContainers=[
        {"name": "proxy", "restartPolicy": "Always",
         "ports": [{"containerPort": 9000, "hostPort": 9000}]},
        {"name": "setup", "ports": [{"containerPort": 9100, "hostPort": 9100}]}])
    assert sidecar.host_ports == (("0.0.0.0", "TCP", 9000),)
    node = NodeInfo("n", parse_node({"metadata": {"name": "n"}, "status": {
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}))
    node.add_pod(sidecar)
    other = pod_with("other", containers=[{"name": "c", "ports": [
        {"containerPort": 9000, "hostPort": 9000}]}])
    plugin = NodePorts()
    assert plugin.filter(CycleState(), other, node).rejected
    assert plugin.filter(CycleState(), pod_with("free"), node).ok


@pytest.mark.parametrize(("spec", "ports"), [
    ({"hostNetwork": True, "containers": [{"name": "c", "ports": [{"containerPort": 8080}]}]},
     (("0.0.0.0", "TCP", 8080),)),
    ({"hostNetwork": True, "containers": [{"name": "c", "ports": [
        {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "10.0.0.1"}]}]},
     (("10.0.0.1", "UDP", 53),)),
    ({"containers": [{"name": "c", "ports": [{"containerPort": 8080}]}]}, ()),
])
def test_host_network_container_ports_are_host_ports(spec: dict[str, Any],
                                                      ports: tuple[Any, ...]) -> None:
    assert pod_with(**spec).host_ports == ports


GI = 1024 ** 3


@pytest.mark.parametrize(("spec", "requests", "nonzero"), [
    # Pod-level requests replace the containers' sum for cpu and memory; overhead on top.
    ({"resources": {"requests": {"cpu": "2", "memory": "1Gi"}}, "overhead": {"cpu": "100m"},
      "containers": [{"name": "a", "resources": {"requests": {"cpu": "1", "memory": "4Gi"}}},
                     {"name": "b"}]},
     {"cpu": 2100, "memory": GI}, (2000, GI)),
    # Only cpu at pod level: memory still comes from the containers (best effort defaults
    # for scoring).
    ({"resources": {"requests": {"cpu": "3"}}, "containers": [{"name": "a"}]},
     {"cpu": 3000}, (3000, 200 * 1024 * 1024)),
    # A pod-level limit alone is the request when no container asks for the resource...
    ({"resources": {"limits": {"memory": "2Gi"}}, "containers": [{"name": "a"}]},
     {"memory": 2 * GI}, (100, 2 * GI)),
    # ...and the containers' requests stand when one does.
    ({"resources": {"limits": {"memory": "2Gi"}}, "containers": [
        {"name": "a", "resources": {"requests": {"memory": "1Gi"}}}]},
     {"memory": GI}, (100, GI)),
    # Extended resources cannot be set at pod level: the containers' requests count.
    ({"resources": {"requests": {"example.com/gpu": "4"}}, "containers": [
        {"name": "a", "resources": {"requests": {"example.com/gpu": "1"}}}]},
     {"example.com/gpu": 1}, (100, 200 * 1024 * 1024)),
])
def test_pod_level_resources_are_honoured(spec: dict[str, Any], requests: dict[str, int],
                                          nonzero: tuple[int, int]) -> None:
    pod = pod_with(**spec)
    assert not pod.parse_error, pod.parse_error
    assert pod.requests == requests
    assert (pod.nonzero_cpu, pod.nonzero_memory) == nonzero
    assert UnsupportedFields().pre_filter(CycleState(), pod).ok
