"""The real MPI operator (github.com/kubeflow/mpi-operator, MPIJob v2beta1), built from Go
modules and run against a LocalCluster without its gang-scheduling flag: its pods name the
scheduler of the MPIJob's templates and no group, so the gang is derived from the MPIJob.

It always elects a leader (a Lease in `--lock-namespace`) and serves its health check on
port 8080 of every interface (a constant in its code), so one runs at a time on a machine;
it is ready once it holds the Lease.
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

from .launcher import LocalCluster
from .operators import GoOperator, Log, OperatorBuild, OperatorProcess, apply_crd, ensure_operator

__all__ = ["MPI_OPERATOR", "MpiOperator", "ensure_mpi_operator"]

MPI_OPERATOR = GoOperator("mpi-operator", "github.com/kubeflow/mpi-operator",
                          "./cmd/mpi-operator", "0.8.0", "mpi-operator", "manifests/base",
                          "kubeflow.org_", "mpijob", in_module=True)
LOCK_NAMESPACE = "mpi-operator"
LEASE = f"/apis/coordination.k8s.io/v1/namespaces/{LOCK_NAMESPACE}/leases/mpi-operator"


def _default_log(message: str) -> None:
    print(f"[mpi-operator] {message}", flush=True)


def ensure_mpi_operator(log: Log = _default_log) -> OperatorBuild:
    """The cached MPI operator, built from the Go module proxy first if missing."""
    return ensure_operator(MPI_OPERATOR, log)


class MpiOperator(OperatorProcess):
    """One MPI operator process against `cluster`, with the MPIJob CRD applied."""

    title = "mpi-operator"

    def __init__(self, cluster: LocalCluster, workdir: Path, *,
                 build: OperatorBuild | None = None, log: Log = _default_log) -> None:
        super().__init__(workdir, log)
        self.cluster = cluster
        self.build = build

    def start(self) -> MpiOperator:
        build = self.build or ensure_mpi_operator(self.log)
        self.build = build
        kube = KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))
        try:
            apply_crd(kube, yaml.safe_load(build.crd_file("mpijob").read_text()))
            try:
                kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                                   "metadata": {"name": LOCK_NAMESPACE}})
            except ApiError as err:
                if not err.conflict:
                    raise
            self._spawn([str(build.binary), f"--kubeConfig={self.cluster.kubeconfig}",
                         f"--lock-namespace={LOCK_NAMESPACE}", "--kube-api-qps=50",
                         "--kube-api-burst=100"], dict(os.environ))
            self._wait(lambda: self._leading(kube), "it to hold its Lease")
        except BaseException:
            self.stop()
            raise
        finally:
            kube.close()
        self.log(f"mpi-operator ready (pid {self.pid}, log {self.log_path})")
        return self

    @staticmethod
    def _leading(kube: KubeClient) -> bool:
        try:
            lease = kube.get(LEASE)
        except ApiError as err:
            if err.not_found:
                return False
            raise
        return bool((lease.get("spec") or {}).get("holderIdentity"))

    def stop(self) -> None:
        """The process, then its Lease: a later operator then leads at once instead of
        after the dead one's Lease expires."""
        super().stop()
        kube = KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))
        try:
            kube.delete(LEASE)
        except ApiError as err:
            if not err.not_found:
                raise
        finally:
            kube.close()
