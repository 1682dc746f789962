"""The scheduler's image as `make image` builds it (buildah, a base made by debootstrap from
Debian packages): reused when the current inputs were built already. It runs as 65532, carries
the OCI labels naming this commit, holds no wheel in any layer, is named as the chart's
values name it, is importable by containerd, and `coscheduling` runs inside it: `--help`,
`config validate` on the configuration the chart's defaults render, and the chart's own
command line with its configuration and TLS Secrets against the local control plane: /readyz,
and a what-if over mutual TLS at localhost."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import tarfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import ensure_helm
from coscheduling.localcluster.image_build import (
    IMAGE,
    archive_manifest,
    layer_members,
)
from tests.integration.fixtures import REPO, kubectl
from tests.integration.kube import wait_until

pytestmark = pytest.mark.integration
CHART = REPO / "deploy" / "chart"
ARCHIVE = REPO / "build" / "coscheduling-image.tar"


@pytest.fixture(scope="module")
def image() -> dict[str, Any]:
    """`make image` (a no-op past image-context when these inputs were built)."""
    result = subprocess.run(["make", "-C", str(REPO), "image"], capture_output=True,
                            text=True, timeout=1800, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    info: dict[str, Any] = json.loads((REPO / "build" / "image.json").read_text())
    return info


def _buildah(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["buildah", *args], capture_output=True, text=True, timeout=300,
                          check=False)


@pytest.fixture(scope="module")
def container(image: dict[str, Any]) -> Iterator[str]:
    created = _buildah("from", image["reference"])
    assert created.returncode == 0, created.stderr
    name = created.stdout.strip()
    yield name
    _buildah("rm", name)


def test_make_image_prints_and_records_the_digest(image: dict[str, Any]) -> None:
    digest, manifest, _ = archive_manifest(ARCHIVE)
    assert image["digest"] == digest and digest.startswith("sha256:")
    assert [layer["digest"] for layer in image["layers"]] == [
        layer["digest"] for layer in manifest["layers"]]
    assert image["size"] == sum(layer["size"] for layer in manifest["layers"]) > 0


def test_the_image_runs_as_non_root_with_the_oci_labels(image: dict[str, Any]) -> None:
    _, _, config = archive_manifest(ARCHIVE)
    assert config["config"]["User"] == "65532:65532"
    assert config["config"]["Entrypoint"] == ["coscheduling"]
    labels = config["config"]["Labels"]
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.strip()
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert labels["org.opencontainers.image.revision"].removesuffix("-dirty") == head
    assert labels["org.opencontainers.image.version"] == chart["appVersion"]
    assert labels["org.opencontainers.image.source"] == (chart.get("sources") or [""])[0]
    assert labels["org.opencontainers.image.created"].endswith("Z")


def test_no_layer_holds_a_wheel_or_pip(image: dict[str, Any]) -> None:
    members = layer_members(ARCHIVE)
    assert len(members) == len(image["layers"]) >= 2
    found = [(digest, name) for digest, names in members.items() for name in names
             if name.endswith(".whl") or "/site-packages/pip/" in name
             or "wheelhouse" in name]
    assert not found, found[:10]
    # The scheduler itself is there, in the virtualenv the first stage made.
    assert any(name.endswith("site-packages/coscheduling/cli.py")
               for names in members.values() for name in names)


def test_the_chart_runs_the_image_make_image_builds(image: dict[str, Any]) -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text())["image"]
    assert f"{values['repository']}:{values['tag']}" == IMAGE == image["reference"]
    assert values["pullPolicy"] == "IfNotPresent"  # no registry: the imported image is used
    with tarfile.open(ARCHIVE) as tar:
        member = tar.extractfile("index.json")
        assert member is not None
        (descriptor,) = json.loads(member.read())["manifests"]
    # What the kubelet asks containerd for after `ctr images import`.
    assert descriptor["annotations"]["io.containerd.image.name"] == \
        f"docker.io/library/{IMAGE}"


def test_coscheduling_runs_inside_with_the_charts_configuration(
        container: str, tmp_path: Path) -> None:
    helped = _buildah("run", "--isolation", "chroot", container, "--", "coscheduling",
                      "--help")
    assert helped.returncode == 0 and "run" in helped.stdout, helped.stderr
    # Its native extensions (grpc, cel) load on the base's Python (Debian's 3.11).
    imported = _buildah("run", "--isolation", "chroot", "--user", "65532:65532", container,
                        "--", "python", "-c",
                        "import coscheduling.service.wiring, coscheduling.server")
    assert imported.returncode == 0, imported.stderr
    rendered = subprocess.run(
        [str(ensure_helm()), "template", "coscheduling", str(CHART), "-n",
         "coscheduling-system", "--kube-version", "1.37.2"],
        capture_output=True, text=True, check=True, timeout=120).stdout
    configmap = next(d for d in yaml.safe_load_all(rendered)
                     if d and d["kind"] == "ConfigMap"
                     and d["metadata"]["name"] == "coscheduling-config")
    (tmp_path / "config.yaml").write_text(configmap["data"]["config.yaml"])
    tmp_path.chmod(0o755)
    (tmp_path / "config.yaml").chmod(0o644)
    validated = _buildah("run", "--isolation", "chroot", "--user", "65532:65532",
                         "-v", f"{tmp_path}:/etc/coscheduling:ro", container, "--",
                         "coscheduling", "config", "validate", "/etc/coscheduling/config.yaml")
    assert validated.returncode == 0, validated.stdout + validated.stderr
    whoami = _buildah("run", "--isolation", "chroot", container, "--", "id", "-u")
    assert whoami.stdout.strip() == "65532", whoami.stdout + whoami.stderr


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def _rendered(namespace: str, *values: str) -> list[dict[str, Any]]:
    out = subprocess.run(
        [str(ensure_helm()), "template", "coscheduling", str(CHART), "-n", namespace,
         "--kube-version", "1.37.2", *(a for v in values for a in ("--set", v))],
        capture_output=True, text=True, check=True, timeout=120).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def _write(directory: Path, files: dict[str, str], owner: int) -> None:
    """Files readable by `owner` alone, in a directory anyone may enter (the mounts)."""
    directory.mkdir(mode=0o755, exist_ok=True)
    for name, text in files.items():
        (directory / name).write_text(text)
        (directory / name).chmod(0o600)
        os.chown(directory / name, owner, owner)


def test_the_image_schedules_against_a_cluster(container: str, local_cluster: LocalCluster,
                                               crd: None, namespace: str,
                                               tmp_path: Path) -> None:
    """The chart's own command line (its Deployment's args), configuration and TLS Secrets,
    in the image as 65532, against the local control plane: /readyz answers, and `kubectl
    gang whatif` is answered over mutual TLS with the chart's client pair, at localhost."""
    metrics, grpc_port = _free_port(), _free_port()
    objects = _rendered(namespace, f"metrics.port={metrics}", f"grpc.port={grpc_port}")
    found = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    config = found["ConfigMap", "coscheduling-config"]["data"]
    server, client = (
        {k: base64.b64decode(v).decode() for k, v in found["Secret", name]["data"].items()}
        for name in ("coscheduling-grpc-tls", "coscheduling-grpc-client"))
    # The admin's credentials, flattened into one file only 65532 reads.
    kubeconfig = kubectl(local_cluster, "config", "view", "--raw", "--flatten").stdout
    _write(tmp_path / "config", {**config, "kubeconfig": kubeconfig}, 65532)
    _write(tmp_path / "tls", server, 65532)
    _write(tmp_path / "client", client, os.getuid())
    args = found["Deployment", "coscheduling"]["spec"]["template"]["spec"]["containers"][0][
        "args"]
    command = ["buildah", "run", "--isolation", "chroot", "--network", "host",
               "--user", "65532:65532", "--env", "POD_NAME=image-test",
               "--env", f"POD_NAMESPACE={namespace}",
               "-v", f"{tmp_path / 'config'}:/etc/coscheduling:ro",
               "-v", f"{tmp_path / 'tls'}:/etc/coscheduling-tls:ro",
               container, "--", "coscheduling", *args,
               "--kubeconfig", "/etc/coscheduling/kubeconfig"]
    log = tmp_path / "scheduler.log"
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                   start_new_session=True)
    job = tmp_path / "job.yaml"
    job.write_text(yaml.safe_dump({
        "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "fits"},
        "spec": {"parallelism": 2, "template": {"spec": {
            "schedulerName": "batch-scheduler", "restartPolicy": "Never",
            "containers": [{"name": "c", "image": "busybox",
                            "resources": {"requests": {"cpu": "1"}}}]}}}}))
    answers: list[subprocess.CompletedProcess[str]] = []

    def whatif() -> bool:
        answers.append(subprocess.run(
            [str(Path(sys.executable).with_name("kubectl-gang")), "--kubeconfig",
             str(local_cluster.kubeconfig), "-n", namespace, "whatif", "-f", str(job),
             "--address", f"localhost:{grpc_port}", "--ca", str(tmp_path / "client/ca.crt"),
             "--cert", str(tmp_path / "client/tls.crt"),
             "--key", str(tmp_path / "client/tls.key"), "-o", "json"],
            capture_output=True, text=True, timeout=60, check=False))
        return answers[-1].returncode == 0 or process.poll() is not None

    try:
        wait_until(lambda: _ready(metrics) or process.poll() is not None, timeout=120,
                   what="the scheduler in the image to answer /readyz")
        assert process.poll() is None and _ready(metrics), log.read_text()[-3000:]
        wait_until(whatif, timeout=90, what="the leader in the image to answer a what-if")
        assert answers[-1].returncode == 0, answers[-1].stderr + log.read_text()[-3000:]
        assert json.loads(answers[-1].stdout)["verdict"], answers[-1].stdout
    finally:
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """TERM to the buildah run's process group (the scheduler inside it), KILL after 30 s."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(30)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(10)
