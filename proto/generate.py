"""Generate the Python code for proto/ into a directory (``make proto``, ``make proto-check``).

protoc names Python modules after the .proto file's path (``coscheduling/v1/...``), which
would collide with this project's own ``coscheduling`` package; the generated modules are
moved into ``coscheduling.server.gen`` and their two module references rewritten. The
descriptor keeps its canonical file name, ``coscheduling/v1/scheduling.proto``.
The Kubernetes messages (proto/k8s.io, vendored by ``fetch_kubernetes.py``) are generated
into ``coscheduling.cluster.kubeproto``, one flat module per file
(``k8s.io/api/core/v1/generated.proto`` -> ``api_core_v1_pb2``), their imports rewritten
the same way; the decoder finds messages by full name in the default descriptor pool.
Run with the pinned grpcio-tools (the dev extra), so regenerating gives no diff.
"""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

PROTO_ROOT = Path(__file__).resolve().parent
SOURCE = "coscheduling/v1/scheduling.proto"
PROTO_MODULE = "coscheduling.v1.scheduling_pb2"
TARGET_PACKAGE = "coscheduling.server.gen"
INIT = '"""Generated from proto/ by `make proto`: do not edit."""\n'
# mypy reads these wherever they are imported, whatever its exclude says; they are protoc's,
# so their style is not ours to check.
STUB_HEADER = "# mypy: ignore-errors\n"
KUBERNETES_ROOT = "k8s.io"
KUBERNETES_PACKAGE = "coscheduling.cluster.kubeproto"
KUBERNETES_INIT = ('"""The Kubernetes API\'s protobuf messages, generated from proto/k8s.io by '
                   '`make proto`: do not edit."""\n')
_KUBERNETES_IMPORT = re.compile(r"^from k8s\.io\.([\w.]+) import generated_pb2 as ", re.M)


def _rewrite(text: str, old: str, new: str, path: str) -> str:
    if old not in text:
        raise SystemExit(f"{path}: expected {old!r} in protoc's output; update proto/generate.py")
    return text.replace(old, new)


def generate(out: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}", f"--pyi_out={tmp}",
                f"--grpc_python_out={tmp}", str(PROTO_ROOT / SOURCE)]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        made = Path(tmp) / Path(SOURCE).parent
        out.mkdir(parents=True, exist_ok=True)
        (out / "__init__.py").write_text(INIT)
        for name in ("scheduling_pb2.py", "scheduling_pb2.pyi", "scheduling_pb2_grpc.py"):
            text = (made / name).read_text()
            if name == "scheduling_pb2.py":
                text = _rewrite(text, f"'{PROTO_MODULE}'", f"'{TARGET_PACKAGE}.scheduling_pb2'",
                                name)
            if name in ("scheduling_pb2.pyi", "scheduling_pb2_grpc.py"):
                text = STUB_HEADER + text
            if name == "scheduling_pb2_grpc.py":
                text = _rewrite(text, "from coscheduling.v1 import scheduling_pb2",
                                f"from {TARGET_PACKAGE} import scheduling_pb2", name)
            (out / name).write_text(text)


def kubernetes_module(source: str) -> str:
    """``k8s.io/api/core/v1/generated.proto`` -> ``api_core_v1_pb2``."""
    package = source.removeprefix(f"{KUBERNETES_ROOT}/").removesuffix("/generated.proto")
    return package.replace("/", "_") + "_pb2"


def generate_kubernetes(out: Path) -> None:
    sources = sorted(str(p.relative_to(PROTO_ROOT))
                     for p in (PROTO_ROOT / KUBERNETES_ROOT).rglob("generated.proto"))
    with tempfile.TemporaryDirectory() as tmp:
        if protoc.main(["protoc", f"-I{PROTO_ROOT}", f"--python_out={tmp}", *sources]) != 0:
            raise SystemExit("protoc failed on the Kubernetes .proto files")
        out.mkdir(parents=True, exist_ok=True)
        (out / "__init__.py").write_text(KUBERNETES_INIT)
        for source in sources:
            # protoc names the module after the path, the dot in k8s.io a package level
            made = Path(tmp) / source.replace(".io/", "/io/", 1).replace(".proto", "_pb2.py")
            name = kubernetes_module(source)
            text = _rewrite(made.read_text(), f"'{source.replace('/', '.')[:-6]}_pb2'",
                            f"'{KUBERNETES_PACKAGE}.{name}'", name)
            text = _KUBERNETES_IMPORT.sub(
                lambda m: f"from {KUBERNETES_PACKAGE} import "
                          f"{kubernetes_module(m.group(1).replace('.', '/'))} as ", text)
            (out / f"{name}.py").write_text(STUB_HEADER + text)
    _write_inline(out / "inline.py")


def _write_inline(path: Path) -> None:
    """proto/k8s.io/INLINE (fields JSON writes inline, see fetch_kubernetes.py) as code."""
    pairs = [tuple(line.split()) for line in
             (PROTO_ROOT / KUBERNETES_ROOT / "INLINE").read_text().splitlines() if line]
    body = "".join(f"    ({message!r}, {field!r}),\n" for message, field in pairs)
    path.write_text('"""(message, field) of the embedded Go structs JSON writes inline, from '
                    'proto/k8s.io/INLINE\nby `make proto`: do not edit."""\n\n'
                    f"INLINE: frozenset[tuple[str, str]] = frozenset({{\n{body}}})\n")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: generate.py GRPC_OUTPUT_DIR KUBERNETES_OUTPUT_DIR")
    generate(Path(sys.argv[1]))
    generate_kubernetes(Path(sys.argv[2]))
