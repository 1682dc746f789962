"""End to end on real nodes: the scheduler's image as `make image` builds it, imported into
each real node's containerd (no registry is reachable), runs as a container that a kubelet
started, as the user and with the command line the image declares.

The nodes are the `real_nodes` fixture's (real-node-1 and real-node-2); the pods name one
in spec.nodeName, so nothing else schedules them.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.image_build import IMAGE
from coscheduling.localcluster.images import ImageArchive
from coscheduling.localcluster.realnodes import RealNodes, node_versions
from tests.integration.fixtures import kubectl
from tests.integration.kube import create_pod, wait_until
from tests.integration.test_image import ARCHIVE, image  # noqa: F401  (the fixture)

pytestmark = pytest.mark.integration
POD_TIMEOUT = 120.0


def _scheduler_image_pod(name: str, node: str, *command: str) -> dict[str, Any]:
    """A pod of the scheduler's image on `node`, running `command` once."""
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "terminationGracePeriodSeconds": 0,
                     "nodeName": node,
                     "containers": [{"name": "main", "image": IMAGE,
                                     "imagePullPolicy": "IfNotPresent",
                                     "command": list(command)}]}}


def _status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    status: dict[str, Any] = kube.get(
        f"/api/v1/namespaces/{namespace}/pods/{name}").get("status") or {}
    return status


def test_the_scheduler_image_runs_on_every_real_node(
    image: dict[str, Any], real_nodes: RealNodes, local_cluster: LocalCluster,  # noqa: F811
    kube: KubeClient, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    """Imported once, the image runs on each node as 65532 (the image's user, the chart's
    too), and its Python loads the scheduler with its native extensions (grpc, cel)."""
    started = time.monotonic()
    real_nodes.import_image(ImageArchive(f"docker.io/library/{IMAGE}", ARCHIVE))
    imported = time.monotonic() - started
    started = time.monotonic()
    for index, node in enumerate(real_nodes.names):
        create_pod(kube, namespace, _scheduler_image_pod(
            f"scheduler-image-{index}", node, "sh", "-c",
            "id -u; python -c 'import coscheduling.service.wiring, coscheduling.server' && "
            "coscheduling --help"))
    names = [f"scheduler-image-{i}" for i in range(len(real_nodes.names))]
    wait_until(lambda: all(_status(kube, namespace, n).get("phase") in ("Succeeded", "Failed")
                           for n in names),
               timeout=POD_TIMEOUT, what="the scheduler image's pods to end")
    ran = time.monotonic() - started
    for name in names:
        logs = kubectl(local_cluster, "-n", namespace, "logs", name).stdout
        assert _status(kube, namespace, name)["phase"] == "Succeeded", logs
        assert logs.splitlines()[0] == "65532", logs
        assert "run" in logs, logs
    with capsys.disabled():
        print(f"\nscheduler image {image['digest']} ({image['size'] / 2**20:.1f} MiB): "
              f"imported into {len(real_nodes.names)} nodes in {imported:.1f}s; its pods "
              f"ran and ended in {ran:.1f}s; {node_versions()}", file=sys.stderr)
