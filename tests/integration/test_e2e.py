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

import base64
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coscheduling import GROUP_LABEL
from coscheduling.cluster.client import ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster, ensure_binaries
from coscheduling.localcluster.build import ensure_helm
from coscheduling.localcluster.image_build import IMAGE
from coscheduling.localcluster.images import ImageArchive
from coscheduling.localcluster.processes import ClusterStartError
from coscheduling.localcluster.realnodes import RealNodes, node_versions
from tests.integration.fixtures import COMPAT_CRDS, crd_path, kubectl
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    exists,
    pod_condition,
    podgroups_path,
    wait_until,
)
from tests.integration.test_chart import (
    CHART,
    _chart_with_a_new_queue_field,
    _queue_field_served,
    run,
)
from tests.integration.test_image import ARCHIVE, image  # noqa: F401  (the fixture)
from tests.integration.test_real_nodes import (
    _observe_gang,
    _one_per_node,
    _port_forward,
    real_pod,
)

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


def _gang_pod(name: str, group: str, sleep: float) -> dict[str, Any]:
    """A member of `group` for the in-cluster scheduler, alone on its node (see
    _one_per_node: a node is room for one member)."""
    return _one_per_node(real_pod(name, exit_code=0, sleep=sleep, scheduler=SCHEDULER_NAME,
                                  group=group), group)


def test_a_gang_of_real_containers_runs_all_or_nothing(
    release: str, nodes: RealNodes, kube: KubeClient, users: str,
) -> None:
    """Room for 3 of 4 (one member per node, three nodes): no member is bound, no container
    starts; a fourth node joins: all four run and end, and the PodGroup's phase follows
    the pods' to Finished. The in-cluster scheduler (the chart's) places them."""
    assert len(nodes.names) == REAL_NODES
    create_podgroup(kube, users, "four", 4)
    names = [f"four-{i}" for i in range(4)]
    with step("a gang of 4 on room for 3: every member found unschedulable, none bound"):
        for name in names:
            create_pod(kube, users, _gang_pod(name, "four", sleep=3))
        wait_until(lambda: all(pod_condition(kube, users, n, "PodScheduled").get("reason")
                               == "Unschedulable" for n in names),
                   timeout=POD_TIMEOUT, what="every member to be found unschedulable")
        time.sleep(2)  # a partial bind or a started container would show by now
    pods = [kube.get(f"/api/v1/namespaces/{users}/pods/{n}") for n in names]
    assert [p["spec"].get("nodeName") for p in pods] == [None] * 4
    assert {p["status"].get("phase") for p in pods} == {"Pending"}
    with step("a fourth real node added"):
        nodes.add(1)
    with step("the gang ran on the four nodes and ended; its PodGroup Finished"):
        together, group_phases = _observe_gang(kube, users, names, "four")
    pods = [kube.get(f"/api/v1/namespaces/{users}/pods/{n}") for n in names]
    assert {p["spec"].get("nodeName") for p in pods} == set(nodes.names)
    assert "+".join(["Running"] * 4) in together, together
    assert [p["status"]["phase"] for p in pods] == ["Succeeded"] * 4
    assert group_phases[-1] == "Finished", group_phases
    print(f"[e2e] PodGroup phases: {' -> '.join(group_phases)}", file=sys.stderr)


def _holder(kube: KubeClient) -> str:
    return str(kube.get(LEASE)["spec"].get("holderIdentity") or "")


def _partial_gangs(kube: KubeClient, namespace: str, groups: dict[str, int]) -> list[str]:
    """Gangs with some members bound but fewer than minMember."""
    pods = kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
    bound = {group: 0 for group in groups}
    for pod in pods:
        group = pod["metadata"].get("labels", {}).get(GROUP_LABEL)
        if group in bound and pod["spec"].get("nodeName"):
            bound[group] += 1
    return [g for g, n in bound.items() if 0 < n < groups[g]]


PARTIAL_GRACE = 1.0
"""How long a gang may be seen partly bound: a released gang's members are bound by separate
requests (as every scheduler binds), so a sample can fall between two of them, which land
within milliseconds; a gang left partial by a replica that stopped mid-release stays so
until the next leader has synced and bound the rest (seconds)."""


