"""`make image`: the scheduler's OCI image, built here with buildah from deploy/Dockerfile.

No registry is reachable, so the base (`coscheduling.local/debian-python:bookworm`) is made
from Debian packages: debootstrap's minbase of the machine's release with Debian's python3,
trimmed, kept as a tar under ~/.cache/coscheduling/image-base and imported into buildah's
storage once. With a registry, BASE=<image> skips that and builds on the given base.

The image is written as an OCI archive (build/coscheduling-image.tar, the form `ctr images
import` reads, as the real nodes' images are) and described in build/image.json: its
reference, digest, size, layers, labels, and the key of the inputs it was built from, so a
rebuild of the same inputs is skipped.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .build import cache_dir

__all__ = [
    "DEBIAN_BASE",
    "IMAGE",
    "ImageBuildError",
    "archive_manifest",
    "build_image",
    "inputs_key",
    "kubelet_name",
    "layer_members",
]

REPO = Path(__file__).resolve().parents[2]
CHART_FILE = REPO / "deploy" / "chart" / "Chart.yaml"
DEBIAN_BASE = "coscheduling.local/debian-python:bookworm"
DEBIAN_SUITE = "bookworm"
DEBIAN_MIRROR = "http://deb.debian.org/debian"
# What the base keeps out of debootstrap's minbase: documentation and caches.
TRIM = ("usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
        "var/cache/apt", "var/lib/apt/lists", "var/cache/debconf/templates.dat-old")


def _chart() -> dict[str, Any]:
    chart: dict[str, Any] = yaml.safe_load(CHART_FILE.read_text())
    return chart


def _image_name() -> str:
    """The chart's image: values.yaml's repository and tag (what `helm install` runs)."""
    values = yaml.safe_load((CHART_FILE.parent / "values.yaml").read_text())["image"]
    return f"{values['repository']}:{values['tag']}"


IMAGE = _image_name()


class ImageBuildError(RuntimeError):
    """A step of the image build failed; the message names it and what it printed."""


def _run(*command: str, cwd: Path | None = None) -> str:
    result = subprocess.run(command, capture_output=True, text=True, cwd=cwd, check=False)
    if result.returncode != 0:
        raise ImageBuildError(
            f"{' '.join(command[:3])} failed ({result.returncode}): "
            f"{(result.stderr or result.stdout).strip()[-2000:]}")
    return result.stdout


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise ImageBuildError(f"{tool} is not installed: run `make image-packages` "
                              "(buildah, debootstrap, skopeo from Debian)")
    return path


def _has_image(reference: str) -> bool:
    result = subprocess.run([_need("buildah"), "inspect", "--type", "image", reference],
                            capture_output=True, check=False)
    return result.returncode == 0


def _debootstrap(tarball: Path) -> None:
    """Debian's minbase with python3 (3.11 on bookworm), trimmed, as a tar."""
    rootfs = tarball.with_suffix(".rootfs")
    shutil.rmtree(rootfs, ignore_errors=True)
    print(f"image: debootstrap --variant=minbase {DEBIAN_SUITE} (python3) into {rootfs}",
          flush=True)
    _run(_need("debootstrap"), "--variant=minbase", "--include=python3", DEBIAN_SUITE,
         str(rootfs), DEBIAN_MIRROR)
    for path in TRIM:
        target = rootfs / path
        if target.is_dir():
            shutil.rmtree(target)
            target.mkdir(parents=True)
        elif target.exists():
            target.unlink()
    partial = tarball.with_name(f".{tarball.name}.partial")
    _run("tar", "--numeric-owner", "--xattrs", "-C", str(rootfs), "-cf", str(partial), ".")
    os.replace(partial, tarball)
    shutil.rmtree(rootfs)


