"""The Helm chart (deploy/chart) with helm built from Go modules, against the real control
plane: lint; the defaults render the plain manifests of deploy/ (but for the TLS Secrets the
chart makes); a render passes a server-side dry run; every value renders where it should;
invalid values are refused naming the field; `helm install` with nothing made first creates
every object, the TLS Secrets among them, whose certificates work for mutual TLS through a
port-forward; `helm upgrade` keeps them and upgrades a CRD; `helm uninstall` keeps the CRDs
and users' objects of their kinds."""

from __future__ import annotations

import base64
import json
import shutil
import socket
import ssl
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import KubeClient
from coscheduling.config.load import dump_defaults
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import ensure_helm
from tests.integration.fixtures import COMPAT_CRDS, CRD_DIR, REPO, crd_path, kubectl
from tests.integration.kube import create_pod, exists, pod_body, wait_until
from tests.integration.test_fencing import _refused

CHART = REPO / "deploy" / "chart"
DEPLOY = REPO / "deploy"
KUBE_VERSION = "1.37.2"
HELM_LABELS = ("app.kubernetes.io/instance", "app.kubernetes.io/managed-by", "helm.sh/chart")
# What the chart makes at install that deploy/ leaves to deploy/issue-certs.sh.
CHART_TLS = {("Secret", "coscheduling-grpc-tls"), ("Secret", "coscheduling-grpc-client")}
KEEP = "helm.sh/resource-policy"


@pytest.fixture(scope="module")
def helm() -> Path:
    return ensure_helm()


def run(helm: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, timeout=300,
                            check=False)
    if check and result.returncode != 0:
        raise AssertionError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
    return result


def render(helm: Path, namespace: str, *values: str, extra: tuple[str, ...] = ()
           ) -> list[dict[str, Any]]:
    out = run(helm, "template", "coscheduling", str(CHART), "-n", namespace, "--kube-version",
              KUBE_VERSION, *extra, *(a for v in values for a in ("--set", v))).stdout
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
    annotations = obj["metadata"].pop("annotations", None) or {}
    annotations.pop(KEEP, None)  # the chart keeps its CRDs on uninstall
    if annotations:
        obj["metadata"]["annotations"] = annotations
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
    """One source: deploy/*.yaml and crd/*.yaml are what the chart renders with its
    defaults, but for the TLS Secrets it makes (deploy/ has deploy/issue-certs.sh make them)."""
    rendered = {_key(o): _normal(o) for o in render(
        helm, "coscheduling-system", "createNamespace=true", "volcanoStatusOnObject=true")}
    plain = {_key(o): _normal(o) for path in sorted(DEPLOY.glob("[0-9][0-9]-*.yaml"))
             for o in yaml.safe_load_all(path.read_text()) if o}
    plain |= {_key(o): _normal(o) for path in sorted(CRD_DIR.glob("*.yaml"))
              for o in yaml.safe_load_all(path.read_text()) if o}
    assert set(rendered) - set(plain) == CHART_TLS
    assert sorted(set(rendered) - CHART_TLS) == sorted(plain)
    for key, obj in plain.items():
        assert rendered[key] == obj, key
    for crd in CRD_DIR.glob("*.yaml"):  # the chart's CRDs are the repository's
        assert (CHART / "files" / "crds" / crd.name).read_text() == crd.read_text()
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
    (["logFormat=xml"], "at '/logFormat'"),
    (["logLevel=-1"], "at '/logLevel'"),
    (["config.metricsBindAddress=0.0.0.0:9999"],
     "config.metricsBindAddress: 0.0.0.0:9999 is not on metrics.port 10251"),
    (["metrics.serviceMonitor.interval=soon"], "at '/metrics/serviceMonitor/interval'"),
    (["imagePullSecrets[0].nam=x"], "at '/imagePullSecrets/0'"),
    (["podLabels.team=1"], "at '/podLabels/team'"),
])
def test_invalid_values_are_refused_naming_the_field(helm: Path, values: list[str],
                                                     says: str) -> None:
    result = run(helm, "template", "x", str(CHART), "--kube-version", KUBE_VERSION,
                 *(a for v in values for a in ("--set", v)), check=False)
    assert result.returncode != 0 and says in result.stderr, result.stderr


def _pod_spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    spec: dict[str, Any] = deployment["spec"]["template"]
    return spec


