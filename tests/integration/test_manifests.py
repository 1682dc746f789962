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
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cli import build_parser
from coscheduling.config import load_file
from coscheduling.localcluster import LocalCluster
from coscheduling.plugins.registry import default_registry
from coscheduling.server.cli import settings_from
from tests.integration.fixtures import REPO, kubectl
from tests.integration.kube import wait_until

DEPLOY = REPO / "deploy"
MANIFESTS = sorted(p.name for p in DEPLOY.glob("[0-9][0-9]-*.yaml"))


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
    for name in MANIFESTS:
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
        assert code == 1 and "PERMISSION_DENIED: certificate: coscheduling-dashboard may " \
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