class PartialWatch:
    """Samples of the gangs' bound counts; how long each gang was seen partly bound."""

    def __init__(self, kube: KubeClient, namespace: str, groups: dict[str, int]) -> None:
        self.kube, self.namespace, self.groups = kube, namespace, groups
        self.since: dict[str, float] = {}
        self.longest: dict[str, float] = {}

    def sample(self) -> None:
        now = time.monotonic()
        partial = set(_partial_gangs(self.kube, self.namespace, self.groups))
        for group in partial:
            started = self.since.setdefault(group, now)
            self.longest[group] = max(self.longest.get(group, 0.0), now - started)
        for group in set(self.since) - partial:
            del self.since[group]

    def too_long(self) -> dict[str, float]:
        return {g: round(s, 1) for g, s in self.longest.items() if s > PARTIAL_GRACE}


def test_the_other_replica_takes_over_when_the_leader_is_deleted(
    release: str, kube: KubeClient, users: str,
) -> None:
    """Gangs arrive before and while the leader's pod is deleted; another replica holds
    the Lease within its duration (plus one retry); no gang is seen partly bound for longer
    than its binds take (the old leader finishes a released gang's binds before it hands the
    Lease back), and all are placed in the end."""
    replicas = _ready_replicas(kube, 2)
    assert replicas is not None
    leader = wait_until(lambda: _holder(kube), what="a leader")
    [other] = [p["metadata"]["name"] for p in replicas if p["metadata"]["name"] != leader]
    groups = {f"pair-{i}": 2 for i in range(4)}
    partial = PartialWatch(kube, users, groups)

    def submit(group: str) -> None:
        create_podgroup(kube, users, group, groups[group])
        for member in range(groups[group]):
            create_pod(kube, users, _gang_pod(f"{group}-{member}", group, sleep=20))

    submit("pair-0")
    submit("pair-1")
    deleted = time.monotonic()
    kube.delete(f"/api/v1/namespaces/{release}/pods/{leader}")
    submit("pair-2")
    submit("pair-3")

    def took_over() -> bool:
        partial.sample()
        return _holder(kube) not in ("", leader)

    wait_until(took_over, timeout=4 * LEASE_DURATION, what="a new leader")
    took = time.monotonic() - deleted
    print(f"\n[e2e] leader {leader} deleted: {_holder(kube)} leads {took:.1f}s later "
          f"(lease {LEASE_DURATION:.0f}s)", file=sys.stderr)
    # The other replica, or the Deployment's replacement of the deleted pod when it starts
    # first: either is a live replica that was not the leader.
    assert _holder(kube) in {other} | {p["metadata"]["name"] for p in _scheduler_pods(kube)}
    assert took <= LEASE_DURATION + RETRY_PERIOD, took

    def all_placed() -> bool:
        partial.sample()
        pods = kube.get(f"/api/v1/namespaces/{users}/pods",
                        labelSelector=f"{GROUP_LABEL} in ({','.join(groups)})")["items"]
        return len(pods) == 8 and all(p["spec"].get("nodeName") for p in pods)

    with step("every gang placed whole after the failover"):
        wait_until(all_placed, timeout=POD_TIMEOUT, what="every gang placed")
    print(f"[e2e] longest a gang was seen partly bound: {partial.longest or 'never'}",
          file=sys.stderr)
    assert partial.too_long() == {}, partial.longest


WHATIF_MANIFEST = f"""
apiVersion: batch.scheduler.tencent.com/v1
kind: PodGroup
metadata: {{name: asked}}
spec: {{minMember: 2}}
---
apiVersion: v1
kind: Pod
metadata:
  name: asked-0
  labels: {{{GROUP_LABEL}: asked}}
spec:
  schedulerName: batch-scheduler
  containers: [{{name: main, image: coscheduling.local/busybox:1,
                resources: {{requests: {{cpu: 100m, memory: 16Mi}}}}}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: asked-1
  labels: {{{GROUP_LABEL}: asked}}
spec:
  schedulerName: batch-scheduler
  containers: [{{name: main, image: coscheduling.local/busybox:1,
                resources: {{requests: {{cpu: 100m, memory: 16Mi}}}}}}]
"""


