"""Dynamic resource allocation on real nodes: the DRA example driver of Kubernetes runs as
the kubelet plugin of dra-node-1 and dra-node-2 (host processes, each node over containerd
1.7 with CDI), publishes their simulated GPUs as ResourceSlices and prepares the devices
this project's scheduler allocated; the containers see them as environment variables.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import CONTAINERD_VERSION
from coscheduling.localcluster.realnodes import (
    DRA_DEVICES_PER_NODE,
    DRA_DRIVER,
    RealNodes,
)
from tests.integration.fixtures import kubectl
from tests.integration.kube import create_pod, create_podgroup, wait_until
from tests.integration.test_real_nodes import POD_TIMEOUT, real_pod

API = "/apis/resource.k8s.io/v1"


@pytest.fixture(scope="module")
def dra_nodes(local_cluster: LocalCluster) -> Iterator[RealNodes]:
    nodes = local_cluster.start_real_nodes(2, "dra-node", dra_driver=True)
    try:
        yield nodes
    finally:
        local_cluster.stop_real_nodes()


def _slices(kube: KubeClient, node: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = kube.get(
        f"{API}/resourceslices", fieldSelector=f"spec.nodeName={node}")["items"]
    return items


def test_each_node_runs_containerd_1_7_and_its_driver_publishes_its_devices(dra_nodes: RealNodes,
                                                 kube: KubeClient) -> None:
    for node in dra_nodes.names:
        info = kube.get(f"/api/v1/nodes/{node}")["status"]["nodeInfo"]
        assert info["containerRuntimeVersion"] == f"containerd://{CONTAINERD_VERSION}"
        [published] = _slices(kube, node)
        assert published["spec"]["driver"] == DRA_DRIVER
        assert len(published["spec"]["devices"]) == DRA_DEVICES_PER_NODE


def _gpu_pod(name: str, scheduler: str) -> dict[str, Any]:
    """A gang member that prints the GPU_DEVICE_* variables CDI gave it, then ends."""
    body = real_pod(name, exit_code=0, sleep=1, scheduler=scheduler, group="gpus")
    spec = body["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    container = spec["containers"][0]
    container["command"] = ["sh", "-c", "env | grep ^GPU_DEVICE_ | sort; sleep 5"]
    container["resources"]["claims"] = [{"name": "gpu"}]
    return body


def _allocated(kube: KubeClient, namespace: str, pod: str) -> dict[str, Any]:
    """The one device allocated to the pod's claim."""
    body = kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    [status] = body["status"]["resourceClaimStatuses"]
    claim = kube.get(
        f"{API}/namespaces/{namespace}/resourceclaims/{status['resourceClaimName']}")
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return dict(result)


def _phase(kube: KubeClient, namespace: str, pod: str) -> str:
    body = kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")
    return str((body.get("status") or {}).get("phase", ""))


def test_a_gang_with_template_claims_starts_with_the_prepared_devices(
    dra_nodes: RealNodes, local_cluster: LocalCluster, kube: KubeClient, namespace: str,
    start_scheduler: Any,
) -> None:
    sched = start_scheduler()
    kube.create(f"{API}/namespaces/{namespace}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DRA_DRIVER}}]}}}})
    create_podgroup(kube, namespace, "gpus", 2)
    names = ["gpus-0", "gpus-1"]
    for name in names:
        create_pod(kube, namespace, _gpu_pod(name, sched.name))
    # The claims made from the template are deleted once their pods have ended.
    wait_until(lambda: all(_phase(kube, namespace, n) == "Running" for n in names),
               timeout=POD_TIMEOUT, what="both gang members to run")
    allocated = {name: _allocated(kube, namespace, name) for name in names}
    wait_until(lambda: all(_phase(kube, namespace, n) == "Succeeded" for n in names),
               timeout=POD_TIMEOUT, what="both gang members to succeed")
    for name, result in allocated.items():
        node = kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")["spec"]["nodeName"]
        assert result["driver"] == DRA_DRIVER and result["pool"] == node, result
        logs = kubectl(local_cluster, "-n", namespace, "logs", name).stdout
        devices = re.findall(r"^GPU_DEVICE_\d+=(\S+)$", logs, re.MULTILINE)
        assert devices == [result["device"]], logs
