"""Fresh control-plane state for one run: CRDs, a namespace, kubelet-less nodes, pod bodies.

Everything goes through the project's raw-JSON KubeClient with no client-side rate limit,
so setting up 5000 nodes takes seconds and never counts in the measured window.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from bench.fastclient import FastClient
from bench.workloads import POD_CPU, POD_MEMORY, Shape
from coscheduling import GROUP_LABEL
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

NAMESPACE = "bench"
REPO = Path(__file__).resolve().parents[1]
OUR_CRD = REPO / "crd" / "podgroups.batch.scheduler.tencent.com.yaml"
OUR_QUEUE_CRD = REPO / "crd" / "queues.batch.scheduler.tencent.com.yaml"
OUR_PG_API = "batch.scheduler.tencent.com/v1"
UPSTREAM_PG_API = "scheduling.x-k8s.io/v1alpha1"
UPSTREAM_GROUP_LABEL = "scheduling.x-k8s.io/pod-group"
NATIVE_PG_API = "scheduling.k8s.io/v1beta1"  # Kubernetes 1.37's own PodGroup
# Every gang member carries this label whatever the scheduler: W5's selectors use it.
BENCH_GANG_LABEL = "bench/gang"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
SETUP_WORKERS = 32


def admin_client(kubeconfig: Path, pool: int = 64) -> KubeClient:
    """The cluster admin, unthrottled: the benchmark's own requests must not be the limit."""
    return KubeClient(ClientSettings(kubeconfig=str(kubeconfig), qps=0, burst=1,
                                     connection_pool=pool))


def wait_until(condition: Callable[[], Any], timeout: float, what: str,
               interval: float = 0.2) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        result = condition()
        if result:
            return result
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def apply_crds(kube: KubeClient, manifest: Path) -> list[str]:
    """Create every CRD in `manifest` and wait until each is established and served."""
    names = []
    for doc in yaml.safe_load_all(manifest.read_text()):
        if not doc or doc.get("kind") != "CustomResourceDefinition":
            continue
        try:
            kube.create("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", doc)
        except ApiError as err:
            if not err.conflict:
                raise
        name = doc["metadata"]["name"]
        names.append(name)
        wait_until(partial(_established, kube, name), 60, f"CRD {name}")
        group = doc["spec"]["group"]
        version = doc["spec"]["versions"][0]["name"]
        plural = doc["spec"]["names"]["plural"]
        wait_until(partial(_served, kube, f"/apis/{group}/{version}/{plural}"), 60,
                   f"{plural}.{group} to be served")
    return names


def _established(kube: KubeClient, name: str) -> bool:
    crd = kube.get(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or ())


def _served(kube: KubeClient, path: str) -> bool:
    try:
        kube.get(path, limit=1)
    except ApiError:
        return False
    return True


def create_namespace(kube: KubeClient, name: str = NAMESPACE) -> None:
    """The namespace, and its `default` ServiceAccount (pods are refused before it exists)."""
    kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                       "metadata": {"name": name}})

    def has_default_sa() -> bool:
        try:
            kube.get(f"/api/v1/namespaces/{name}/serviceaccounts/default")
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return True

    wait_until(has_default_sa, 60, f"ServiceAccount {name}/default")


def node_name(index: int) -> str:
    return f"node-{index:05d}"


ZONE_LABEL = "topology.kubernetes.io/zone"
ZONES = 3


def zone_of(name: str) -> str:
    """Nodes are spread over three zones, round robin (only W5's pods look at them)."""
    return f"zone-{int(name.rsplit('-', 1)[1]) % ZONES}"


