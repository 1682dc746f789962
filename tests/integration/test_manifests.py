"""Everything in deploy/ against the real API server (issue 13): each manifest passes a
server-side dry run, the ConfigMap's configuration passes `coscheduling config validate`,
and the Deployment's gRPC flags, the configuration's client lists and the certificates
deploy/issue-certs.sh issues work together: mutual TLS, and each client limited to its list."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cli import build_parser
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.config import load_file
from coscheduling.localcluster import LocalCluster
from coscheduling.plugins.registry import default_registry
from coscheduling.server.commands import settings_from
from tests.integration.fixtures import COMPAT_CRDS, REPO, crd_path, kubectl
from tests.integration.kube import wait_until

DEPLOY = REPO / "deploy"
# 11-rbac-status-on-object.yaml is applied only where an owner's CRD lacks the status
# subresource (tested on its own below).
OPTIONAL = ("11-rbac-status-on-object.yaml",)
MANIFESTS = sorted(p.name for p in DEPLOY.glob("[0-9][0-9]-*.yaml") if p.name not in OPTIONAL)


def _docs(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / name).read_text()) if d]


def _one(kind: str) -> dict[str, Any]:
    found = [d for name in MANIFESTS for d in _docs(name) if d["kind"] == kind]
    assert len(found) == 1, f"{len(found)} {kind} objects in deploy/"
    return found[0]


def test_every_manifest_passes_a_server_side_dry_run(local_cluster: LocalCluster,
                                                     crd: None, tmp_path: Path) -> None:
    assert MANIFESTS == ["00-namespace.yaml", "10-rbac.yaml", "20-config.yaml",
                         "30-deployment.yaml", "40-fencing.yaml"]
    # Namespaced objects are checked against their namespace, so it must exist.
    kubectl(local_cluster, "apply", "-f", str(DEPLOY / "00-namespace.yaml"))
    kinds: list[str] = []
    for name in (*MANIFESTS, *OPTIONAL):
        out = kubectl(local_cluster, "apply", "--dry-run=server", "-f", str(DEPLOY / name))
        for line in out.stdout.splitlines():
            assert line.endswith("(server dry run)"), (name, line)
            kinds.append(line.split("/", 1)[0])
    assert {"namespace", "serviceaccount", "clusterrole.rbac.authorization.k8s.io",
            "configmap", "deployment.apps", "service", "networkpolicy.networking.k8s.io",
            "validatingadmissionpolicy.admissionregistration.k8s.io",
            "validatingadmissionpolicybinding.admissionregistration.k8s.io"} <= set(kinds)
    # The Secret the Deployment mounts, made as deploy/issue-certs.sh says.
    certs = tmp_path / "certs"
    command = _issue(certs)
    assert command[:6] == ["kubectl", "-n", "coscheduling-system", "create", "secret",
                           "generic"]
    out = kubectl(local_cluster, *command[1:], "--dry-run=server", "-o", "json")
    secret = json.loads(out.stdout)
    volume = next(v for v in _one("Deployment")["spec"]["template"]["spec"]["volumes"]
                  if "secret" in v)
    assert secret["metadata"]["name"] == volume["secret"]["secretName"]
    assert set(secret["data"]) == {"tls.crt", "tls.key", "client-ca.crt"}


def _issue(directory: Path) -> list[str]:
    """Run deploy/issue-certs.sh for the configuration's two clients; the kubectl command
    it prints, as arguments."""
    result = subprocess.run([str(DEPLOY / "issue-certs.sh"), str(directory),
                             "coscheduling-driver", "coscheduling-dashboard"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stdout.splitlines() if not line.startswith("#")]
    return " ".join(line.rstrip("\\") for line in lines).split()


def _config_map_config(tmp_path: Path) -> Path:
    config = tmp_path / "configmap-config.yaml"
    config.write_text(_one("ConfigMap")["data"]["config.yaml"])
    return config


def test_the_config_maps_configuration_is_valid(tmp_path: Path) -> None:
    for config in (_config_map_config(tmp_path), DEPLOY / "config.yaml"):
        result = subprocess.run([sys.executable, "-m", "coscheduling", "config", "validate",
                                 str(config)], capture_output=True, text=True, timeout=60,
                                check=False)
        assert result.returncode == 0 and result.stdout.strip() == f"{config}: valid", \
            result.stderr


def _container() -> dict[str, Any]:
    containers = _one("Deployment")["spec"]["template"]["spec"]["containers"]
    assert len(containers) == 1
    return dict(containers[0])


def test_the_deployment_serves_grpc_off_loopback_only_with_mutual_tls(tmp_path: Path) -> None:
    args = build_parser().parse_args(_container()["args"])
    config = load_file(_config_map_config(tmp_path), default_registry())
    settings = settings_from(args, config.grpc)  # raises if the combination were unsafe
    assert settings.address == "0.0.0.0:50051" and settings.mutual_tls
    assert not settings.insecure_remote
    assert settings.read_only_clients and settings.mutating_clients
    mounts = {m["name"]: m["mountPath"] for m in _container()["volumeMounts"]}
    for path in (settings.tls_cert, settings.tls_key, settings.client_ca):
        assert Path(path).parent == Path(mounts["tls"]), path
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    policy = _one("NetworkPolicy")["spec"]
    grpc_rule = next(r for r in policy["ingress"] if "from" in r)
    assert [p["port"] for p in grpc_rule["ports"]] == [ports["grpc"]]
    assert all(peer.get("podSelector", {}).get("matchLabels") for peer in grpc_rule["from"])


def test_the_deployments_flags_config_and_issued_certificates_work_together(
        local_cluster: LocalCluster, crd: None, tmp_path: Path) -> None:
    """`coscheduling serve` with the Deployment's gRPC flags (on any free port), the
    ConfigMap's configuration and certificates from issue-certs.sh: the dashboard may read
    and not reserve, the driver may both, a certificate from another CA gets nothing."""
    certs = tmp_path / "certs"
    _issue(certs)
    doc = yaml.safe_load(_config_map_config(tmp_path).read_text())
    doc.update(metricsBindAddress="127.0.0.1:0", leaderElection={"leaderElect": False})
    doc["clientConnection"]["kubeconfig"] = str(local_cluster.kubeconfig)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(doc))
    args = list(_container()["args"])
    args[args.index("--address") + 1] = "0.0.0.0:0"
    for flag, name in (("--tls-cert", "tls.crt"), ("--tls-key", "tls.key"),
                       ("--client-ca", "ca.crt")):
        args[args.index(flag) + 1] = str(certs / name)
    args[args.index("--config") + 1] = str(config)
    assert args[0] == "run"
    proc = subprocess.Popen([sys.executable, "-m", "coscheduling", "serve", *args[1:]],
                            stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        port = ""
        while not port:
            line = proc.stderr.readline()
            assert line, "serve exited"
            found = re.search(r"serving gRPC on 0\.0\.0\.0:(\d+)", line)
            port = found.group(1) if found else ""
        threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep it drained
        address = f"127.0.0.1:{port}"
        wait_until(lambda: _call(address, certs, "coscheduling-dashboard", "health")[0] == 0,
                   what="the server SERVING")
        podgroup = ["podgroup", "--group", "default/none"]
        reserve = ["reserve", "--pod", "default/none", "--node", "none"]
        code, err = _call(address, certs, "coscheduling-dashboard", *podgroup)
        assert code == 1 and "NOT_FOUND" in err, err  # allowed: the group just is not there
        code, err = _call(address, certs, "coscheduling-dashboard", *reserve)
        assert code == 1 and "PERMISSION_DENIED: certificate: CN:coscheduling-dashboard may " \
            "not call Reserve" in err, err
        code, err = _call(address, certs, "coscheduling-driver", *reserve)
        assert code == 1 and "NOT_FOUND" in err, err  # allowed: the pod just is not there
        rogue = tmp_path / "rogue"
        _issue(rogue)
        code, err = _call(address, certs, "coscheduling-driver", *podgroup, client_dir=rogue)
        assert code == 1 and "UNAVAILABLE" in err, err  # the handshake itself fails
    finally:
        proc.terminate()
        proc.wait(20)


def _call(address: str, certs: Path, client: str, *call: str,
          client_dir: Path | None = None) -> tuple[int, str]:
    pair = client_dir or certs
    result = subprocess.run(
        [sys.executable, "-m", "coscheduling", "call", *call, "--address", address,
         "--ca", str(certs / "ca.crt"), "--cert", str(pair / f"{client}.crt"),
         "--key", str(pair / f"{client}.key"), "--timeout", "10"],
        capture_output=True, text=True, timeout=60, check=False)
    return result.returncode, result.stderr


@pytest.mark.parametrize("script", ["issue-certs.sh", "start.sh"])
def test_deploy_scripts_explain_themselves(script: str) -> None:
    usage = subprocess.run([str(DEPLOY / script), "--help"], capture_output=True, text=True,
                           timeout=30, check=False)
    assert usage.returncode == 0 and "Usage:" in usage.stdout


# -- crd/compat/: the gang objects other tools create, and the RBAC for them (issue 16) -------

SCHEDULER_SA = "system:serviceaccount:coscheduling-system:coscheduling"


def test_each_compat_file_is_one_crd_with_status_and_its_columns() -> None:
    assert set(COMPAT_CRDS) == {"podgroups.scheduling.x-k8s.io",
                                "podgroups.scheduling.volcano.sh",
                                "podgroups.scheduling.incubator.k8s.io"}
    for stem, crd in COMPAT_CRDS.items():
        assert crd["kind"] == "CustomResourceDefinition" and crd["metadata"]["name"] == stem
        # Several CRDs claim "pg" (and "q"): these claim no short name at all.
        assert "shortNames" not in crd["spec"]["names"], stem
        (version,) = crd["spec"]["versions"]
        assert version["subresources"] == {"status": {}}, stem
        paths = {c["jsonPath"] for c in version["additionalPrinterColumns"]}
        assert {".status.phase", ".spec.minMember", ".status.running"} <= paths, stem


@pytest.fixture(scope="module")
def shipped_rbac(local_cluster: LocalCluster) -> None:
    for manifest in ("00-namespace.yaml", "10-rbac.yaml"):
        kubectl(local_cluster, "apply", "-f", str(DEPLOY / manifest))


@pytest.fixture(scope="module")
def as_scheduler(local_cluster: LocalCluster, shipped_rbac: None) -> Iterator[KubeClient]:
    """The project's client with a token of the scheduler's ServiceAccount, as `coscheduling
    run` in the Deployment has it: requests go out as the scheduler sends them (a status
    merge patch without a GET first, which `kubectl patch` would need)."""
    token = kubectl(local_cluster, "-n", "coscheduling-system", "create", "token",
                    "coscheduling").stdout.strip()
    client = KubeClient(ClientSettings(kubeconfig=str(local_cluster.kubeconfig), token=token))
    yield client
    client.close()


def _columns(cluster: LocalCluster, *args: str) -> dict[str, str]:
    """The one row `kubectl get` prints, by column header ("" where a field is unset: the
    row is cut at the headers' offsets, as kubectl aligns it)."""
    header, row = kubectl(cluster, "get", *args).stdout.splitlines()
    starts = [m.start() for m in re.finditer(r"\S+", header)]
    ends = [*starts[1:], None]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, ends, strict=True)}


