"""Vendor the Kubernetes .proto files the scheduler decodes, from the Go modules of one release.

The API server sends built-in kinds as protobuf when asked; their messages are generated
from ``k8s.io/api`` and ``k8s.io/apimachinery`` (each module ships its ``generated.proto``
files). This copies exactly the files in ``FILES`` from the module versions the local
control plane's wrapper module requires (``coscheduling/localcluster/gomod/kubernetes-*``),
so the vendored copies match the API server the tests run, and running it again for the same
release gives the same files. Needs Go (the module proxy, or the module cache).

    python proto/fetch_kubernetes.py [RELEASE]      # e.g. 1.37.2; default: the default release
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from coscheduling.localcluster.build import (
    DEFAULT_KUBERNETES_VERSION,
    GOMOD_DIR,
    available_kubernetes_versions,
    find_go,
    required_version,
)

PROTO_ROOT = Path(__file__).resolve().parent
MODULES = ("k8s.io/api", "k8s.io/apimachinery")
# Per module: the packages whose generated.proto the scheduler reads (its watched kinds and
# what their messages import: batch/v1 imports scheduling/v1alpha3).
FILES = {
    "k8s.io/api": ("apps/v1", "batch/v1", "core/v1", "policy/v1", "resource/v1",
                   "scheduling/v1", "scheduling/v1alpha3", "storage/v1"),
    "k8s.io/apimachinery": ("pkg/api/resource", "pkg/apis/meta/v1", "pkg/runtime",
                            "pkg/runtime/schema", "pkg/util/intstr"),
}


def module_versions(release: str) -> dict[str, str]:
    """k8s.io/api and k8s.io/apimachinery versions the release's wrapper module requires."""
    gomod = GOMOD_DIR / available_kubernetes_versions()[release] / "go.mod"
    return {module: required_version(gomod, module) for module in MODULES}


def module_dir(go: str, module: str, version: str) -> Path:
    """Where ``go mod download`` put the module (fetched from the proxy when not cached)."""
    result = subprocess.run([go, "mod", "download", "-json", f"{module}@v{version}"],
                            capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise SystemExit(f"go mod download {module}@v{version} failed:\n{result.stderr}"
                         f"{result.stdout}")
    return Path(json.loads(result.stdout)["Dir"])


def fetch(release: str) -> None:
    go = find_go("the Kubernetes .proto files", "proto/")
    for module, version in module_versions(release).items():
        source = module_dir(go, module, version)
        target = PROTO_ROOT / module
        shutil.rmtree(target, ignore_errors=True)
        for package in FILES[module]:
            destination = target / package / "generated.proto"
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / package / "generated.proto", destination)
            destination.chmod(0o644)
        (target / "VERSION").write_text(f"{module} v{version}\n")
        print(f"{module} v{version}: {len(FILES[module])} files -> {target}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        raise SystemExit("usage: fetch_kubernetes.py [RELEASE]")
    fetch(sys.argv[1] if len(sys.argv) == 2 else DEFAULT_KUBERNETES_VERSION)