def ensure_debian_base() -> str:
    """The base image in buildah's storage: imported from the cached tar, which debootstrap
    makes on the first build."""
    if _has_image(DEBIAN_BASE):
        return DEBIAN_BASE
    tarball = cache_dir() / "image-base" / f"debian-{DEBIAN_SUITE}-python3.tar"
    tarball.parent.mkdir(parents=True, exist_ok=True)
    if not tarball.is_file():
        _debootstrap(tarball)
    buildah = _need("buildah")
    container = _run(buildah, "from", "scratch").strip()
    try:
        _run(buildah, "add", container, str(tarball), "/")
        _run(buildah, "config", "--env",
             "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
             "--cmd", "/bin/bash", container)
        _run(buildah, "commit", "--rm", container, DEBIAN_BASE)
    except ImageBuildError:
        subprocess.run([buildah, "rm", container], capture_output=True, check=False)
        raise
    return DEBIAN_BASE


def inputs_key(context: Path, base: str, revision: str) -> str:
    """What the image is built from: the context's files (Dockerfile, lock, wheels), the
    base's name and the commit its label names; the same key, the same image up to its
    creation time."""
    digest = hashlib.sha256(f"{base}\n{revision}".encode())
    for path in sorted(p for p in context.rglob("*") if p.is_file()):
        digest.update(str(path.relative_to(context)).encode())
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def _revision() -> str:
    revision = _run("git", "rev-parse", "HEAD", cwd=REPO).strip()
    dirty = _run("git", "status", "--porcelain", "--untracked-files=no", cwd=REPO).strip()
    return f"{revision}-dirty" if dirty else revision


def kubelet_name(reference: str) -> str:
    """The name the kubelet asks containerd for: `coscheduling:0.1.0` is
    docker.io/library/coscheduling:0.1.0 to the CRI."""
    first = reference.split("/", 1)[0]
    if "/" in reference and ("." in first or ":" in first or first == "localhost"):
        return reference
    return f"docker.io/{reference if '/' in reference else 'library/' + reference}"


def _write_archive(layout: Path, archive: Path, reference: str) -> None:
    """The OCI layout buildah pushed, named for containerd (`io.containerd.image.name`),
    as one tar."""
    index = json.loads((layout / "index.json").read_text())
    for manifest in index["manifests"]:
        manifest.setdefault("annotations", {})["io.containerd.image.name"] = \
            kubelet_name(reference)
    (layout / "index.json").write_text(json.dumps(index))
    partial = archive.with_name(f".{archive.name}.partial")
    with tarfile.open(partial, "w") as tar:
        for path in sorted(layout.rglob("*")):
            tar.add(path, arcname=str(path.relative_to(layout)), recursive=False)
    os.replace(partial, archive)


def _blob(tar: tarfile.TarFile, digest: str) -> bytes:
    member = tar.extractfile(f"blobs/sha256/{digest.removeprefix('sha256:')}")
    if member is None:
        raise ImageBuildError(f"the archive has no blob {digest}")
    return member.read()


def archive_manifest(archive: Path) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The image's manifest digest, its manifest and its config, read from the archive."""
    with tarfile.open(archive) as tar:
        member = tar.extractfile("index.json")
        if member is None:
            raise ImageBuildError(f"{archive} has no index.json")
        (descriptor,) = json.loads(member.read())["manifests"]
        manifest = json.loads(_blob(tar, descriptor["digest"]))
        config = json.loads(_blob(tar, manifest["config"]["digest"]))
    return str(descriptor["digest"]), manifest, config


def layer_members(archive: Path) -> dict[str, list[str]]:
    """Each layer's digest and the paths it holds (gzip or plain tar layers alike)."""
    _, manifest, _ = archive_manifest(archive)
    result: dict[str, list[str]] = {}
    with tarfile.open(archive) as outer:
        for layer in manifest["layers"]:
            blob = outer.extractfile(f"blobs/sha256/{layer['digest'].removeprefix('sha256:')}")
            if blob is None:
                raise ImageBuildError(f"{archive} lacks the layer {layer['digest']}")
            with tarfile.open(fileobj=blob, mode="r|*") as inner:
                result[layer["digest"]] = [m.name for m in inner]
    return result


