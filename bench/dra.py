"""W9 (issue 25): gangs whose members each ask for one device through dynamic resource
allocation (resource.k8s.io/v1), on nodes that publish DEVICES_PER_NODE devices each.

The harness publishes what a device driver would: one DeviceClass and a node-local
ResourceSlice per node; every member names one ResourceClaimTemplate, and the control plane's
resource-claim controller makes its claim, for every contender alike. At the end, every
allocated device is counted: none may be given twice.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from bench.cluster import NAMESPACE, _parallel, node_name
from bench.fastclient import FastClient
from coscheduling.cluster.client import KubeClient

API = "/apis/resource.k8s.io/v1"
DRIVER = "gpu.bench.example.com"
DEVICE_CLASS = "bench-gpu"
TEMPLATE = "one-gpu"


def publish(kube: FastClient, nodes: int, per_node: int) -> None:
    """The DeviceClass, a slice of ``per_node`` devices on each node, and the template."""
    kube.post(f"{API}/deviceclasses", {
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": DEVICE_CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]}})

    def slice_of(name: str) -> None:
        kube.post(f"{API}/resourceslices", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{name}-gpus"},
            "spec": {"driver": DRIVER, "nodeName": name,
                     "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu-{d}",
                                  "attributes": {"index": {"int": d}},
                                  "capacity": {"memory": {"value": "80Gi"}}}
                                 for d in range(per_node)]}})

    _parallel(slice_of, [node_name(i) for i in range(nodes)])
    kube.post(f"{API}/namespaces/{NAMESPACE}/resourceclaimtemplates", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": TEMPLATE, "namespace": NAMESPACE},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": DEVICE_CLASS}}]}}}})


def ask_for_a_device(body: dict[str, Any]) -> None:
    """A member's claim on one device, from the template."""
    spec = body["spec"]
    spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]
    for container in spec["containers"]:
        container["resources"]["claims"] = [{"name": "gpu"}]


def check_devices(kube: KubeClient, placement: dict[str, str]) -> dict[str, Any]:
    """Allocated devices given twice, claims allocated for no bound pod or on another node
    than their pod's, and bound pods without an allocated claim."""
    claims = kube.get(f"{API}/namespaces/{NAMESPACE}/resourceclaims").get("items") or []
    given: Counter[tuple[str, str]] = Counter()
    elsewhere = allocated_pods = 0
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        results = (allocation.get("devices") or {}).get("results") or []
        for result in results:
            given[(str(result.get("pool")), str(result.get("device")))] += 1
        owner = next((r.get("name") for r in claim["metadata"].get("ownerReferences") or ()
                      if r.get("kind") == "Pod"), None)
        if results and owner:
            allocated_pods += 1
            pools = {str(r.get("pool")) for r in results}
            if placement.get(owner) and pools != {placement[owner]}:
                elsewhere += 1
    return {"devices_given_twice": sum(1 for n in given.values() if n > 1),
            "claims_on_another_node": elsewhere,
            "bound_without_device": max(0, len(placement) - allocated_pods)}
