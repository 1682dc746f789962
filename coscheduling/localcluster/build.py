"""Build etcd, kube-apiserver, kube-controller-manager and kube-scheduler from pinned Go modules.

The binaries are built once into a per-version cache directory, so tests, the demo and
the benchmark run a real control plane without Docker or downloaded release archives:
only the Go module proxy is needed, and only on the first run. The Kubernetes release is a
knob ($COSCHEDULING_KUBERNETES_VERSION): one wrapper module per release under gomod/.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "DEFAULT_KUBERNETES_VERSION",
    "ETCD_VERSION",
    "KUBERNETES_VERSION",
    "KUBERNETES_VERSION_VAR",
    "Binaries",
    "BuildError",
    "GoNotFoundError",
    "KubernetesVersionError",
    "available_kubernetes_versions",
    "binary_dirs",
    "cache_dir",
    "ensure_binaries",
    "ensure_helm",
    "ensure_krew",
    "ensure_kube_proxy",
    "ensure_kubelet",
    "ensure_quantitycheck",
    "exclusive_lock",
    "find_go",
    "kubernetes_ldflags",
    "required_version",
    "selected_kubernetes_version",
]

Log = Callable[[str], None]

GOMOD_DIR = Path(__file__).resolve().parent / "gomod"
KUBERNETES_MODULE = "k8s.io/kubernetes"
ETCD_MODULE = "go.etcd.io/etcd/server/v3"
KUBERNETES_VERSION_VAR = "COSCHEDULING_KUBERNETES_VERSION"
DEFAULT_KUBERNETES_VERSION = "1.37.2"
KUBERNETES_PROGRAMS = ("kube-apiserver", "kube-controller-manager", "kube-scheduler")


class BuildError(RuntimeError):
    """A control-plane binary could not be built."""


class GoNotFoundError(BuildError):
    """The Go toolchain needed for the first build is not installed."""


class KubernetesVersionError(BuildError, ValueError):
    """$COSCHEDULING_KUBERNETES_VERSION names a release with no wrapper module here."""


def required_version(gomod: Path, module: str) -> str:
    """Return the version of `module` that `gomod` requires (without the leading v).

    Reading it from go.mod keeps one source of truth: bumping go.mod bumps the cache key.
    """
    pattern = rf"^\s*(?:require\s+)?{re.escape(module)}\s+v(\S+)"
    match = re.search(pattern, gomod.read_text(), re.MULTILINE)
    if match is None:
        raise BuildError(f"{gomod} does not require {module}")
    return match.group(1)


def available_kubernetes_versions() -> dict[str, str]:
    """Kubernetes release -> its wrapper module dir (gomod/kubernetes-<minor>), from go.mod."""
    return {
        required_version(module / "go.mod", KUBERNETES_MODULE): module.name
        for module in sorted(GOMOD_DIR.glob("kubernetes-*"))
    }


def selected_kubernetes_version(environ: Mapping[str, str] | None = None) -> str:
    """The release $COSCHEDULING_KUBERNETES_VERSION picks (full or minor, `v` optional).

    Unset or empty means DEFAULT_KUBERNETES_VERSION; anything without a wrapper module is
    refused with the choices, rather than silently running another release.
    """
    raw = (os.environ if environ is None else environ).get(KUBERNETES_VERSION_VAR, "")
    wanted = raw.strip().removeprefix("v") or DEFAULT_KUBERNETES_VERSION
    available = available_kubernetes_versions()
    by_minor = {".".join(version.split(".")[:2]): version for version in available}
    if wanted in available:
        return wanted
    if wanted in by_minor:
        return by_minor[wanted]
    raise KubernetesVersionError(
        f"{KUBERNETES_VERSION_VAR}={raw!r} is not a Kubernetes release this project can "
        f"build; available: {', '.join(sorted(available))} (or their minor, e.g. "
        f"{next(iter(sorted(by_minor)), '1.x')}); unset it for the default "
        f"{DEFAULT_KUBERNETES_VERSION}"
    )


KUBERNETES_VERSION = selected_kubernetes_version()
KUBERNETES_MODULE_DIR = available_kubernetes_versions()[KUBERNETES_VERSION]
ETCD_VERSION = required_version(GOMOD_DIR / "etcd" / "go.mod", ETCD_MODULE)


@dataclass(frozen=True)
class Binaries:
    """Absolute paths of the control-plane programs (kube-scheduler: the native contender)."""

    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubernetes_version: str = KUBERNETES_VERSION


@dataclass(frozen=True)
class _Target:
    """One program to build: its Go package, wrapper module and destination."""

    name: str
    package: str
    module_dir: str
    version: str
    out: Path
    ldflags: str
    tags: str = ""


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


def kubernetes_ldflags(version: str | None = None) -> str:
    """Stamp the release version that `hack/lib/version.sh` would stamp.

    A plain `go build` reports v0.0.0-master, which breaks /version and client skew checks.
    """
    version = version or KUBERNETES_VERSION
    major, minor = version.split(".")[:2]
    values = {
        "gitVersion": f"v{version}",
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
    kube_flags = kubernetes_ldflags()
    return [
        _Target("etcd", ETCD_MODULE, "etcd", ETCD_VERSION, etcd_dir / "etcd", "-s -w"),
        *(
            _Target(
                name,
                f"{KUBERNETES_MODULE}/cmd/{name}",
                KUBERNETES_MODULE_DIR,
                KUBERNETES_VERSION,
                kube_dir / name,
                kube_flags,
            )
            for name in KUBERNETES_PROGRAMS
        ),
    ]


def _binaries_from(targets: list[_Target]) -> Binaries:
    by_name = {target.name: target.out for target in targets}
    return Binaries(
        etcd=by_name["etcd"],
        kube_apiserver=by_name["kube-apiserver"],
        kube_controller_manager=by_name["kube-controller-manager"],
        kube_scheduler=by_name["kube-scheduler"],
        kubernetes_version=KUBERNETES_VERSION,
    )


def _is_built(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def ensure_binaries(log: Log = _default_log) -> Binaries:
    """Return the cached binaries, building the missing ones from Go modules first."""
    targets = _targets()
    if all(_is_built(t.out) for t in targets):
        return _binaries_from(targets)
    kube_dir, etcd_dir = binary_dirs()
    go = find_go(
        f"etcd v{ETCD_VERSION} and {'/'.join(KUBERNETES_PROGRAMS)} v{KUBERNETES_VERSION}",
        f"{etcd_dir} and {kube_dir}",
    )
    with exclusive_lock(cache_dir() / "bin" / ".build.lock", log):
        # Another process may have built some of them while we waited for the lock.
        for target in targets:
            if not _is_built(target.out):
                _build(go, target, log)
    return _binaries_from(targets)


def find_go(what: str, destination: object) -> str:
    """The `go` command, or a clear error saying what it is needed for, once."""
    go = shutil.which("go")
    if go is None:
        raise GoNotFoundError(
            f"the Go toolchain ('go') is not on PATH. It is needed once to build {what} "
            f"from Go modules into {destination}. Install Go (at least the version on the "
            f"`go` line of {GOMOD_DIR}/*/go.mod) and put it on PATH."
        )
    return go


@contextmanager
def exclusive_lock(path: Path, log: Log) -> Iterator[None]:
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
        *([f"-tags={target.tags}"] if target.tags else []),
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



HELM_MODULE = "helm.sh/helm/v3"
HELM_VERSION = required_version(GOMOD_DIR / "helm" / "go.mod", HELM_MODULE)


def ensure_helm(log: Log = _default_log) -> Path:
    """The helm client (for the chart's tests), built once from Go modules like the control
    plane: no release archive is downloaded."""
    out = cache_dir() / "bin" / f"helm-v{HELM_VERSION}" / "helm"
    stamp = f"-s -w -X {HELM_MODULE}/internal/version.version=v{HELM_VERSION}"
    target = _Target("helm", f"{HELM_MODULE}/cmd/helm", "helm", HELM_VERSION, out, stamp)
    return _ensure_tool(target, log)


KREW_MODULE = "sigs.k8s.io/krew"
KREW_VERSION = required_version(GOMOD_DIR / "krew" / "go.mod", KREW_MODULE)


def ensure_krew(log: Log = _default_log) -> Path:
    """krew (for the test that installs deploy/krew/gang.yaml from a local archive), built
    once from Go modules like helm."""
    out = cache_dir() / "bin" / f"krew-v{KREW_VERSION}" / "krew"
    stamp = f"-s -w -X {KREW_MODULE}/internal/version.gitTag=v{KREW_VERSION}"
    target = _Target("krew", f"{KREW_MODULE}/cmd/krew", "krew", KREW_VERSION, out, stamp)
    return _ensure_tool(target, log)


APIMACHINERY_MODULE = "k8s.io/apimachinery"


def ensure_quantitycheck(log: Log = _default_log) -> Path:
    """The API server's own quantity parser as a command (gomod/quantitycheck), for the
    differential test of coscheduling.api.quantity. Built once like the control plane; the
    cache key holds apimachinery's version and a hash of the module, so an edit rebuilds."""
    source = GOMOD_DIR / "quantitycheck"
    version = required_version(source / "go.mod", APIMACHINERY_MODULE)
    files = sorted(path for path in source.iterdir() if path.is_file())
    digest = hashlib.sha256(b"".join(path.read_bytes() for path in files)).hexdigest()[:12]
    out = cache_dir() / "bin" / f"quantitycheck-v{version}-{digest}" / "quantitycheck"
    return _ensure_tool(_Target("quantitycheck", ".", source.name, version, out, "-s -w"), log)


def _ensure_tool(target: _Target, log: Log) -> Path:
    """``target.out``, built first (under the build lock) when it is missing."""
    if not _is_built(target.out):
        go = find_go(f"{target.name} v{target.version}", target.out.parent)
        with exclusive_lock(cache_dir() / "bin" / ".build.lock", log):
            if not _is_built(target.out):
                _build(go, target, log)
    return target.out


def ensure_kube_proxy(log: Log = _default_log) -> Path:
    """kube-proxy of the control plane's release (iptables mode on this machine), so pods on
    real nodes reach Services, the API server's `kubernetes` Service among them; built once
    from Go modules like the control plane, next to its binaries."""
    kube_dir, _ = binary_dirs()
    target = _Target("kube-proxy", f"{KUBERNETES_MODULE}/cmd/kube-proxy", KUBERNETES_MODULE_DIR,
                     KUBERNETES_VERSION, kube_dir / "kube-proxy", kubernetes_ldflags())
    return _ensure_tool(target, log)


KUBELET_VERSION = required_version(GOMOD_DIR / "kubelet" / "go.mod", KUBERNETES_MODULE)


def ensure_kubelet(log: Log = _default_log) -> Path:
    """The kubelet of the real local nodes (gomod/kubelet: a release Debian's containerd
    1.x can serve), built once from Go modules like the control plane."""
    out = cache_dir() / "bin" / f"kubelet-v{KUBELET_VERSION}" / "kubelet"
    target = _Target("kubelet", f"{KUBERNETES_MODULE}/cmd/kubelet", "kubelet",
                     KUBELET_VERSION, out, kubernetes_ldflags(KUBELET_VERSION))
    return _ensure_tool(target, log)


DRA_EXAMPLE_DRIVER_MODULE = "sigs.k8s.io/dra-example-driver"
DRA_EXAMPLE_DRIVER_VERSION = required_version(
    GOMOD_DIR / "dra-example-driver" / "go.mod", DRA_EXAMPLE_DRIVER_MODULE)


def ensure_dra_example_driver(log: Log = _default_log) -> Path:
    """The kubelet plugin of Kubernetes' DRA example driver (gomod/dra-example-driver), which
    a real node runs to publish simulated GPUs and prepare them for containers; built once
    from Go modules like the control plane."""
    name = "dra-example-kubeletplugin"
    out = cache_dir() / "bin" / f"dra-example-driver-v{DRA_EXAMPLE_DRIVER_VERSION}" / name
    target = _Target(name, f"{DRA_EXAMPLE_DRIVER_MODULE}/cmd/{name}", "dra-example-driver",
                     DRA_EXAMPLE_DRIVER_VERSION, out, "-s -w")
    return _ensure_tool(target, log)


CONTAINERD_MODULE = "github.com/containerd/containerd"
CONTAINERD_VERSION = required_version(GOMOD_DIR / "containerd" / "go.mod", CONTAINERD_MODULE)


def ensure_containerd(log: Log = _default_log) -> Path:
    """containerd 1.7 (gomod/containerd) for real nodes that run DRA pods: Debian 12's 1.6
    has no CDI, so it would start their containers without the devices a driver prepared.
    Built once from Go modules, without the cgo-only snapshotters (btrfs, devmapper)."""
    out = cache_dir() / "bin" / f"containerd-v{CONTAINERD_VERSION}" / "containerd"
    stamp = f"-s -w -X {CONTAINERD_MODULE}/version.Version=v{CONTAINERD_VERSION}"
    target = _Target("containerd", f"{CONTAINERD_MODULE}/cmd/containerd", "containerd",
                     CONTAINERD_VERSION, out, stamp, tags="no_btrfs no_devmapper no_zfs")
    return _ensure_tool(target, log)
