"""The flags that serve the native gang API, per supported Kubernetes release."""

from __future__ import annotations

import pytest

from coscheduling.localcluster.build import available_kubernetes_versions
from coscheduling.localcluster.workload_api import workload_api


@pytest.mark.parametrize(
    ("version", "apiserver", "pod_field"),
    [
        (
            "1.35.8",
            ["--feature-gates=GenericWorkload=true",
             "--runtime-config=scheduling.k8s.io/v1alpha1=true"],
            "spec.workloadRef",
        ),
        (
            "v1.37.2",
            ["--feature-gates=GenericWorkload=true",
             "--runtime-config=scheduling.k8s.io/v1beta1=true"],
            "spec.schedulingGroup.podGroupName",
        ),
    ],
)
def test_flags_per_release(version: str, apiserver: list[str], pod_field: str) -> None:
    api = workload_api(version)
    assert api.apiserver_flags() == apiserver
    assert api.controller_manager_flags() == ["--feature-gates=GenericWorkload=true"]
    assert api.pod_field == pod_field


def test_every_buildable_release_has_flags() -> None:
    for version in available_kubernetes_versions():
        assert workload_api(version).group_version.startswith("scheduling.k8s.io/")


@pytest.mark.parametrize("version", ["1.34.0", "2.0", ""])
def test_unknown_release_is_a_clear_error(version: str) -> None:
    with pytest.raises(ValueError, match=r"kubernetes_version .*known minors: 1\.35, 1\.37"):
        workload_api(version)
