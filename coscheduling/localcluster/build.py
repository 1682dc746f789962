"""Build etcd, kube-apiserver and kube-controller-manager from pinned Go modules.

The binaries are built once into a per-version cache directory, so tests, the demo and
the benchmark run a real control plane without Docker or downloaded release archives:
only the Go module proxy is needed, and only on the first run.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "Binaries",
    "BuildError",
    "GoNotFoundError",
    "binary_dirs",
    "cache_dir",
    "ensure_binaries",
    "required_version",
]

Log = Callable[[str], None]

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"


class BuildError(RuntimeError):
    """A control-plane binary could not be built."""


class GoNotFoundError(BuildError):
    """The Go toolchain needed for the first build is not installed."""


def required_version(gomod: Path, module: str) -> str:
    """Return the version of `module` that `gomod` requires (without the leading v).

    Reading it from go.mod keeps one source of truth: bumping go.mod bumps the cache key.
    """
    pattern = rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)"
    match = re.search(pattern, gomod.read_text(), re.MULTILINE)
    if match is None:
        raise BuildError(f"{gomod} does not require {module}")
    return match.group(1)


KUBERNETES_VERSION = required_version(GOMOD_DIR / "kubernetes" / "go.mod", KUBERNETES_MODULE)
ETCD_VERSION = required_version(GOMOD_DIR / "etcd" / "go.mod", ETCD_MODULE)


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the three control-plane programs."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path


@dataclass(frozen=True)
class _Target:
    """One program to build: its Go package, wrapper module and destination."""

    name: str
    package: str
    module_dir: str
    version: str
    out: Path
    ldflags: str


def _default_log(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def cache_dir() -> Path:
    """Root of the build cache: $COSCHEDULING_CACHE_DIR or ~/.cache/coscheduling."""
    override = os.environ.get("COSCHEDULING_CACHE_DIR")
    root = Path(override).expanduser() if override else Path.home() / ".cache" / "coscheduling"
    return root.absolute()


def binary_dirs() -> tuple[Path, Path]:
    """(kubernetes dir, etcd dir), keyed by version so a version bump rebuilds."""
    root = cache_dir() / "bin"
    return root / f"kubernetes-v{KUBERNETES_VERSION}", root / f"etcd-v{ETCD_VERSION}"


def _kubernetes_ldflags() -> str:
    """Stamp the release version that `hack/lib/version.sh` would stamp.

    A plain `go build` reports v0.0.0-master, which breaks /version and client skew checks.
    """
    major, minor = KUBERNETES_VERSION.split(".")[:2]
    values = {
        "gitVersion": f"v{KUBERNETES_VERSION}",
        "gitMajor": major,
        "gitMinor": minor,
        "gitTreeState": "clean",
    }
    stamps = [
        f"-X k8s.io/{pkg}/version.{key}={value}"
        for pkg in ("component-base", "client-go/pkg")
        for key, value in values.items()
    ]
    return " ".join(["-s", "-w", *stamps])


def _targets() -> list[_Target]:
    kube_dir, etcd_dir = binary_dirs()
    kube_flags = _kubernetes_ldflags()
    return [
        _Target("etcd", ETCD_MODULE, "etcd", ETCD_VERSION, etcd_dir / "etcd", "-s -w"),
        *(
            _Target(
                name,
                f"{KUBERNETES_MODULE}/cmd/{name}",
                "kubernetes",
                KUBERNETES_VERSION,
                kube_dir / name,
                kube_flags,
            )
            for name in ("kube-apiserver", "kube-controller-manager")
        ),
    ]


def _binaries_from(targets: list[_Target]) -> Binaries:
    by_name = {target.name: target.out for target in targets}
    return Binaries(
        etcd=by_name["etcd"],
        kube_apiserver=by_name["kube-apiserver"],
        kube_controller_manager=by_name["kube-controller-manager"],
    )


def _is_built(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_binaries(log: Log = _default_log) -> Binaries:
    """Return the cached binaries, building the missing ones from Go modules first."""
    targets = _targets()
    if all(_is_built(t.out) for t in targets):
        return _binaries_from(targets)
    go = _find_go()
    lock_path = cache_dir() / "bin" / ".build.lock"
    with _exclusive_lock(lock_path, log):
        # Another process may have built some of them while we waited for the lock.
        for target in targets:
            if not _is_built(target.out):
                _build(go, target, log)
    return _binaries_from(targets)


def _find_go() -> str:
    go = shutil.which("go")
    if go is None:
        kube_dir, etcd_dir = binary_dirs()
        raise GoNotFoundError(
            "the Go toolchain ('go') is not on PATH. It is needed once to build "
            f"etcd v{ETCD_VERSION} and kube-apiserver/kube-controller-manager "
            f"v{KUBERNETES_VERSION} from Go modules into {etcd_dir} and {kube_dir}. "
            f"Install Go (at least the version on the `go` line of {GOMOD_DIR}/*/go.mod) "
            "and put it on PATH."
        )
    return go


@contextmanager
def _exclusive_lock(path: Path, log: Log) -> Iterator[None]:
    """Hold an fcntl lock so concurrent test processes build each binary only once."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log(f"waiting for another process to finish building (lock {path})...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


@contextmanager
def _module_source(module_dir: str) -> Iterator[Path]:
    """The wrapper module dir, copied to a temp dir when installed read-only."""
    source = GOMOD_DIR / module_dir
    if os.access(source, os.W_OK):
        yield source
        return
    with tempfile.TemporaryDirectory(prefix=f"coscheduling-gomod-{module_dir}-") as tmp:
        copy = Path(tmp) / module_dir
        shutil.copytree(source, copy)
        yield copy


def _build(go: str, target: _Target, log: Log) -> None:
    """Build one binary to a temporary name, then rename it into place atomically."""
    target.out.parent.mkdir(parents=True, exist_ok=True)
    partial = target.out.with_name(f".{target.name}.partial-{os.getpid()}")
    what = f"{target.name} v{target.version}"
    log(f"building {what} from Go modules (first run only, several minutes)...")
    started = time.monotonic()
    env = {**os.environ, "CGO_ENABLED": "0"}
    command = [
        go,
        "build",
        "-mod=readonly",
        "-ldflags",
        target.ldflags,
        "-o",
        str(partial),
        target.package,
    ]
    try:
        with _module_source(target.module_dir) as source:
            result = subprocess.run(
                command, cwd=source, env=env, capture_output=True, text=True, check=False
            )
        if result.returncode != 0 or not partial.is_file():
            output = (result.stdout + result.stderr).strip()
            tail = "\n".join(output.splitlines()[-40:])
            raise BuildError(
                f"building {target.name} failed (exit {result.returncode}): "
                f"{' '.join(command)}\n{tail}"
            )
        os.replace(partial, target.out)
    finally:
        partial.unlink(missing_ok=True)
    log(f"built {what} in {time.monotonic() - started:.0f}s -> {target.out}")

