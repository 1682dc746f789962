"""A real local Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager).

Built once from pinned Go modules and started on loopback, for integration tests, the
demo and the benchmark, without Docker or a fake API server.
"""

from .build import Binaries, ensure_binaries
from .launcher import LocalCluster, stop_from_state

__all__ = ["Binaries", "LocalCluster", "ensure_binaries", "stop_from_state"]
