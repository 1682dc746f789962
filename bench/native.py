"""The native contender: kube-scheduler's own gang scheduling (KEP-4671, Workload API).

kube-scheduler of the local control plane's release (1.37.2), the default profile with
the GenericWorkload gate on (it adds the GangScheduling plugin to every extension point),
no leader election. Each gang is a `scheduling.k8s.io/v1beta1` PodGroup with
`schedulingPolicy.gang.minCount`; members name it in `spec.schedulingGroup.podGroupName`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from bench import upstream
from coscheduling.localcluster.build import KUBERNETES_VERSION, binary_dirs
from coscheduling.localcluster.workload_api import workload_api

PROFILE = "default-scheduler"


def binary_path() -> Path:
    """kube-scheduler as the local control plane's build leaves it (never built here)."""
    return binary_dirs()[0] / "kube-scheduler"


def available() -> str | None:
    """Why the native contender cannot run, or None if it can."""
    if not binary_path().is_file():
        return f"no {binary_path()} (kube-scheduler v{KUBERNETES_VERSION} is not built)"
    try:
        workload_api(KUBERNETES_VERSION)
    except ValueError as err:
        return str(err)
    if KUBERNETES_VERSION.split(".")[:2] < ["1", "37"]:
        return f"v{KUBERNETES_VERSION} has no PodGroup object (1.37 and later)"
    return None


def config(kubeconfig: Path, qps: float | None, burst: int | None) -> dict[str, Any]:
    """The default profile; client limits kube-scheduler's own unless `qps` is given."""
    return {**upstream.base_config(kubeconfig, qps, burst),
            "profiles": [{"schedulerName": PROFILE}]}


def command(kubeconfig: Path, workdir: Path, port: int, qps: float | None,
            burst: int | None) -> list[str]:
    path = workdir / "native-scheduler.yaml"
    path.write_text(yaml.safe_dump(config(kubeconfig, qps, burst), sort_keys=False))
    gates = workload_api(KUBERNETES_VERSION).feature_gates
    return [*upstream.serving_flags(binary_path(), path, workdir, port),
            f"--feature-gates={','.join(gates)}"]
