"""Upstream reference: kube-scheduler with the scheduler-plugins Coscheduling plugin.

Built once from the Go module proxy through the wrapper module in bench/upstream (same
replace pattern and the same Kubernetes release as the local control plane), cached by
version. Its PodGroup CRD is read at run time from the module's own manifests in the Go
module cache, so no copy of upstream files lives in this repository.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from coscheduling.localcluster.build import (
    BuildError,
    cache_dir,
    kubernetes_ldflags,
    required_version,
)

MODULE_DIR = Path(__file__).resolve().parent / "upstream"
PLUGINS_MODULE = "sigs.k8s.io/scheduler-plugins"
PLUGINS_VERSION = required_version(MODULE_DIR / "go.mod", PLUGINS_MODULE)
PACKAGE = f"{PLUGINS_MODULE}/cmd/scheduler"
# The profile upstream's docs show; the plugin's default Permit wait is 60 s, its sample
# configuration uses 10 s. Ours defaults to 60 s; see PERMIT_WAITING_TIME_SECONDS.
PROFILE = "default-scheduler"
PERMIT_WAITING_TIME_SECONDS = 60
# Tuned as its docs allow: a gang that failed waits this long before its members are tried
# again (the plugin's default, 0, retries a gang that cannot fit over and over).
POD_GROUP_BACKOFF_SECONDS = 20


def _log(message: str) -> None:
    print(f"[bench] {message}", file=sys.stderr, flush=True)


def binary_path() -> Path:
    return cache_dir() / "bin" / f"scheduler-plugins-v{PLUGINS_VERSION}" / "kube-scheduler"


# The Kubernetes release scheduler-plugins is built from (its wrapper module's, which need
# not be the local control plane's).
LIBRARIES_VERSION = required_version(MODULE_DIR / "go.mod", "k8s.io/kubernetes")


def _ldflags() -> str:
    """Stamp that release, as a release build would (else v0.0.0-master)."""
    return kubernetes_ldflags(LIBRARIES_VERSION)


def ensure_binary() -> Path:
    """The cached kube-scheduler, built from Go modules on first use (a few minutes)."""
    out = binary_path()
    if out.is_file() and os.access(out, os.X_OK):
        return out
    go = shutil.which("go")
    if go is None:
        raise BuildError(f"the Go toolchain is needed once to build {PACKAGE} "
                         f"v{PLUGINS_VERSION} into {out.parent}")
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".kube-scheduler.partial-{os.getpid()}")
    _log(f"building {PACKAGE} v{PLUGINS_VERSION} (k8s v{LIBRARIES_VERSION}) from Go modules...")
    started = time.monotonic()
    command = [go, "build", "-mod=readonly", "-ldflags", _ldflags(), "-o", str(partial),
               PACKAGE]
    try:
        result = subprocess.run(command, cwd=MODULE_DIR, env={**os.environ, "CGO_ENABLED": "0"},
                                capture_output=True, text=True, check=False)
        if result.returncode != 0 or not partial.is_file():
            tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-40:])
            raise BuildError(f"building {PACKAGE} failed (exit {result.returncode}):\n{tail}")
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    _log(f"built kube-scheduler in {time.monotonic() - started:.0f}s -> {out}")
    return out


def module_root() -> Path:
    """Where the Go module cache holds scheduler-plugins (downloaded by the build)."""
    result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", PLUGINS_MODULE],
                            cwd=MODULE_DIR, capture_output=True, text=True, check=False)
    directory = result.stdout.strip()
    if result.returncode != 0 or not directory:
        subprocess.run(["go", "mod", "download", PLUGINS_MODULE], cwd=MODULE_DIR, check=True)
        result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", PLUGINS_MODULE],
                                cwd=MODULE_DIR, capture_output=True, text=True, check=True)
        directory = result.stdout.strip()
    return Path(directory)


def crd_manifest() -> Path:
    """The PodGroup (scheduling.x-k8s.io/v1alpha1) CRD shipped in the module."""
    path = module_root() / "manifests" / "coscheduling" / "crd.yaml"
    if not path.is_file():
        raise BuildError(f"no PodGroup CRD at {path}")
    return path


def base_config(kubeconfig: Path, qps: float | None, burst: int | None) -> dict[str, Any]:
    """A kube-scheduler configuration without profiles: no leader election; client limits
    kube-scheduler's own (QPS 50, burst 100) unless ``qps`` is given."""
    connection: dict[str, Any] = {"kubeconfig": str(kubeconfig)}
    if qps is not None:
        connection.update(qps=qps, burst=burst)
    return {"apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration", "leaderElection": {"leaderElect": False},
            "clientConnection": connection}


def config(kubeconfig: Path, qps: float | None = None,
           burst: int | None = None) -> dict[str, Any]:
    """The configuration upstream's docs recommend, tuned as they allow.

    Coscheduling in multiPoint (PreFilter, PostFilter, Permit, Reserve) and as the only
    QueueSort; every other plugin and weight as in the default profile (which ours runs
    too); no leader election. PreFilter stays on: its README advises turning it off only
    for gangs below 5 members, and every workload here has gangs of 5 or more (or a mix).
    Client limits: kube-scheduler's own (QPS 50, burst 100) unless `qps` is given.
    """
    return {**base_config(kubeconfig, qps, burst), "profiles": [{
            "schedulerName": PROFILE,
            "plugins": {
                "multiPoint": {"enabled": [{"name": "Coscheduling"}]},
                "queueSort": {"enabled": [{"name": "Coscheduling"}],
                              "disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{"name": "Coscheduling",
                              "args": {"permitWaitingTimeSeconds":
                                       PERMIT_WAITING_TIME_SECONDS,
                                       "podGroupBackoffSeconds":
                                       POD_GROUP_BACKOFF_SECONDS}}],
        }]}


def command(binary: Path, kubeconfig: Path, workdir: Path, port: int,
            qps: float | None = None, burst: int | None = None) -> list[str]:
    """kube-scheduler's command line; /metrics is readable without credentials on loopback."""
    path = workdir / "upstream-scheduler.yaml"
    path.write_text(yaml.safe_dump(config(kubeconfig, qps, burst), sort_keys=False))
    return serving_flags(binary, path, workdir, port)


def serving_flags(binary: Path, config_path: Path, workdir: Path, port: int) -> list[str]:
    """A kube-scheduler's command line (this one and the native contender's)."""
    return [
        str(binary), f"--config={config_path}", "--bind-address=127.0.0.1",
        f"--secure-port={port}", f"--cert-dir={workdir / 'scheduler-serving'}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
        "-v=0",
    ]


if __name__ == "__main__":
    try:
        print(ensure_binary())
        print(crd_manifest())
    except BuildError as error:
        print(f"bench: {error}", file=sys.stderr)
        sys.exit(1)
