"""End to end on real nodes, as an operator runs it: a local control plane of its own with
three real nodes (kubelets over containerd and runc), the default scheduler and kube-proxy
(so the chart's pods are bound and reach the API server through the `kubernetes` Service);
the scheduler's image as `make image` builds it, imported into each node's containerd (no
registry is reachable); `helm install` of the chart with its defaults; then what the
in-cluster scheduler does with gangs of real containers, a leader lost, a what-if through
`kubectl port-forward` over TLS, an upgrade and an uninstall.

The tests run in file order and share the cluster and the release; each step prints what
it did and how long it took (`make e2e` shows them).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling.cluster.client import ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster, ensure_binaries
from coscheduling.localcluster.build import ensure_helm
from coscheduling.localcluster.image_build import IMAGE
from coscheduling.localcluster.images import ImageArchive
from coscheduling.localcluster.realnodes import RealNodes, node_versions
from tests.integration.fixtures import kubectl
from tests.integration.kube import (
    exists,
    wait_until,
)
from tests.integration.test_chart import (
    CHART,
    run,
)
from tests.integration.test_image import ARCHIVE, image  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration
POD_TIMEOUT = 120.0
RELEASE, RELEASE_NAMESPACE = "coscheduling", "coscheduling-system"
SCHEDULER_NAME = "batch-scheduler"  # the chart's config.schedulerName
LEASE = (f"/apis/coordination.k8s.io/v1/namespaces/{RELEASE_NAMESPACE}/leases/"
         f"{SCHEDULER_NAME}")
# The chart's config.leaderElection: a follower takes over once the lease has run out,
# trying every retry period.
LEASE_DURATION, RETRY_PERIOD = 15.0, 2.0
USERS_NAMESPACE = "e2e-jobs"
REAL_NODES = 3


@contextlib.contextmanager
def step(what: str) -> Iterator[None]:
    """Print what a step did and how long it took."""
    started = time.monotonic()
    yield
    print(f"\n[e2e] {what}: {time.monotonic() - started:.1f}s", file=sys.stderr, flush=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane with three real nodes, kube-scheduler and kube-proxy."""
    with step(f"control plane and {REAL_NODES} real nodes started"):
        local = LocalCluster(tmp_path_factory.mktemp("e2e"), binaries=ensure_binaries(),
                             real_nodes=REAL_NODES).start()
    print(f"[e2e] node versions: {node_versions()}", file=sys.stderr)
    try:
        yield local
    finally:
        local.stop()


@pytest.fixture(scope="module")
def nodes(cluster: LocalCluster) -> RealNodes:
    assert cluster.real_nodes is not None
    return cluster.real_nodes


@pytest.fixture(scope="module")
def kube(cluster: LocalCluster) -> Iterator[KubeClient]:
    client = KubeClient(ClientSettings(kubeconfig=str(cluster.kubeconfig)))
    yield client
    client.close()


@pytest.fixture(scope="module")
def users(kube: KubeClient) -> str:
    """The namespace users' gangs run in (its `default` ServiceAccount made)."""
    kube.create("/api/v1/namespaces", {"metadata": {"name": USERS_NAMESPACE}})
    wait_until(lambda: exists(kube, f"/api/v1/namespaces/{USERS_NAMESPACE}/serviceaccounts/"
                              "default"), what="the users' namespace's ServiceAccount")
    return USERS_NAMESPACE


def helm(cluster: LocalCluster, *args: str, check: bool = True,
         ) -> subprocess.CompletedProcess[str]:
    return run(ensure_helm(), *args, "--kubeconfig", str(cluster.kubeconfig), check=check)


def _scheduler_pods(kube: KubeClient) -> list[dict[str, Any]]:
    pods: list[dict[str, Any]] = kube.get(
        f"/api/v1/namespaces/{RELEASE_NAMESPACE}/pods",
        labelSelector="app.kubernetes.io/name=coscheduling")["items"]
    return [p for p in pods if not p["metadata"].get("deletionTimestamp")]


def _running_and_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    ready = any(c["type"] == "Ready" and c["status"] == "True"
                for c in status.get("conditions") or [])
    return status.get("phase") == "Running" and ready


def _ready_replicas(kube: KubeClient, count: int) -> list[dict[str, Any]] | None:
    pods = [p for p in _scheduler_pods(kube) if _running_and_ready(p)]
    return pods if len(pods) == count else None


@pytest.fixture(scope="module")
def release(image: dict[str, Any], cluster: LocalCluster, nodes: RealNodes,  # noqa: F811
            kube: KubeClient) -> str:
    """The image imported into every node; the chart installed with its defaults; both
    replicas Running and Ready. The release's namespace."""
    with step(f"scheduler image {image['digest']} ({image['size'] / 2**20:.1f} MiB) "
              f"imported into {len(nodes.names)} real nodes"):
        nodes.import_image(ImageArchive(f"docker.io/library/{IMAGE}", ARCHIVE))
    with step("helm install with the chart's defaults"):
        helm(cluster, "install", RELEASE, str(CHART), "-n", RELEASE_NAMESPACE,
             "--create-namespace")
    with step("both scheduler replicas Running and Ready"):
        wait_until(lambda: _ready_replicas(kube, 2), timeout=POD_TIMEOUT,
                   what="two scheduler replicas Running and Ready")
    return RELEASE_NAMESPACE


def test_helm_install_with_defaults_runs_a_ready_scheduler(
    release: str, cluster: LocalCluster, nodes: RealNodes, kube: KubeClient,
) -> None:
    """The chart's pods were bound by the default scheduler to real nodes, run the image as
    65532, and reach the API server at the `kubernetes` Service with their ServiceAccount's
    token and the cluster CA (as the scheduler's own client does in-cluster)."""
    pods = _ready_replicas(kube, 2)
    assert pods is not None
    for pod in pods:
        assert pod["spec"]["nodeName"] in nodes.names, pod["spec"].get("nodeName")
        assert pod["spec"]["schedulerName"] == "default-scheduler"
    name = pods[0]["metadata"]["name"]
    with step("in-cluster credentials checked from a scheduler pod"):
        answer = kubectl(cluster, "-n", release, "exec", name, "--", "python", "-c",
                         SELF_SUBJECT_REVIEW).stdout
    review = json.loads(answer)
    assert review["uid"] == 65532
    assert review["user"]["username"] == f"system:serviceaccount:{release}:coscheduling"
    assert review["user"]["extra"]["authentication.kubernetes.io/pod-name"] == [name]


# Run in a scheduler pod: who the API server says the pod's token is, asked at the
# `kubernetes` Service's address (KUBERNETES_SERVICE_HOST) with the mounted CA.
SELF_SUBJECT_REVIEW = """
import json, os, ssl, urllib.request
sa = "/var/run/secrets/kubernetes.io/serviceaccount"
host = os.environ["KUBERNETES_SERVICE_HOST"] + ":" + os.environ["KUBERNETES_SERVICE_PORT"]
request = urllib.request.Request(
    f"https://{host}/apis/authentication.k8s.io/v1/selfsubjectreviews", method="POST",
    data=b'{"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}',
    headers={"Authorization": "Bearer " + open(f"{sa}/token").read(),
             "Content-Type": "application/json"})
context = ssl.create_default_context(cafile=f"{sa}/ca.crt")
with urllib.request.urlopen(request, context=context, timeout=10) as response:
    user = json.load(response)["status"]["userInfo"]
print(json.dumps({"uid": os.getuid(), "user": user}))
"""