@dataclass(frozen=True)
class Producer:
    """One gang object as its producer writes it (the JSON of its Go type, nulls included),
    the status this scheduler writes for it, and what `kubectl get` must then show."""

    resource: str
    body: dict[str, Any]
    status: dict[str, Any]
    columns: dict[str, str]
    namespaced: bool = True


PRODUCERS = {
    # Kubeflow training operator, --gang-scheduler-name other than volcano: a PyTorchJob of
    # 1 master + 3 workers.
    "training-operator/scheduler-plugins": Producer(
        "podgroups.scheduling.x-k8s.io",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "pytorch-job", "creationTimestamp": None},
         "spec": {"minMember": 4, "minResources": {"cpu": "4", "memory": "8Gi"}},
         "status": {"scheduleStartTime": None}},
        {"phase": "Running", "running": 4, "scheduleStartTime": "2026-01-02T03:04:05Z",
         "occupiedBy": "b4b5f8f0-53c3-4fd4-9d6c-1f1ad0a8e3a1"},
        {"PHASE": "Running", "MINMEMBER": "4", "RUNNING": "4"}),
    # MPI operator: writes scheduleTimeoutSeconds 0 ("the scheduler's default").
    "mpi-operator/scheduler-plugins": Producer(
        "podgroups.scheduling.x-k8s.io",
        {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "mpi-job", "creationTimestamp": None},
         "spec": {"minMember": 3, "minResources": {"cpu": "3"}, "scheduleTimeoutSeconds": 0},
         "status": {"scheduleStartTime": None}},
        {"phase": "Scheduling", "scheduleStartTime": "2026-01-02T03:04:05Z"},
        {"PHASE": "Scheduling", "MINMEMBER": "3", "RUNNING": "", "FAILED": ""}),
    # Training operator, --gang-scheduler-name=volcano; a newer Volcano client adds spec
    # fields this CRD does not list (kept as sent).
    "training-operator/volcano": Producer(
        "podgroups.scheduling.volcano.sh",
        {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
         "metadata": {"name": "pytorch-job", "creationTimestamp": None},
         "spec": {"minMember": 4, "queue": "default", "priorityClassName": "high",
                  "minResources": {"cpu": "4", "nvidia.com/gpu": "4"},
                  "minTaskMember": {"master": 1, "worker": 3},
                  "networkTopology": {"mode": "hard", "highestTierAllowed": 1}},
         "status": {"phase": "Pending"}},
        {"phase": "Inqueue", "running": 0, "conditions": [
            {"type": "Scheduled", "status": "True", "transitionID": "1",
             "lastTransitionTime": "2026-01-02T03:04:05Z", "reason": "Inqueue",
             "message": "the group's minResources fit"}]},
        {"PHASE": "Inqueue", "MINMEMBER": "4", "RUNNING": "0", "QUEUE": "default"}),
    # kube-batch's tutorial (seed 000): a Job of 6 and its group.
    "kube-batch": Producer(
        "podgroups.scheduling.incubator.k8s.io",
        {"apiVersion": "scheduling.incubator.k8s.io/v1alpha1", "kind": "PodGroup",
         "metadata": {"name": "qj-1", "creationTimestamp": None},
         "spec": {"minMember": 6, "queue": "default"},
         "status": {}},
        {"phase": "Pending", "conditions": [
            {"type": "Unschedulable", "status": "True", "lastTransitionTime": None,
             "reason": "NotEnoughResources", "message": "room for 5 of 6"}]},
        {"PHASE": "Pending", "MINMEMBER": "6", "RUNNING": "", "QUEUE": "default"}),
}


