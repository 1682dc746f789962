"""Generate the Python code for proto/ into a directory (``make proto``, ``make proto-check``).

protoc names Python modules after the .proto file's path (``coscheduling/v1/...``), which
would collide with this project's own ``coscheduling`` package; the generated modules are
moved into ``coscheduling.server.gen`` and their two module references rewritten. The
descriptor keeps its canonical file name, ``coscheduling/v1/scheduling.proto``.
Run with the pinned grpcio-tools (the dev extra), so regenerating gives no diff.
"""

from __future__ import annotations

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


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: generate.py OUTPUT_DIR")
    generate(Path(sys.argv[1]))