def _describe(archive: Path, reference: str, key: str, seconds: float) -> dict[str, Any]:
    digest, manifest, config = archive_manifest(archive)
    layers = [{"digest": layer["digest"], "size": layer["size"]}
              for layer in manifest["layers"]]
    return {
        "reference": reference,
        "kubeletName": kubelet_name(reference),
        "digest": digest,
        "size": sum(layer["size"] for layer in manifest["layers"]),
        "layers": layers,
        "user": config["config"].get("User", ""),
        "labels": config["config"].get("Labels", {}),
        "archive": str(archive),
        "inputs": key,
        "buildSeconds": round(seconds, 1),
    }


def _source(chart: dict[str, Any]) -> str:
    """The image's source label: the chart's first source address, empty while it has
    none (no public address exists; an invented one would mislead)."""
    sources = chart.get("sources") or [""]
    return str(sources[0])


def build_image(context: Path, base: str, out: Path, *, force: bool = False) -> dict[str, Any]:
    """Build the image from `context` (made by `make image-context`) onto `base`; write
    out/coscheduling-image.tar and out/image.json. The same inputs are not built twice."""
    info_path, archive = out / "image.json", out / "coscheduling-image.tar"
    revision = _revision()
    key = inputs_key(context, base, revision)
    if not force and info_path.is_file() and archive.is_file():
        info: dict[str, Any] = json.loads(info_path.read_text())
        if info.get("inputs") == key and _has_image(IMAGE):
            return {**info, "reused": True}
    started = time.monotonic()
    if base == DEBIAN_BASE:
        ensure_debian_base()
    buildah, chart = _need("buildah"), _chart()
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    build_args = {"BASE": base, "VERSION": str(chart["appVersion"]), "REVISION": revision,
                  "CREATED": created, "SOURCE": _source(chart)}
    _run(buildah, "bud", "--layers", "--isolation", "chroot", "-f",
         str(context / "Dockerfile"), "-t", IMAGE,
         *(a for name, value in build_args.items() for a in ("--build-arg", f"{name}={value}")),
         str(context))
    layout = out / ".image-layout"
    shutil.rmtree(layout, ignore_errors=True)
    _run(buildah, "push", IMAGE, f"oci:{layout}:{IMAGE}")
    _write_archive(layout, archive, IMAGE)
    shutil.rmtree(layout)
    info = _describe(archive, IMAGE, key, time.monotonic() - started)
    info_path.write_text(json.dumps(info, indent=2) + "\n")
    return info


def _report(info: dict[str, Any]) -> str:
    lines = [f"image: {info['reference']} (containerd: {info['kubeletName']})",
             f"  digest  {info['digest']}",
             f"  size    {info['size'] / 2**20:.1f} MiB in {len(info['layers'])} layers",
             *(f"    {layer['digest']}  {layer['size'] / 2**20:8.1f} MiB"
               for layer in info["layers"]),
             f"  user    {info['user']}",
             f"  built in {info['buildSeconds']} s"
             f"{' (reused: the same inputs)' if info.get('reused') else ''};"
             f" archive {info['archive']}"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m coscheduling.localcluster.image_build",
                                     description=__doc__.split("\n\n")[0] if __doc__ else "")
    parser.add_argument("--context", type=Path, default=REPO / "build" / "image-context")
    parser.add_argument("--base", default="", help=f"base image (default: {DEBIAN_BASE}, "
                        "made here from Debian packages)")
    parser.add_argument("--out", type=Path, default=REPO / "build")
    parser.add_argument("--force", action="store_true", help="build even if the inputs match")
    args = parser.parse_args(argv)
    if not (args.context / "Dockerfile").is_file():
        print(f"image: {args.context} has no Dockerfile: run `make image-context` first",
              file=sys.stderr)
        return 2
    try:
        info = build_image(args.context, args.base or DEBIAN_BASE, args.out, force=args.force)
    except ImageBuildError as error:
        print(f"image: {error}", file=sys.stderr)
        return 1
    print(_report(info))
    return 0


if __name__ == "__main__":
    sys.exit(main())