@pytest.mark.parametrize("producer", PRODUCERS.values(), ids=PRODUCERS.keys())
def test_a_producers_object_is_kept_as_sent_and_shows_the_status_the_scheduler_wrote(
        local_cluster: LocalCluster, compat_crds: None, as_scheduler: KubeClient,
        namespace: str, producer: Producer) -> None:
    """The producer's object is accepted with its spec exactly as sent (nothing pruned or
    defaulted) and no status; the scheduler's ServiceAccount writes status through the
    subresource and `kubectl get` shows it; the operator replacing the whole object later
    changes spec and leaves that status alone; the ServiceAccount may not touch spec."""
    body = json.loads(json.dumps(producer.body))
    if not producer.namespaced:  # cluster-scoped: a name no other test run uses
        body["metadata"]["name"] += f"-{namespace}"
    name = body["metadata"]["name"]
    scope = ["-n", namespace] if producer.namespaced else []
    try:
        created = json.loads(kubectl(local_cluster, "create", *scope, "-o", "json", "-f", "-",
                                     stdin=json.dumps(body)).stdout)
        assert created["spec"] == body["spec"]
        assert "status" not in created  # a create never sets status through the main resource

        crd = COMPAT_CRDS[producer.resource]
        path = crd_path(crd, namespace if producer.namespaced else None, name)
        as_scheduler.patch(f"{path}/status", {"status": producer.status})
        shown = _columns(local_cluster, producer.resource, name, *scope)
        assert producer.columns.items() <= shown.items(), shown

        # The operator's sync: GET, rewrite spec, PUT the whole object with its stale status.
        current = json.loads(kubectl(local_cluster, "get", producer.resource, name, *scope,
                                     "-o", "json").stdout)
        written = current["status"]
        spec_key, value = (("weight", 3) if not producer.namespaced else ("minMember", 2))
        current["spec"][spec_key] = value
        current["status"] = body["status"]
        replaced = json.loads(kubectl(local_cluster, "replace", *scope, "-o", "json", "-f", "-",
                                      stdin=json.dumps(current)).stdout)
        assert replaced["spec"][spec_key] == value and replaced["status"] == written

        refused: dict[str, Callable[[], Any]] = {
            "patch spec": lambda: as_scheduler.patch(path, {"spec": {spec_key: 1}}),
            "patch status through the object": lambda: as_scheduler.patch(
                path, {"status": producer.status}),
            "delete": lambda: as_scheduler.delete(path),
            "create": lambda: as_scheduler.create(
                path.rsplit("/", 1)[0], {**body, "metadata": {"name": f"{name}-x"}}),
        }
        for what, call in refused.items():
            with pytest.raises(ApiError) as err:
                call()
            assert err.value.status == 403, f"{what}: {err.value}"
    finally:
        kubectl(local_cluster, "delete", producer.resource, name, *scope, "--ignore-not-found")


