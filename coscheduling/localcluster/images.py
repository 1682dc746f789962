"""Container images for the real local nodes, written here: no registry is reachable.

Both images are one layer holding Debian's static busybox and a link per applet: the
sandbox ("pause") image runs a shell that sleeps until it is signalled, and the test
image runs whatever command a pod gives it (`sh -c "sleep 2; exit 1"`). Each is written as
an OCI image layout in a tar archive, the form `ctr images import` reads.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import tarfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BUSYBOX",
    "PAUSE_IMAGE",
    "TEST_IMAGE",
    "ImageArchive",
    "ImageError",
    "busybox_layer",
    "ensure_images",
    "is_dynamic_elf",
    "oci_archive",
]

BUSYBOX = Path("/bin/busybox")
PAUSE_IMAGE = "coscheduling.local/pause:1"
TEST_IMAGE = "coscheduling.local/busybox:1"
# The sandbox holds the pod's namespaces; it only has to live until it is told to stop.
PAUSE_COMMAND = ("/bin/sh", "-c", "trap 'exit 0' TERM INT; while :; do sleep 3600 & wait $!; done")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
PT_INTERP = 3


class ImageError(RuntimeError):
    """An image could not be written (static busybox missing, say)."""


@dataclass(frozen=True)
class ImageArchive:
    """An image reference and the OCI archive that holds it."""

    reference: str
    path: Path


def _digest(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _entry(name: str, kind: bytes, mode: int, size: int = 0, link: str = "") -> tarfile.TarInfo:
    """A tar member owned by root with a fixed time, so the same busybox gives the same
    layer digest on every machine."""
    info = tarfile.TarInfo(name)
    info.type, info.mode, info.size, info.linkname = kind, mode, size, link
    info.mtime = 0
    return info


def _applets(busybox: Path) -> list[str]:
    result = subprocess.run(
        [str(busybox), "--list"], capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ImageError(f"{busybox} --list failed: {result.stderr.strip()}")
    return sorted({name for name in result.stdout.split() if "/" not in name} - {"busybox"})


def is_dynamic_elf(binary: bytes) -> bool:
    """True for an ELF executable that names a program interpreter (PT_INTERP): it needs
    the host's libraries, which an image of busybox alone does not have."""
    if binary[:4] != b"\x7fELF" or binary[4] != 2:  # 64-bit only (the images are amd64)
        return False
    offset = int.from_bytes(binary[0x20:0x28], "little")
    size = int.from_bytes(binary[0x36:0x38], "little")
    count = int.from_bytes(binary[0x38:0x3A], "little")
    return any(
        int.from_bytes(binary[start : start + 4], "little") == PT_INTERP
        for start in range(offset, offset + size * count, size)
    )


def busybox_layer(busybox: Path = BUSYBOX) -> bytes:
    """An uncompressed layer: /bin/busybox, /bin/<applet> links to it, /etc, /tmp, /proc..."""
    needed = "the images of the real nodes are made from Debian's static busybox; install " \
        "it with `make node-packages` (busybox-static)"
    if not (busybox.is_file() and os.access(busybox, os.X_OK)):
        raise ImageError(f"{busybox} is missing: {needed}")
    binary = busybox.read_bytes()
    if is_dynamic_elf(binary):
        raise ImageError(f"{busybox} is dynamically linked (Debian's busybox, not "
                         f"busybox-static): {needed}")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for directory, mode in (("bin", 0o755), ("dev", 0o755), ("etc", 0o755),
                                ("proc", 0o555), ("sys", 0o555), ("tmp", 0o1777)):
            tar.addfile(_entry(directory, tarfile.DIRTYPE, mode))
        tar.addfile(_entry("bin/busybox", tarfile.REGTYPE, 0o755, len(binary)),
                    io.BytesIO(binary))
        for applet in _applets(busybox):
            tar.addfile(_entry(f"bin/{applet}", tarfile.SYMTYPE, 0o777, link="busybox"))
    return buffer.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes) -> str:
    digest = _digest(data)
    tar.addfile(_entry(f"blobs/sha256/{digest.removeprefix('sha256:')}", tarfile.REGTYPE,
                       0o644, len(data)), io.BytesIO(data))
    return digest


def _json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def oci_archive(path: Path, reference: str, layer: bytes, command: Sequence[str]) -> None:
    """Write one image (`reference`, one layer, default `command`) as an OCI layout tar."""
    config = _json({
        "architecture": "amd64",
        "os": "linux",
        "config": {"Cmd": list(command), "Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [_digest(layer)]},
    })
    partial = path.with_name(f".{path.name}.partial-{os.getpid()}")
    with tarfile.open(partial, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        layout = _json({"imageLayoutVersion": "1.0.0"})
        tar.addfile(_entry("oci-layout", tarfile.REGTYPE, 0o644, len(layout)),
                    io.BytesIO(layout))
        manifest = _json({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": _blob(tar, config),
                       "size": len(config)},
            "layers": [{"mediaType": OCI_LAYER, "digest": _blob(tar, layer),
                        "size": len(layer)}],
        })
        index = _json({
            "schemaVersion": 2,
            "mediaType": OCI_INDEX,
            "manifests": [{
                "mediaType": OCI_MANIFEST,
                "digest": _blob(tar, manifest),
                "size": len(manifest),
                "platform": {"architecture": "amd64", "os": "linux"},
                "annotations": {
                    "io.containerd.image.name": reference,
                    "org.opencontainers.image.ref.name": reference.rsplit(":", 1)[1],
                },
            }],
        })
        tar.addfile(_entry("index.json", tarfile.REGTYPE, 0o644, len(index)),
                    io.BytesIO(index))
    os.replace(partial, path)


def ensure_images(directory: Path, busybox: Path = BUSYBOX) -> tuple[ImageArchive, ...]:
    """The sandbox and test images as archives in `directory` (written when missing),
    named after the layer's digest so a busybox upgrade writes new ones."""
    layer = busybox_layer(busybox)
    key = hashlib.sha256(layer).hexdigest()[:12]
    directory.mkdir(parents=True, exist_ok=True)
    images = (
        (ImageArchive(PAUSE_IMAGE, directory / f"pause-{key}.tar"), PAUSE_COMMAND),
        (ImageArchive(TEST_IMAGE, directory / f"busybox-{key}.tar"), ("/bin/sh",)),
    )
    for image, command in images:
        if not image.path.is_file():
            oci_archive(image.path, image.reference, layer, command)
    return tuple(image for image, _ in images)
