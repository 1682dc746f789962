"""The Helm chart (deploy/chart, issue 29) with helm built from Go modules, against the real
control plane: lint; the defaults render exactly the plain manifests of deploy/; a render
passes a server-side dry run; `helm install` creates every object; a values change renders
and applies; invalid values are refused naming the field."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import KubeClient
from coscheduling.config.load import dump_defaults
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import ensure_helm
from tests.integration.fixtures import CRD_DIR, REPO, kubectl
from tests.integration.kube import create_pod, pod_body, wait_until
from tests.integration.test_fencing import _refused

CHART = REPO / "deploy" / "chart"
DEPLOY = REPO / "deploy"
KUBE_VERSION = "1.37.2"
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm()


def run(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def render(helm: Path, namespace: str, *values: str) -> list[dict[str, Any]]:
    out = run(helm, "template", "coscheduling", str(CHART), "-n", namespace, "--kube-version",
              KUBE_VERSION, *(a for v in values for a in ("--set", v))).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _normal(obj: dict[str, Any]) -> dict[str, Any]:
    """An object without what only Helm adds (its labels, the config checksum), and the
    configuration file compared as data, not text."""
    obj = json.loads(json.dumps(obj))
    labels = obj["metadata"].pop("labels", None) or {}
    for key in (*HELM_LABELS, "app.kubernetes.io/name"):  # the chart labels every object
        labels.pop(key, None)
    if labels:
        obj["metadata"]["labels"] = labels
    if obj["kind"] == "Deployment":
        obj["spec"]["template"]["metadata"].pop("annotations", None)
    if obj["kind"] == "ConfigMap":
        obj["data"] = {k: yaml.safe_load(v) for k, v in obj["data"].items()}
    return obj


def _key(obj: dict[str, Any]) -> tuple[str, str]:
    return obj["kind"], obj["metadata"]["name"]


def test_helm_lint(helm: Path) -> None:
    out = run(helm, "lint", str(CHART), "--kube-version", KUBE_VERSION).stdout
    assert "1 chart(s) linted, 0 chart(s) failed" in out, out


def test_the_defaults_render_the_plain_manifests(helm: Path) -> None:
    """One source: deploy/*.yaml are what the chart renders with its defaults."""
    rendered = {_key(o): _normal(o) for o in render(
        helm, "coscheduling-system", "createNamespace=true", "volcanoStatusOnObject=true")}
    plain = {_key(o): _normal(o) for path in sorted(DEPLOY.glob("[0-9][0-9]-*.yaml"))
             for o in yaml.safe_load_all(path.read_text()) if o}
    assert sorted(rendered) == sorted(plain)
    for key, obj in plain.items():
        assert rendered[key] == obj, key
    for crd in CRD_DIR.glob("*.yaml"):  # the chart's CRDs are the repository's
        assert (CHART / "crds" / crd.name).read_text() == crd.read_text()
    for crd in (CRD_DIR / "compat").glob("*.yaml"):
        assert (CHART / "files" / "compat" / crd.name).read_text() == crd.read_text()


def test_every_configuration_field_is_a_checked_value() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())["properties"]["config"]

    def walk(value: Any, node: dict[str, Any], path: str) -> None:
        if isinstance(value, dict):
            for key, inner in value.items():
                assert key in node.get("properties", {}), f"{path}.{key} not in the schema"
                walk(inner, node["properties"][key], f"{path}.{key}")

    defaults = {k: v for k, v in dump_defaults().items() if k not in ("apiVersion", "kind")}
    walk(defaults, schema, "config")


@pytest.fixture
def release_namespace(local_cluster: LocalCluster, namespace: str) -> Iterator[str]:
    yield namespace


def _dry_run(local_cluster: LocalCluster, objects: list[dict[str, Any]],
             tmp_path: Path) -> list[str]:
    path = tmp_path / "rendered.yaml"
    path.write_text(yaml.safe_dump_all(objects))
    out = kubectl(local_cluster, "apply", "--dry-run=server", "-f", str(path)).stdout
    lines = out.splitlines()
    assert lines and all(line.endswith("(server dry run)") for line in lines), out
    return lines


def test_a_render_passes_a_server_side_dry_run(helm: Path, local_cluster: LocalCluster,
                                                crd: None, namespace: str,
                                                tmp_path: Path) -> None:
    lines = _dry_run(local_cluster, render(helm, namespace, "crds.compat=true"), tmp_path)
    kinds = {line.split("/", 1)[0] for line in lines}
    assert {"deployment.apps", "service", "configmap", "networkpolicy.networking.k8s.io",
            "poddisruptionbudget.policy", "clusterrole.rbac.authorization.k8s.io",
            "validatingadmissionpolicy.admissionregistration.k8s.io",
            "customresourcedefinition.apiextensions.k8s.io"} <= kinds, kinds


def test_values_changes_render_and_apply(helm: Path, local_cluster: LocalCluster, crd: None,
                                         namespace: str, tmp_path: Path) -> None:
    # Three replicas electing a leader, mutual TLS from a Secret, an image by digest.
    digest = "sha256:" + "ab" * 32
    objects = render(helm, namespace, "replicas=3", "grpc.tls.secretName=my-tls",
                     f"image.digest={digest}", "config.leaderElection.resourceName=my-lease",
                     "grpc.allowFromNamespaces={team-a,team-b}")
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == f"coscheduling@{digest}"
    assert "--client-ca" in container["args"]
    volumes = deployment["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls", "defaultMode": 0o440}} in volumes
    network = next(o for o in objects if o["kind"] == "NetworkPolicy")
    (grpc_peer,) = network["spec"]["ingress"][0]["from"]
    assert grpc_peer["namespaceSelector"]["matchExpressions"][0]["values"] == [
        "team-a", "team-b"]
    fencing = next(o for o in objects if o["kind"] == "ValidatingAdmissionPolicyBinding")
    assert fencing["spec"]["paramRef"]["name"] == "my-lease"
    _dry_run(local_cluster, objects, tmp_path)
    # One replica, no leader election, no gRPC: no Service for it, no PodDisruptionBudget.
    objects = render(helm, namespace, "replicas=1", "config.leaderElection.leaderElect=false",
                     "grpc.enabled=false", "fencing.enabled=false")
    kinds = sorted(o["kind"] for o in objects)
    assert "PodDisruptionBudget" not in kinds and kinds.count("Service") == 1, kinds
    _dry_run(local_cluster, objects, tmp_path)
    config = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")["data"][
        "config.yaml"])
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    from coscheduling.cli import main

    assert main(["config", "validate", str(config_file)]) == 0


@pytest.mark.parametrize(("values", "says"), [
    (["replicas=two"], "at '/replicas': got string, want integer"),
    (["config.clientConnection.qps=-1"], "at '/config/clientConnection/qps'"),
    (["config.leaderElection.leaseDuration=soon"], "at '/config/leaderElection/leaseDuration'"),
    (["grpc.tls.source=vault"], "at '/grpc/tls/source'"),
    (["grpc.allowFromNamespaces={Team_A}"], "at '/grpc/allowFromNamespaces/0'"),
    (["config.noSuchField=1"], "noSuchField"),
    (["replicas=2", "config.leaderElection.leaderElect=false"],
     "replicas: more than 1 needs config.leaderElection.leaderElect: true"),
    (["grpc.tls.source=certManager"], "grpc.tls.source: certManager needs cert-manager"),
])
def test_invalid_values_are_refused_naming_the_field(helm: Path, values: list[str],
                                                     says: str) -> None:
    result = run(helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                 *(a for v in values for a in ("--set", v)), check=False)
    assert result.returncode != 0 and says in result.stderr, result.stderr


def test_helm_install_creates_every_object(helm: Path, local_cluster: LocalCluster,
                                           crd: None, namespace: str, kube: KubeClient) -> None:
    kubeconfig = str(local_cluster.kubeconfig)
    run(helm, "install", "coscheduling", str(CHART), "-n", namespace, "--kubeconfig",
        kubeconfig)
    try:
        manifest = run(helm, "get", "manifest", "coscheduling", "-n", namespace,
                       "--kubeconfig", kubeconfig).stdout
        objects = [d for d in yaml.safe_load_all(manifest) if d]
        assert len(objects) >= 12
        for obj in objects:
            meta = obj["metadata"]
            args = ["get", f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"
                    if "/" in obj["apiVersion"] else obj["kind"].lower(), meta["name"]]
            if meta.get("namespace"):
                args += ["-n", meta["namespace"]]
            kubectl(local_cluster, *args)
    finally:
        run(helm, "uninstall", "coscheduling", "-n", namespace, "--kubeconfig", kubeconfig,
            "--wait", check=False)
        _fencing_lifted(kube, namespace)


def _fencing_lifted(kube: KubeClient, namespace: str) -> None:
    """The release's fencing policy binds cluster-wide to a Lease that is gone with it: until
    the API server stops enforcing it, every replica's Binding in any namespace is refused,
    so the next tests wait for that here."""
    create_pod(kube, namespace, pod_body("fencing-probe", scheduler="nobody"))
    wait_until(lambda: not _refused(kube, namespace, "fencing-probe", "probe"), timeout=60,
               what="the uninstalled fencing policy no longer enforced")


def test_alerts_and_dashboard_render(helm: Path) -> None:
    objects = render(helm, "monitoring", "metrics.prometheusRule.enabled=true",
                     "metrics.grafanaDashboard.enabled=true")
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"CoschedulingGangsPendingTooLong", "CoschedulingReservationsIdle",
            "CoschedulingQueueOverShare"} <= alerts
    dashboard = next(o for o in objects if o["metadata"]["name"] == "coscheduling-dashboard")
    assert json.loads(dashboard["data"]["coscheduling.json"])["panels"]