def constrain(body: dict[str, Any], label: str, gang: str, kind: str) -> None:
    """W5's constraints among a gang's members: ``anti`` (required anti-affinity on the
    hostname: one member per node) or ``spread`` (zones, maxSkew 1, DoNotSchedule)."""
    selector = {"matchLabels": {label: gang}}
    if kind == "anti":
        body["spec"]["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": selector, "topologyKey": "kubernetes.io/hostname"}]}}
    elif kind == "spread":
        body["spec"]["topologySpreadConstraints"] = [{
            "maxSkew": 1, "topologyKey": ZONE_LABEL, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": selector}]


def node_body(name: str, shape: Shape | None = None) -> dict[str, Any]:
    """A Ready node (8 CPU slots unless `shape` says otherwise); nothing will ever run on
    it (no kubelet)."""
    shape = shape or Shape()
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    resources = {"cpu": shape.node_cpu, "memory": shape.node_memory,
                 "pods": str(shape.node_pods)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name,
                                              "kubernetes.io/os": "linux",
                                              ZONE_LABEL: zone_of(name)}},
        "spec": {},
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                            "message": "benchmark node (no kubelet)",
                            "lastHeartbeatTime": now, "lastTransitionTime": now}],
        },
    }


def create_nodes(kube: FastClient, count: int, shape: Shape | None = None) -> list[str]:
    """Create `count` nodes in parallel and lift the not-ready taint admission adds.

    The TaintNodesByCondition admission plugin taints every new node not-ready; the
    node-lifecycle controller (not run here) would lift it once the node is Ready.
    """
    names = [node_name(i) for i in range(count)]

    def make(name: str) -> None:
        created = kube.post("/api/v1/nodes", node_body(name, shape))
        taints = (created.get("spec") or {}).get("taints") or []
        kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
        if len(kept) != len(taints):
            kube.request("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": kept or None}},
                         "application/merge-patch+json")

    _parallel(make, names)
    return names


def _parallel(work: Callable[[str], None], items: Iterable[str]) -> None:
    with ThreadPoolExecutor(SETUP_WORKERS) as pool:
        for future in [pool.submit(work, item) for item in items]:
            future.result()


def pod_body(name: str, scheduler: str, labels: Mapping[str, str] | None = None,
             cpu: str = POD_CPU, memory: str = POD_MEMORY) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory}
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE, "labels": dict(labels or {})},
        "spec": {
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": resources, "limits": resources}}],
        },
    }


def join_gang(body: dict[str, Any], gang: str, api: str) -> None:
    """Make a pod a member of `gang` the way the scheduler under test expects: ours and
    upstream by a label, Kubernetes' own by `spec.schedulingGroup`."""
    body["metadata"]["labels"][BENCH_GANG_LABEL] = gang
    if api == "native":
        body["spec"]["schedulingGroup"] = {"podGroupName": gang}
    else:
        body["metadata"]["labels"][UPSTREAM_GROUP_LABEL if api == "upstream"
                                   else GROUP_LABEL] = gang


def podgroup_body(name: str, size: int, api: str, queue: str = "",
                  priority_class: str = "") -> tuple[str, dict[str, Any]]:
    """(collection path, body) of a PodGroup in the API of the scheduler under test
    (api: ours | upstream | native).

    Only minMember (minCount) is set: each scheduler then uses its default timeout. The
    native PodGroup also names its members' PriorityClass (kube-scheduler refuses a gang
    whose pods' priority differs from the group's) and asks to be disrupted whole.
    """
    if api == "native":
        version = NATIVE_PG_API
        # A gang is evicted whole or not at all (workload-aware preemption, beta in 1.37).
        spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": size}},
                                "disruptionMode": {"all": {}}}
        if priority_class:
            spec["priorityClassName"] = priority_class
    else:
        version = UPSTREAM_PG_API if api == "upstream" else OUR_PG_API
        spec = {"minMember": size}
        if queue:
            spec["queue"] = queue
    body = {"apiVersion": version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}
    return f"/apis/{version}/namespaces/{NAMESPACE}/podgroups", body


def create_priority_classes(kube: KubeClient, classes: Mapping[str, int]) -> None:
    for name, value in classes.items():
        kube.create("/apis/scheduling.k8s.io/v1/priorityclasses", {
            "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": name}, "value": value})


def create_queues(kube: KubeClient, weights: Iterable[tuple[str, int]]) -> None:
    for name, weight in weights:
        kube.create(f"/apis/{OUR_PG_API}/queues", {
            "apiVersion": OUR_PG_API, "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": weight}})