BAD_INPUT = {
    "minMember not a number": (
        "podgroups.scheduling.x-k8s.io", {"spec": {"minMember": "four"}}, "spec.minMember"),
    "negative timeout": (
        "podgroups.scheduling.x-k8s.io", {"spec": {"minMember": 2,
                                                   "scheduleTimeoutSeconds": -1}},
        "spec.scheduleTimeoutSeconds"),
    "a quantity that is none": (
        "podgroups.scheduling.volcano.sh", {"spec": {"minMember": 2,
                                                     "minResources": {"cpu": "lots"}}},
        "spec.minResources.cpu"),
    "negative task member": (
        "podgroups.scheduling.volcano.sh", {"spec": {"minMember": 2,
                                                     "minTaskMember": {"worker": -1}}},
        "spec.minTaskMember.worker"),
    "queue not a string": (
        "podgroups.scheduling.incubator.k8s.io", {"spec": {"minMember": 2, "queue": 7}},
        "spec.queue"),
}


@pytest.mark.parametrize("resource,doc,field", BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_refused_naming_the_field(local_cluster: LocalCluster,
                                               compat_crds: None, namespace: str,
                                               resource: str, doc: dict[str, Any],
                                               field: str) -> None:
    crd = COMPAT_CRDS[resource]
    body = {"apiVersion": f"{crd['spec']['group']}/{crd['spec']['versions'][0]['name']}",
            "kind": crd["spec"]["names"]["kind"], "metadata": {"name": "bad"}, **doc}
    result = kubectl(local_cluster, "create", "-n", namespace, "-f", "-", check=False,
                     stdin=json.dumps(body))
    assert result.returncode != 0 and f"{field}:" in result.stderr, result.stderr


def test_a_status_the_producers_do_not_know_is_refused_naming_the_field(
        local_cluster: LocalCluster, compat_crds: None, namespace: str) -> None:
    """Each group's status takes only its own phases: kube-batch has no Finished."""
    kubectl(local_cluster, "create", "-n", namespace, "-f", "-",
            stdin=json.dumps(PRODUCERS["kube-batch"].body))
    result = kubectl(local_cluster, "patch", "podgroups.scheduling.incubator.k8s.io", "qj-1",
                     "-n", namespace, "--subresource=status", "--type=merge",
                     "-p", '{"status": {"phase": "Finished", "running": -1}}', check=False)
    assert result.returncode != 0, result.stdout
    assert "status.phase: Unsupported value" in result.stderr, result.stderr
    assert "status.running:" in result.stderr, result.stderr


VERBS = ("get", "list", "watch", "create", "update", "patch", "delete", "deletecollection")
READ = frozenset({"get", "list", "watch"})
WRITE_STATUS = frozenset({"patch"})
# (group, resource, subresource) -> exactly the verbs the scheduler has on it.
FOREIGN_GRANTS = {
    **{(group, "podgroups", sub): verbs
       for group in ("scheduling.x-k8s.io", "scheduling.volcano.sh",
                     "scheduling.incubator.k8s.io")
       for sub, verbs in (("", READ), ("status", WRITE_STATUS))},
    ("scheduling.volcano.sh", "queues", ""): frozenset(),  # spec.queue names our Queues
    ("scheduling.volcano.sh", "queues", "status"): frozenset(),
    ("scheduling.incubator.k8s.io", "queues", ""): frozenset(),
    ("scheduling.incubator.k8s.io", "queues", "status"): frozenset(),
    ("scheduling.volcano.sh", "jobs", ""): frozenset(),
    ("scheduling.k8s.io", "workloads", ""): READ,
    ("scheduling.k8s.io", "workloads", "status"): frozenset(),
    ("scheduling.k8s.io", "podgroups", ""): READ,
    ("scheduling.k8s.io", "podgroups", "status"): frozenset({"patch"}),
}


def _allowed(kube: KubeClient, verb: str, group: str, resource: str, sub: str) -> bool:
    """The API server's answer for the scheduler's ServiceAccount (a SubjectAccessReview, as
    `kubectl auth can-i --as` sends, but naming the group itself: kubectl resolves
    `workloads.scheduling.k8s.io` through discovery and asks about a core-group resource of
    that name when the server does not serve the API)."""
    review = kube.create("/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {"user": SCHEDULER_SA,
                 "groups": ["system:serviceaccounts",
                            "system:serviceaccounts:coscheduling-system",
                            "system:authenticated"],
                 "resourceAttributes": {"namespace": "some-team", "verb": verb,
                                        "group": group, "resource": resource,
                                        "subresource": sub}}})
    return bool(review["status"].get("allowed"))


