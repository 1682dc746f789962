"""The real KubeRay ray-operator, built from Go modules and run against a LocalCluster.

Its batch-scheduler integration is pointed at this scheduler through the scheduler-plugins
path (`--batch-scheduler=scheduler-plugins`): for a RayCluster labelled
`ray.io/gang-scheduling-enabled` it creates a `scheduling.x-k8s.io/v1alpha1` PodGroup named
after the cluster (minMember = workers + 1, minResources), labels the head and worker pods
`scheduling.x-k8s.io/pod-group: <cluster>` and sets their schedulerName to
`scheduler-plugins-scheduler`, one of the names this scheduler then answers to. The module's
go.mod has no replace directives, so `go install` builds it as it is published.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from coscheduling.cluster.client import ClientSettings, KubeClient

from .launcher import LocalCluster, free_ports, http_ok
from .operators import GoOperator, Log, OperatorBuild, OperatorProcess, apply_crd, ensure_operator

__all__ = ["GANG_LABEL", "KUBERAY", "KUBERAY_VERSION", "SCHEDULER_NAME", "RayOperator",
           "ensure_ray_operator"]

KUBERAY_VERSION = "1.5.0"
KUBERAY_MODULE = "github.com/ray-project/kuberay/ray-operator"
KUBERAY = GoOperator("ray-operator", KUBERAY_MODULE, KUBERAY_MODULE, KUBERAY_VERSION,
                     "ray-operator", "config/crd/bases", "ray.io_", "raycluster")
BATCH_SCHEDULER = "scheduler-plugins"
SCHEDULER_NAME = "scheduler-plugins-scheduler"
"""The schedulerName the operator gives the pods of a gang-scheduled RayCluster."""
GANG_LABEL = "ray.io/gang-scheduling-enabled"


def _default_log(message: str) -> None:
    print(f"[ray-operator] {message}", flush=True)


def ensure_ray_operator(log: Log = _default_log) -> OperatorBuild:
    """The cached ray-operator, installed from the Go module proxy first if missing."""
    return ensure_operator(KUBERAY, log)


class RayOperator(OperatorProcess):
    """One ray-operator process against `cluster`, with the RayCluster CRD applied."""

    title = "ray-operator"

    def __init__(self, cluster: LocalCluster, workdir: Path, *,
                 build: OperatorBuild | None = None, log: Log = _default_log,
                 batch_scheduler: str | None = BATCH_SCHEDULER) -> None:
        super().__init__(workdir, log)
        self.cluster = cluster
        self.build = build
        self.metrics_port, self.probe_port = free_ports(2)
        # None: no batch-scheduler integration (this scheduler derives the gang itself).
        self.batch_scheduler = batch_scheduler

    def argv(self, binary: Path) -> list[str]:
        flag = [f"--batch-scheduler={self.batch_scheduler}"] if self.batch_scheduler else []
        return [str(binary), *flag,
                "--enable-leader-election=false", "--log-stdout-encoder=console",
                f"--metrics-addr=127.0.0.1:{self.metrics_port}",
                f"--health-probe-bind-address=127.0.0.1:{self.probe_port}"]

    def start(self) -> RayOperator:
        build = self.build or ensure_ray_operator(self.log)
        self.build = build
        kube = KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))
        try:
            for kind in ("raycluster", "rayjob"):
                apply_crd(kube, yaml.safe_load(build.crd_file(kind).read_text()))
        finally:
            kube.close()
        self._spawn(self.argv(build.binary),
                    {**os.environ, "KUBECONFIG": str(self.cluster.kubeconfig)})
        try:
            self._wait(lambda: http_ok(f"http://127.0.0.1:{self.probe_port}/readyz", None),
                       "its readyz check to pass")
        except BaseException:
            self.stop()
            raise
        self.log(f"ray-operator ready (pid {self.pid}, log {self.log_path})")
        return self
