"""How each supported Kubernetes release serves the native gang API (KEP-4671).

The local control plane turns it on so the native group source is tested against a real
API server. The gate is off by default in every release so far, and the API version is
not served by default either, so both flags are needed. Read from the release's own
sources: pkg/features/kube_features.go, pkg/controlplane/instance.go and
pkg/registry/scheduling/rest/storage_scheduling.go.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["WorkloadAPI", "workload_api"]


@dataclass(frozen=True)
class WorkloadAPI:
    """Flags that serve `scheduling.k8s.io` Workload (and PodGroup, 1.36+) in one release."""

    group_version: str
    feature_gates: tuple[str, ...]
    pod_field: str

    @property
    def runtime_config(self) -> str:
        return f"{self.group_version}=true"

    def apiserver_flags(self) -> list[str]:
        return [f"--feature-gates={','.join(self.feature_gates)}",
                f"--runtime-config={self.runtime_config}"]

    def controller_manager_flags(self) -> list[str]:
        """The same gates, so the controller manager sees the API the server serves."""
        return [f"--feature-gates={','.join(self.feature_gates)}"]


_BY_MINOR = {
    # Alpha: Workload only; pods point at it with spec.workloadRef.
    "1.35": WorkloadAPI("scheduling.k8s.io/v1alpha1", ("GenericWorkload=true",),
                        "spec.workloadRef"),
    # Beta (still off by default): Workload is a template, PodGroup its own object with a
    # status subresource; pods name their PodGroup.
    "1.37": WorkloadAPI("scheduling.k8s.io/v1beta1", ("GenericWorkload=true",),
                        "spec.schedulingGroup.podGroupName"),
}


def workload_api(kubernetes_version: str) -> WorkloadAPI:
    """The native gang API of `kubernetes_version` (e.g. "1.37.2")."""
    minor = ".".join(kubernetes_version.removeprefix("v").split(".")[:2])
    try:
        return _BY_MINOR[minor]
    except KeyError:
        raise ValueError(
            f"kubernetes_version {kubernetes_version!r}: no known Workload API flags; "
            f"known minors: {', '.join(sorted(_BY_MINOR))}"
        ) from None
