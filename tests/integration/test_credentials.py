"""The scheduler's own kubeconfig loader against a real kube-apiserver: a client certificate
the cluster's CA signed, a token file, and a credential the server refuses."""

from __future__ import annotations

import base64
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
