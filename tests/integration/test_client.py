"""The project's own client layer against the real API server: create, read back, watch,
bind."""

from __future__ import annotations

import contextlib
import threading
import uuid
from typing import Any

import pytest

from coscheduling.api.nodes import Node, parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.informer import Informer
from tests.integration.kube import exists, pod_body, wait_until


class Recorder:
    """Handler events of an informer, as (kind, key): a record's key or name, or a raw
    object's namespace/name."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.lock = threading.Lock()

    def on_add(self, record: Any) -> None:
        self._note("add", record)

    def on_update(self, old: Any, new: Any) -> None:
        self._note("update", new)

    def on_delete(self, record: Any) -> None:
        self._note("delete", record)

    def _note(self, kind: str, record: Any) -> None:
        with self.lock:
            self.events.append((kind, _key_of(record)))


def _key_of(record: Any) -> str:
    if isinstance(record, dict):
        meta = record["metadata"]
        return f"{meta['namespace']}/{meta['name']}"
    return str(getattr(record, "key", getattr(record, "name", "")))


def test_create_read_back_watch_and_bind(kube: KubeClient) -> None:
    suffix = uuid.uuid4().hex[:8]
    node_name, namespace = f"client-node-{suffix}", f"client-{suffix}"
    nodes = Recorder()
    informer = Informer[Node](kube, "/api/v1/nodes", parse_node, lambda n: n.name, nodes,
                              name="test-nodes")
    informer.start()
    try:
        assert informer.synced.wait(30)
        kube.create("/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": node_name, "labels": {"zone": "a"}},
            "status": {"capacity": {"cpu": "4", "memory": "8Gi", "pods": "10",
                                    "nvidia.com/gpu": "2"},
                       "allocatable": {"cpu": "3500m", "memory": "7Gi", "pods": "10",
                                       "nvidia.com/gpu": "2"}}})
        node = parse_node(kube.get(f"/api/v1/nodes/{node_name}"))
        assert node.allocatable == {"cpu": 3500, "memory": 7 * 2**30, "pods": 10,
                                    "nvidia.com/gpu": 2}
        assert node.labels["zone"] == "a"
        wait_until(lambda: ("add", node_name) in nodes.events, what="the watch's ADDED event")
        assert informer.store[node_name].allocatable["cpu"] == 3500

        kube.create("/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace",
                                           "metadata": {"name": namespace}})
        wait_until(lambda: exists(kube, f"/api/v1/namespaces/{namespace}/serviceaccounts/"
                                         "default"), what="default ServiceAccount")
        kube.create(f"/api/v1/namespaces/{namespace}/pods",
                    pod_body("p", scheduler="nobody", cpu="250m", memory="64Mi",
                             group="g"))
        pod = parse_pod(kube.get(f"/api/v1/namespaces/{namespace}/pods/p"))
        assert pod.requests == {"cpu": 250, "memory": 64 * 2**20}
        assert pod.group_key == f"{namespace}/g" and not pod.node_name

        kube.bind(namespace, "p", pod.uid, node_name)  # the raw Binding: no client bug here
        bound: Pod = parse_pod(kube.get(f"/api/v1/namespaces/{namespace}/pods/p"))
        assert bound.node_name == node_name
        with pytest.raises(ApiError) as twice:
            kube.bind(namespace, "p", pod.uid, node_name)
        assert twice.value.conflict, twice.value

        kube.delete(f"/api/v1/nodes/{node_name}")
        wait_until(lambda: ("delete", node_name) in nodes.events, what="the DELETED event")
    finally:
        informer.stop()
        for path in (f"/api/v1/namespaces/{namespace}", f"/api/v1/nodes/{node_name}"):
            with contextlib.suppress(ApiError):
                kube.delete(path)


def test_errors_name_the_status(kube: KubeClient) -> None:
    with pytest.raises(ApiError) as missing:
        kube.get("/api/v1/namespaces/does-not-exist-here")
    assert missing.value.not_found and "not found" in str(missing.value)