def test_each_value_renders_where_it_should(helm: Path, tmp_path: Path) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "batch",
                  "effect": "NoSchedule"}
    affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": "pool", "operator": "In", "values": ["system"]}]}]}}}
    values = {"nodeSelector": {"pool": "system"}, "tolerations": [toleration],
              "affinity": affinity, "imagePullSecrets": [{"name": "my-registry"}],
              "podAnnotations": {"team/owner": "batch"}, "podLabels": {"team": "batch"},
              "logLevel": 2, "logFormat": "json", "metrics": {"port": 9090}}
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    objects = render(helm, "ns", extra=("-f", str(path)))
    template = _pod_spec(objects)
    spec = template["spec"]
    assert spec["nodeSelector"] == {"pool": "system"}
    assert spec["tolerations"] == [toleration] and spec["affinity"] == affinity
    assert spec["imagePullSecrets"] == [{"name": "my-registry"}]
    assert template["metadata"]["annotations"]["team/owner"] == "batch"
    assert template["metadata"]["labels"] == {"team": "batch",
                                              "app.kubernetes.io/name": "coscheduling"}
    container = spec["containers"][0]
    args = container["args"]
    assert args[args.index("-v") + 1] == "2" and args[args.index("--log-format") + 1] == "json"
    # One port: the configuration, the container, the probes' named port and the Services.
    assert {"name": "metrics", "containerPort": 9090} in container["ports"]
    assert container["readinessProbe"]["httpGet"]["port"] == "metrics"
    config = yaml.safe_load(next(o for o in objects if o["kind"] == "ConfigMap")["data"][
        "config.yaml"])
    assert config["metricsBindAddress"] == "0.0.0.0:9090"
    metrics = next(o for o in objects if o["metadata"]["name"] == "coscheduling-metrics")
    assert metrics["spec"]["ports"][0]["port"] == 9090
    network = next(o for o in objects if o["kind"] == "NetworkPolicy")
    assert {"protocol": "TCP", "port": 9090} in network["spec"]["ingress"][-1]["ports"]
    # The defaults add nothing of these.
    plain = _pod_spec(render(helm, "ns"))["spec"]
    assert not {"nodeSelector", "tolerations", "affinity", "imagePullSecrets"} & set(plain)


def _scheduler_rules(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    role = next(o for o in objects
                if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "coscheduling")
    return list(role["rules"])


def test_scale_ups_bring_their_permissions(helm: Path, tmp_path: Path) -> None:
    """With the Coscheduling args' scaleUp enabled in config.pluginConfig, the scheduler's
    role may write what a scale-up writes (PodTemplates, ProvisioningRequests, its members'
    annotations, the nodes' scale-down guard); without it, none of that."""
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump({"config": {"pluginConfig": [
        {"name": "Coscheduling", "args": {"scaleUp": {"enabled": True}}}]}}))
    scale_up = [{"apiGroups": [""], "resources": ["podtemplates"], "verbs": ["create", "delete"]},
                {"apiGroups": ["autoscaling.x-k8s.io"], "resources": ["provisioningrequests"],
                 "verbs": ["get", "create", "delete"]},
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["patch"]}]
    enabled = _scheduler_rules(render(helm, "ns", extra=("-f", str(path))))
    default = _scheduler_rules(render(helm, "ns"))
    assert enabled == default + scale_up
    assert not any(r in default for r in scale_up)