def test_the_scheduler_may_exactly_read_foreign_gangs_and_write_their_status(
        local_cluster: LocalCluster, kube: KubeClient, compat_crds: None,
        shipped_rbac: None) -> None:
    wrong = [(verb, group, resource, sub, expected)
             for (group, resource, sub), verbs in FOREIGN_GRANTS.items()
             for verb in VERBS
             if _allowed(kube, verb, group, resource, sub) != (expected := verb in verbs)]
    assert not wrong, wrong
    # The same through kubectl, for the APIs crd/compat/ serves.
    for args, answer in ((("get", "podgroups.scheduling.volcano.sh"), "yes"),
                         (("patch", "podgroups.scheduling.volcano.sh",
                           "--subresource=status"), "yes"),
                         (("patch", "podgroups.scheduling.volcano.sh"), "no"),
                         (("delete", "podgroups.scheduling.x-k8s.io"), "no"),
                         (("update", "podgroups.scheduling.incubator.k8s.io",
                           "--subresource=status"), "no"),
                         ):
        result = kubectl(local_cluster, "auth", "can-i", f"--as={SCHEDULER_SA}", *args,
                         "-n", "some-team", check=False)
        assert result.stdout.strip() == answer, (args, result.stdout, result.stderr)


def test_status_on_the_object_is_granted_only_by_its_own_manifest(
        local_cluster: LocalCluster, kube: KubeClient, compat_crds: None,
        shipped_rbac: None) -> None:
    """deploy/11-rbac-status-on-object.yaml (for owners' CRDs without the status subresource)
    adds patch on Volcano's and kube-batch's PodGroups, and nothing else."""
    manifest = REPO / "deploy" / "11-rbac-status-on-object.yaml"
    kubectl(local_cluster, "apply", "-f", str(manifest))
    try:
        wait_until(lambda: _allowed(kube, "patch", "scheduling.volcano.sh", "podgroups", ""),
                   what="patch on Volcano PodGroups granted")
        for group in ("scheduling.volcano.sh", "scheduling.incubator.k8s.io"):
            assert _allowed(kube, "patch", group, "podgroups", "")
            assert not _allowed(kube, "delete", group, "podgroups", "")
            assert not _allowed(kube, "update", group, "podgroups", "")
        assert not _allowed(kube, "patch", "scheduling.x-k8s.io", "podgroups", "")
    finally:
        kubectl(local_cluster, "delete", "-f", str(manifest), "--ignore-not-found")
