"""The scheduler's own kubeconfig loader against a real kube-apiserver: a client certificate
the cluster's CA signed, a token file, and a credential the server refuses; a scheduler whose
account may not list what it watches still stops on SIGTERM."""

from __future__ import annotations

import base64
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.certs import _self_or_ca_signed

CLIENT_EXT = ["basicConstraints = critical,CA:FALSE", "extendedKeyUsage = clientAuth"]


def _kubeconfig(cluster: LocalCluster, tmp_path: Path, user: dict[str, object]) -> str:
    """A kubeconfig for the session cluster with the CA inline and the given user."""
    ca = cluster.ca_file.read_bytes()
    doc = {
        "apiVersion": "v1", "kind": "Config", "current-context": "t",
        "clusters": [{"name": "c", "cluster": {
            "server": cluster.server,
            "certificate-authority-data": base64.b64encode(ca).decode()}}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "t", "context": {"cluster": "c", "user": "u"}}],
    }
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def _whoami(kubeconfig: str) -> dict[str, object]:
    client = KubeClient(ClientSettings(kubeconfig=kubeconfig))
    try:
        review = client.create("/apis/authentication.k8s.io/v1/selfsubjectreviews",
                               {"apiVersion": "authentication.k8s.io/v1",
                                "kind": "SelfSubjectReview"})
        return dict(review["status"]["userInfo"])
    finally:
        client.close()


def test_a_client_certificate_signed_by_the_cluster_ca(local_cluster: LocalCluster,
                                                        tmp_path: Path) -> None:
    cert, key = tmp_path / "c.crt", tmp_path / "c.key"
    ca = local_cluster.ca_file
    _self_or_ca_signed(cert, key, "scheduler-by-cert", CLIENT_EXT,
                       (ca, ca.with_name("ca.key")))
    user = {"client-certificate": str(cert), "client-key": str(key)}
    assert _whoami(_kubeconfig(local_cluster, tmp_path, user))["username"] == \
        "scheduler-by-cert"


def test_a_token_file_and_a_refused_token(local_cluster: LocalCluster, tmp_path: Path) -> None:
    (tmp_path / "token").write_text(local_cluster.admin_token + "\n")
    path = _kubeconfig(local_cluster, tmp_path, {"tokenFile": "token"})
    assert _whoami(path)["username"] == "admin"
    bad = _kubeconfig(local_cluster, tmp_path, {"token": "not-a-token"})
    with pytest.raises(ApiError) as refused:
        _whoami(bad)
    assert refused.value.status == 401


def test_a_scheduler_that_cannot_list_stops_on_sigterm_before_its_caches_sync(
        local_cluster: LocalCluster, kube: KubeClient, tmp_path: Path) -> None:
    """An account that may read Queues but not pods (a ClusterRole cut short): the start-up
    checks pass, the pod list is refused, so the caches never sync; SIGTERM still stops it
    at once, and says why."""
    namespace = f"norbac-{uuid.uuid4().hex[:6]}"
    kube.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"metadata": {"name": "nobody"}})
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    kube.create(f"{rbac}/clusterroles", {"metadata": {"name": namespace}, "rules": [{
        "apiGroups": ["batch.scheduler.tencent.com"], "resources": ["queues"],
        "verbs": ["get", "list", "watch"]}]})
    kube.create(f"{rbac}/clusterrolebindings", {
        "metadata": {"name": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole",
                    "name": namespace},
        "subjects": [{"kind": "ServiceAccount", "name": "nobody", "namespace": namespace}]})
    token = kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts/nobody/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 600}})["status"]["token"]
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "metricsBindAddress": "",
        "leaderElection": {"leaderElect": False}}))
    log = tmp_path / "scheduler.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "run", "--no-grpc", "--config", str(config),
         "--kubeconfig", _kubeconfig(local_cluster, tmp_path, {"token": token})],
        stdout=log.open("wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while 'cannot list resource "pods"' not in log.read_text():
            assert process.poll() is None, log.read_text()
            assert time.monotonic() < deadline, f"no list was refused: {log.read_text()}"
            time.sleep(0.2)
        process.send_signal(signal.SIGTERM)
        code = process.wait(timeout=10)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        kube.delete(f"/api/v1/namespaces/{namespace}")
        kube.delete(f"{rbac}/clusterrolebindings/{namespace}")
        kube.delete(f"{rbac}/clusterroles/{namespace}")
    assert code == 0, log.read_text()
    assert "stopped before the caches synced" in log.read_text()
