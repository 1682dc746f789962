"""Vendor the Kubernetes .proto files the scheduler decodes, from the Go modules of one release.

The API server sends built-in kinds as protobuf when asked; their messages are generated
from ``k8s.io/api`` and ``k8s.io/apimachinery`` (each module ships its ``generated.proto``
files). This copies exactly the files in ``FILES`` from the module versions the local
control plane's wrapper module requires (``coscheduling/localcluster/gomod/kubernetes-*``),
so the vendored copies match the API server the tests run, and running it again for the same
release gives the same files. Needs Go (the module proxy, or the module cache).

One fact the .proto files do not carry: which message fields are Go structs embedded in
their parent, whose fields JSON writes inline (``Volume.volumeSource``: a volume's
``persistentVolumeClaim`` is beside its ``name`` in JSON). They are read from the same
packages' ``types.go`` (an anonymous field with no JSON name and a protobuf name) into
``proto/k8s.io/INLINE``, one ``message field`` a line; ``generate.py`` turns it into code.

    python proto/fetch_kubernetes.py [RELEASE]      # e.g. 1.37.2; default: the default release
"""

from __future__ import annotations

import json
import re
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


INLINE = PROTO_ROOT / "k8s.io" / "INLINE"
_STRUCT = re.compile(r"^type (\w+) struct \{")
# An anonymous (embedded) field without a JSON name: `\tVolumeSource `json:"" protobuf:...``;
# its protobuf name is the tag's name=, else the type's name in lower camel case.
_EMBEDDED = re.compile(r'^\t\*?(?:\w+\.)?(\w+) `json:"(?:,\w+)*".*protobuf:"([^"]*)"')
_NAME = re.compile(r"name=(\w+)")


def inline_fields(types_go: Path, package: str) -> list[str]:
    """``<message> <field>`` of every embedded struct in one package's types.go."""
    found, struct = [], ""
    for line in types_go.read_text().splitlines():
        if match := _STRUCT.match(line):
            struct = match.group(1)
        elif (match := _EMBEDDED.match(line)) and struct:
            kind, tag = match.groups()
            name = _NAME.search(tag)
            found.append(f"{package}.{struct} "
                         f"{name.group(1) if name else kind[0].lower() + kind[1:]}")
    return found


def fetch(release: str) -> None:
    go = find_go("the Kubernetes .proto files", "proto/")
    inline: list[str] = []
    for module, version in module_versions(release).items():
        source = module_dir(go, module, version)
        target = PROTO_ROOT / module
        shutil.rmtree(target, ignore_errors=True)
        for package in FILES[module]:
            destination = target / package / "generated.proto"
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source / package / "generated.proto", destination)
            destination.chmod(0o644)
            proto_package = f"{module}/{package}".replace("/", ".")
            inline += inline_fields(source / package / "types.go", proto_package) \
                if (source / package / "types.go").is_file() else []
        (target / "VERSION").write_text(f"{module} v{version}\n")
        print(f"{module} v{version}: {len(FILES[module])} files -> {target}")
    INLINE.write_text("".join(f"{line}\n" for line in sorted(inline)))
    print(f"{len(inline)} embedded fields -> {INLINE}")


if __name__ == "__main__":
    if len(sys.argv) > 2:
        raise SystemExit("usage: fetch_kubernetes.py [RELEASE]")
    fetch(sys.argv[1] if len(sys.argv) == 2 else DEFAULT_KUBERNETES_VERSION)