def test_monitoring_crds_and_cert_manager_render(helm: Path) -> None:
    objects = render(helm, "monitoring", "metrics.serviceMonitor.enabled=true",
                     "metrics.serviceMonitor.labels.release=kps",
                     "metrics.prometheusRule.enabled=true",
                     "metrics.prometheusRule.labels.release=kps", "crds.compat=true")
    monitor = next(o for o in objects if o["kind"] == "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kps"
    assert monitor["spec"]["endpoints"][0]["port"] == "metrics"
    assert monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/instance"] == \
        "coscheduling"
    rule = next(o for o in objects if o["kind"] == "PrometheusRule")
    assert rule["metadata"]["labels"]["release"] == "kps"
    crds = {o["metadata"]["name"]: o for o in objects if o["kind"] == "CustomResourceDefinition"}
    assert set(crds) == {*COMPAT_CRDS, "podgroups.batch.scheduler.tencent.com",
                         "queues.batch.scheduler.tencent.com"}
    assert all(crd["metadata"]["annotations"][KEEP] == "keep" for crd in crds.values())
    assert not [o for o in render(helm, "ns", "crds.install=false")
                if o["kind"] == "CustomResourceDefinition"]
    assert not [o for o in render(helm, "ns") if o["kind"] == "ServiceMonitor"]
    certificate = next(o for o in render(
        helm, "ns", "grpc.tls.source=certManager", "grpc.tls.certManager.issuerName=ca",
        extra=("--api-versions", "cert-manager.io/v1")) if o["kind"] == "Certificate")
    assert {"localhost", "coscheduling.ns.svc"} <= set(certificate["spec"]["dnsNames"])
    assert certificate["spec"]["ipAddresses"] == ["127.0.0.1"]
    secrets = [o for o in render(helm, "ns", "grpc.tls.source=secret") if o["kind"] == "Secret"]
    assert not secrets  # source: secret is made by the user (deploy/issue-certs.sh)
    client = next(o for o in render(helm, "ns", "grpc.tls.clientName=ops",
                                    "grpc.tls.clientSecretName=ops-pair")
                  if o["kind"] == "Secret" and o["metadata"]["name"] == "ops-pair")
    subject = subprocess.run(["openssl", "x509", "-noout", "-subject"], check=True,
                             input=base64.b64decode(client["data"]["tls.crt"]),
                             capture_output=True).stdout.decode()
    assert subject.strip().endswith("CN = ops"), subject


def _secret(kube: KubeClient, namespace: str, name: str, into: Path) -> dict[str, str]:
    """The Secret's data, decoded, and each key written to into/<key>."""
    data = kube.get(f"/api/v1/namespaces/{namespace}/secrets/{name}")["data"]
    into.mkdir(parents=True, exist_ok=True)
    decoded = {key: base64.b64decode(value).decode() for key, value in data.items()}
    for key, value in decoded.items():
        (into / key).write_text(value)
    return decoded


def _mutual_tls(server: Path, client: Path, host: str) -> dict[str, Any]:
    """A TLS server with the server Secret's pair (trusting its client CA) on loopback; a
    client with the client Secret's pair that verifies the server as `host`. The server's
    certificate as the client saw it."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(server / "tls.crt", server / "tls.key")
    context.load_verify_locations(server / "client-ca.crt")
    context.verify_mode = ssl.CERT_REQUIRED
    listener = socket.create_server(("127.0.0.1", 0))
    peer: list[Any] = []

    def serve() -> None:
        connection, _ = listener.accept()
        with context.wrap_socket(connection, server_side=True) as tls:
            peer.append(tls.getpeercert())
            tls.sendall(b"ok")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    caller = ssl.create_default_context(cafile=str(client / "ca.crt"))
    caller.load_cert_chain(client / "tls.crt", client / "tls.key")
    with socket.create_connection(listener.getsockname(), timeout=10) as raw, \
            caller.wrap_socket(raw, server_hostname=host) as tls:
        assert tls.recv(2) == b"ok"
        seen: dict[str, Any] = tls.getpeercert() or {}
    thread.join(10)
    listener.close()
    assert peer and dict(x[0] for x in peer[0]["subject"])["commonName"] == \
        "coscheduling-dashboard"
    return seen


def _queue_field_served(kube: KubeClient, value: str) -> bool:
    """Whether the API server keeps spec.addedInTest of a Queue (an unknown field is pruned)."""
    path = "/apis/batch.scheduler.tencent.com/v1/queues"
    name = f"chart-upgrade-{value}"
    kube.create(path, {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "Queue",
                       "metadata": {"name": name},
                       "spec": {"weight": 1, "addedInTest": value}})
    try:
        return kube.get(f"{path}/{name}")["spec"].get("addedInTest") == value
    finally:
        kube.delete(f"{path}/{name}")


def _chart_with_a_new_queue_field(tmp_path: Path) -> Path:
    """A copy of the chart whose Queue CRD has one more field, as a new version would."""
    chart = tmp_path / "chart"
    shutil.copytree(CHART, chart)
    path = chart / "files" / "crds" / "queues.batch.scheduler.tencent.com.yaml"
    crd = yaml.safe_load(path.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    spec["properties"]["addedInTest"] = {"type": "string"}
    path.write_text(yaml.safe_dump(crd))
    return chart


def test_install_upgrade_uninstall(helm: Path, local_cluster: LocalCluster, crd: None,
                                   namespace: str, kube: KubeClient, tmp_path: Path) -> None:
    """With nothing made first (the CRDs applied by kubectl are taken over): every object,
    the TLS Secrets among them; the upgrade keeps them and serves a new CRD field; the
    uninstall keeps the CRDs and users' objects of their kinds."""
    kubeconfig = str(local_cluster.kubeconfig)
    helm_args = ("-n", namespace, "--kubeconfig", kubeconfig, "--take-ownership")
    compat_before = {name for name in COMPAT_CRDS if exists(
        kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")}
    installed = run(helm, "install", "coscheduling", str(CHART), *helm_args).stdout
    try:
        assert "kubectl gang whatif -f job.yaml --address localhost:50051" in installed
        assert "coscheduling-grpc-client" in installed  # NOTES: where the client's pair is
        manifest = run(helm, "get", "manifest", "coscheduling", "-n", namespace,
                       "--kubeconfig", kubeconfig).stdout
        objects = [d for d in yaml.safe_load_all(manifest) if d]
        assert {_key(o) for o in objects} >= CHART_TLS and len(objects) >= 16
        for obj in objects:
            meta = obj["metadata"]
            args = ["get", f"{obj['kind'].lower()}.{obj['apiVersion'].split('/')[0]}"
                    if "/" in obj["apiVersion"] else obj["kind"].lower(), meta["name"]]
            if meta.get("namespace"):
                args += ["-n", meta["namespace"]]
            kubectl(local_cluster, *args)
        server = _secret(kube, namespace, "coscheduling-grpc-tls", tmp_path / "server")
        _secret(kube, namespace, "coscheduling-grpc-client", tmp_path / "client")
        seen = _mutual_tls(tmp_path / "server", tmp_path / "client", "localhost")
        assert {("DNS", f"coscheduling.{namespace}.svc"), ("DNS", "localhost"),
                ("IP Address", "127.0.0.1")} <= set(seen["subjectAltName"])
        _mutual_tls(tmp_path / "server", tmp_path / "client", "127.0.0.1")
        # The upgrade: a new version's CRD field is served; the TLS material is kept. (The
        # Lease the scheduler would make: the fencing policy refuses writes while it lacks it.)
        kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
                    {"metadata": {"name": "batch-scheduler"}, "spec": {}})
        assert not _queue_field_served(kube, "before")
        run(helm, "upgrade", "coscheduling", str(_chart_with_a_new_queue_field(tmp_path)),
            *helm_args, "--set", "crds.compat=true")
        assert _queue_field_served(kube, "after")
        assert _secret(kube, namespace, "coscheduling-grpc-tls", tmp_path / "again") == server
        # A user's object of a compat kind, made while the release owns its CRD.
        plugins = COMPAT_CRDS["podgroups.scheduling.x-k8s.io"]
        kube.create(crd_path(plugins, namespace), {
            "apiVersion": f"scheduling.x-k8s.io/{plugins['spec']['versions'][0]['name']}",
            "kind": "PodGroup", "metadata": {"name": "users-gang"}, "spec": {"minMember": 2}})
    finally:
        uninstalled = run(helm, "uninstall", "coscheduling", "-n", namespace, "--kubeconfig",
                          kubeconfig, "--wait", check=False)
        _fencing_lifted(kube, namespace)
    assert uninstalled.returncode == 0, uninstalled.stderr
    try:
        for name in (*COMPAT_CRDS, "podgroups.batch.scheduler.tencent.com",
                     "queues.batch.scheduler.tencent.com"):
            assert exists(kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                          f"{name}"), f"{name} was deleted by helm uninstall"
        assert exists(kube, crd_path(plugins, namespace, "users-gang"))
        assert not exists(kube, f"/api/v1/namespaces/{namespace}/secrets/coscheduling-grpc-tls")
    finally:  # the cluster as the other tests expect it: the repository's CRDs, no extra
        kubectl(local_cluster, "apply", "-f", str(CRD_DIR))
        for name in set(COMPAT_CRDS) - compat_before:
            kube.delete(f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")

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
