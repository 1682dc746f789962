"""The name containerd gives an imported image: the one the kubelet asks for (the CRI
normalizes a short reference to docker.io), so the chart's `coscheduling:0.1.0` is found."""

from __future__ import annotations

import pytest

from coscheduling.localcluster.image_build import kubelet_name


@pytest.mark.parametrize(("reference", "name"), [
    ("coscheduling:0.1.0", "docker.io/library/coscheduling:0.1.0"),
    ("team/coscheduling:0.1.0", "docker.io/team/coscheduling:0.1.0"),
    ("registry.example/coscheduling:0.1.0", "registry.example/coscheduling:0.1.0"),
    ("localhost/coscheduling:0.1.0", "localhost/coscheduling:0.1.0"),
    ("registry:5000/coscheduling:0.1.0", "registry:5000/coscheduling:0.1.0"),
])
def test_the_kubelets_name_of_an_image(reference: str, name: str) -> None:
    assert kubelet_name(reference) == name