def test_whatif_through_port_forward_over_mutual_tls(
    release: str, cluster: LocalCluster, kube: KubeClient, users: str, tmp_path: Path,
) -> None:
    """`kubectl gang whatif` at the leader's gRPC port, forwarded by `kubectl port-forward`,
    verifying the chart's server certificate as localhost and as 127.0.0.1, with the
    chart's client pair (README: the Secret coscheduling-grpc-client)."""
    # The leader may be a replica whose pod the kubelet has not reported Running yet (it
    # led within a second of starting); port-forward needs it Running.
    wait_until(lambda: _ready_replicas(kube, 2), timeout=POD_TIMEOUT,
               what="both scheduler replicas Running and Ready")
    secret = kube.get(f"/api/v1/namespaces/{release}/secrets/coscheduling-grpc-client")
    for key, value in secret["data"].items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    manifest = tmp_path / "job.yaml"
    manifest.write_text(WHATIF_MANIFEST)
    # As the install's notes say: the Service, which selects the leader.
    service = "service/coscheduling"
    with contextlib.contextmanager(_port_forward)(cluster, release, service, 50051) as port:
        for host in ("localhost", "127.0.0.1"):
            with step(f"kubectl gang whatif through port-forward, TLS verified as {host}"):
                answer = subprocess.run(
                    [sys.executable, "-m", "coscheduling.kubectl_gang", "--kubeconfig",
                     str(cluster.kubeconfig), "-n", users, "whatif", "-f", str(manifest),
                     "-o", "json", "--address", f"{host}:{port}",
                     "--ca", str(tmp_path / "ca.crt"), "--cert", str(tmp_path / "tls.crt"),
                     "--key", str(tmp_path / "tls.key")],
                    capture_output=True, text=True, timeout=120, check=False)
            assert answer.returncode == 0, answer.stderr
            verdict = json.loads(answer.stdout)
            print(f"[e2e] whatif: {verdict['verdict']} on "
                  f"{sorted(p['node'] for p in verdict['placements'])}", file=sys.stderr)
            assert verdict["verdict"] == "FITS_NOW", answer.stdout


def test_helm_upgrade_serves_a_new_crd_field_and_uninstall_keeps_crds_and_objects(
    release: str, cluster: LocalCluster, kube: KubeClient, users: str, tmp_path: Path,
) -> None:
    """A new chart version whose Queue CRD has one more field: after `helm upgrade` the
    field is kept in a round trip (before, it is pruned). `helm uninstall`: the release's
    Deployment goes; the chart's CRDs, the compat CRDs the upgrade added (other projects'
    kinds) and users' objects of those kinds stay."""
    assert not _queue_field_served(kube, "before")
    with step("helm upgrade to a chart whose Queue CRD adds a field (and the compat CRDs)"):
        helm(cluster, "upgrade", RELEASE, str(_chart_with_a_new_queue_field(tmp_path)),
             "-n", release, "--set", "crds.compat=true")
    assert _queue_field_served(kube, "after")
    plugins = COMPAT_CRDS["podgroups.scheduling.x-k8s.io"]
    create_podgroup(kube, users, "users-own", 2)
    kube.create(crd_path(plugins, users), {
        "apiVersion": f"scheduling.x-k8s.io/{plugins['spec']['versions'][0]['name']}",
        "kind": "PodGroup", "metadata": {"name": "users-gang"}, "spec": {"minMember": 2}})
    with step("helm uninstall"):
        helm(cluster, "uninstall", RELEASE, "-n", release, "--wait")
    assert not exists(kube, f"/apis/apps/v1/namespaces/{release}/deployments/coscheduling")
    for name in (*COMPAT_CRDS, "podgroups.batch.scheduler.tencent.com",
                 "queues.batch.scheduler.tencent.com"):
        assert exists(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                      f"{name}"), f"{name} was deleted by helm uninstall"
    assert exists(kube, crd_path(plugins, users, "users-gang"))
    assert exists(kube, f"{podgroups_path(users)}/users-own")


def test_a_second_cluster_with_real_nodes_is_refused_while_this_kube_proxy_runs(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """Two kube-proxies on one machine would rewrite each other's chains: the second
    cluster's real nodes are refused, naming the reason, and nothing of theirs is left."""
    second = LocalCluster(tmp_path_factory.mktemp("second"), binaries=ensure_binaries(),
                          real_nodes=1)
    with pytest.raises(ClusterStartError, match="kube-proxy already runs on this machine"):
        second.start()
    second.stop()
    assert second.real_nodes is None
    assert not (second.workdir / "nodes").exists()
    assert cluster.pids.get("kube-proxy") is not None
