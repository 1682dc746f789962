"""The krew manifest (deploy/krew/gang.yaml) is one krew installs: krew built from Go
modules installs it from the archive deploy/krew/archive.py builds (its sha256 checked by
krew), and `kubectl gang` then runs through kubectl against the real API server."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import ensure_krew

KREW_DIR = Path(__file__).resolve().parents[2] / "deploy" / "krew"
MANIFEST = KREW_DIR / "gang.yaml"


@pytest.fixture(scope="module")
def krew() -> Path:
    return ensure_krew()


@pytest.fixture
def archive(tmp_path: Path) -> tuple[Path, str]:
    """The plugin's archive, built as a release would be; (path, sha256)."""
    build: Any = runpy.run_path(str(KREW_DIR / "archive.py"))["build"]
    out = tmp_path / "kubectl-gang.zip"
    return out, build(out)


def _install(krew: Path, root: Path, manifest: Path, archive: Path
             ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(krew), "install", f"--manifest={manifest}",
                           f"--archive={archive}"], env={**os.environ, "KREW_ROOT": str(root)},
                          capture_output=True, text=True, timeout=120, check=False,
                          stdin=subprocess.DEVNULL)


def test_krew_installs_the_manifest_and_kubectl_runs_the_plugin(
        krew: Path, archive: tuple[Path, str], tmp_path: Path, local_cluster: LocalCluster,
        kube: KubeClient, crd: None, namespace: str) -> None:
    path, digest = archive
    manifest = yaml.safe_load(MANIFEST.read_text())
    assert manifest["spec"]["platforms"][0]["sha256"] == digest, (
        "deploy/krew/gang.yaml's sha256 is not the archive's: run deploy/krew/archive.py "
        "and put its sha256 in the manifest")
    root = tmp_path / "krew"
    installed = _install(krew, root, MANIFEST, path)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    assert "Installed plugin: gang" in installed.stdout + installed.stderr
    groups = f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups"
    kube.create(groups, {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "PodGroup",
                         "metadata": {"name": "via-krew"}, "spec": {"minMember": 2}})
    env = {**os.environ, "PATH": f"{root / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
           "COSCHEDULING_PYTHON": sys.executable}
    # kubectl takes no flag before a plugin's name: they all go after the command.
    listed = subprocess.run(["kubectl", "gang", "list", "--kubeconfig",
                             str(local_cluster.kubeconfig), "-n", namespace, "-o", "name"],
                            env=env, capture_output=True, text=True, timeout=60, check=False)
    kube.delete(f"{groups}/via-krew")  # now, not with the namespace (see test_kubectl_gang)
    assert listed.returncode == 0, listed.stderr
    assert listed.stdout.split() == ["podgroup.batch.scheduler.tencent.com/via-krew"]


@pytest.mark.parametrize(("change", "refusal"), [
    (lambda m: m["spec"].pop("shortDescription"), "should have a short description"),
    (lambda m: m["spec"]["platforms"][0].update(sha256="0" * 64), "checksum does not match"),
    (lambda m: m["spec"].update(version="0.1"), "failed to parse plugin version"),
])
def test_krew_refuses_a_broken_manifest(krew: Path, archive: tuple[Path, str],
                                        tmp_path: Path, change: Any, refusal: str) -> None:
    """The install above is krew's validation passing: the same install of a manifest
    broken one way is refused."""
    manifest = yaml.safe_load(MANIFEST.read_text())
    change(manifest)
    broken = tmp_path / "gang.yaml"
    broken.write_text(yaml.safe_dump(manifest))
    installed = _install(krew, tmp_path / "krew", broken, archive[0])
    assert installed.returncode != 0
    assert refusal in installed.stdout + installed.stderr
