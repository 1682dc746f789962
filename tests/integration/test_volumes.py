"""Volumes against a real kube-apiserver and the PV binder controller (issue 14, point 3):
claims decide where pods go, and the scheduler binds them before the pods.

Every pod carries a node selector on a label only this test's nodes have; storage classes
and volumes (cluster-wide objects) are named after the test's pool and removed afterwards.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coscheduling.cluster.client import ApiError, KubeClient
from tests.integration.kube import create_pod, create_podgroup, placement, wait_until
from tests.integration.test_pod_constraints import StartScheduler, _pod, _pool
from tests.integration.test_pod_semantics import _refused

HOST = "kubernetes.io/hostname"
STORAGE = "/apis/storage.k8s.io/v1/storageclasses"
VOLUMES = "/api/v1/persistentvolumes"
SELECTED_NODE = "volume.kubernetes.io/selected-node"


class Storage:
    """Creates classes, local volumes and claims; removes the cluster-wide ones after."""

    def __init__(self, kube: KubeClient, namespace: str, pool: str) -> None:
        self.kube, self.namespace, self.pool = kube, namespace, pool
        self.created: list[str] = []

    def storage_class(self, provisioner: str = "kubernetes.io/no-provisioner") -> str:
        name = f"wffc-{self.pool}"
        self.kube.create(STORAGE, {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
                                   "metadata": {"name": name}, "provisioner": provisioner,
                                   "volumeBindingMode": "WaitForFirstConsumer"})
        self.created.append(f"{STORAGE}/{name}")
        return name

    def local_volume(self, name: str, node: str, cls: str, size: str = "1Gi",
                     claim: str = "") -> str:
        name = f"{name}-{self.pool}"
        spec: dict[str, Any] = {
            "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "storageClassName": cls, "persistentVolumeReclaimPolicy": "Retain",
            "local": {"path": f"/mnt/{name}"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": HOST, "operator": "In", "values": [node]}]}]}},
        }
        if claim:
            spec["claimRef"] = {"namespace": self.namespace, "name": claim}
        self.kube.create(VOLUMES, {"apiVersion": "v1", "kind": "PersistentVolume",
                                   "metadata": {"name": name}, "spec": spec})
        self.created.append(f"{VOLUMES}/{name}")
        return name

    def claim(self, name: str, cls: str, size: str = "1Gi", volume: str = "") -> None:
        spec: dict[str, Any] = {"accessModes": ["ReadWriteOnce"], "storageClassName": cls,
                                "resources": {"requests": {"storage": size}}}
        if volume:
            spec["volumeName"] = volume
        self.kube.create(f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims",
                         {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                          "metadata": {"name": name}, "spec": spec})

    def read_claim(self, name: str) -> dict[str, Any]:
        return self.kube.get(
            f"/api/v1/namespaces/{self.namespace}/persistentvolumeclaims/{name}")

    def bound_to(self, name: str) -> str:
        """The volume the claim is Bound to, or ""."""
        claim = self.read_claim(name)
        if (claim.get("status") or {}).get("phase") != "Bound":
            return ""
        return str(claim["spec"].get("volumeName") or "")

    def pod(self, name: str, scheduler: str, claim: str, group: str = "") -> None:
        """A pod of this test's pool whose volume ``data`` is the claim ``claim``."""
        create_pod(self.kube, self.namespace, _pod(
            name, scheduler, self.pool, group=group,
            volumes=[{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]))

    def placed(self, name: str) -> str:
        """The node the pod is bound to, once it is."""
        return str(wait_until(lambda: placement(self.kube, self.namespace).get(name),
                              what=f"{name} bound"))

    def cleanup(self) -> None:
        for path in reversed(self.created):
            try:  # no kubelet unmounts anything here: let protection finalizers go
                self.kube.patch(path, {"metadata": {"finalizers": None}})
                self.kube.delete(path)
            except ApiError as err:
                if not err.not_found:
                    raise


@pytest.fixture
def storage(kube: KubeClient, namespace: str) -> Iterator[Storage]:
    made = Storage(kube, namespace, _pool())
    yield made
    made.cleanup()


def _nodes(make_node: Callable[..., Any], pool: str, count: int) -> list[str]:
    names = [f"vol-{pool}-{i}" for i in range(count)]
    for name in names:
        make_node(name, labels={"test-pool": pool, HOST: name})
    return names


def test_wait_for_first_consumer_claim_follows_its_local_volume_and_binds_to_it(
        kube: KubeClient, namespace: str, make_node: Any, storage: Storage,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = storage.pool
    nodes = _nodes(make_node, pool, 3)
    cls = storage.storage_class()
    volume = storage.local_volume("local", nodes[1], cls)
    storage.claim("data", cls)
    storage.pod("app", sched.name, "data")
    assert storage.placed("app") == nodes[1]
    wait_until(lambda: storage.bound_to("data") == volume, what=f"data bound to {volume}")


def test_pod_whose_claim_is_bound_to_a_local_volume_never_goes_to_another_node(
        kube: KubeClient, namespace: str, make_node: Any, storage: Storage,
        start_scheduler: StartScheduler) -> None:
    pool = storage.pool
    home = f"vol-{pool}-home"
    make_node(home, labels={"test-pool": pool, HOST: home}, unschedulable=True)
    other = _nodes(make_node, pool, 2)
    cls = storage.storage_class()
    volume = storage.local_volume("home", home, cls, claim="data")
    storage.claim("data", cls, volume=volume)
    wait_until(lambda: storage.bound_to("data") == volume, what="the binder binds data")
    sched = start_scheduler()
    storage.pod("app", sched.name, "data")
    _refused(kube, namespace, "app", f"{len(other)} node(s) had volume node affinity "
             "conflict", exact=False)
    # The volume's node takes pods again: the pod goes there, and only there.
    kube.patch(f"/api/v1/nodes/{home}", {"spec": {"unschedulable": False}})
    assert storage.placed("app") == home


def test_pod_with_a_missing_claim_waits_and_is_placed_once_the_claim_exists(
        kube: KubeClient, namespace: str, make_node: Any, storage: Storage,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = storage.pool
    nodes = _nodes(make_node, pool, 2)
    cls = storage.storage_class()
    volume = storage.local_volume("late", nodes[0], cls)
    storage.pod("app", sched.name, "late-data")
    _refused(kube, namespace, "app", 'persistentvolumeclaim "late-data" not found')
    storage.claim("late-data", cls)
    assert storage.placed("app") == nodes[0]
    wait_until(lambda: storage.bound_to("late-data") == volume, what="late-data bound")


def test_gang_whose_claims_fit_on_one_node_lands_there_with_each_claim_bound(
        kube: KubeClient, namespace: str, make_node: Any, storage: Storage,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    pool = storage.pool
    nodes = _nodes(make_node, pool, 3)
    cls = storage.storage_class()
    volumes = {storage.local_volume(f"gang-{i}", nodes[2], cls) for i in range(2)}
    create_podgroup(kube, namespace, "gang", 2)
    for i in range(2):
        storage.claim(f"data-{i}", cls)
        storage.pod(f"gang-{i}", sched.name, f"data-{i}", group="gang")
    assert {storage.placed(f"gang-{i}") for i in range(2)} == {nodes[2]}
    wait_until(lambda: {storage.bound_to(f"data-{i}") for i in range(2)} == volumes,
               what="each claim bound to its own local volume")


def test_claim_to_provision_gets_the_selected_node_and_the_pod_waits_for_it(
        kube: KubeClient, namespace: str, make_node: Any, storage: Storage,
        start_scheduler: StartScheduler) -> None:
    """No static volume fits: the class's provisioner (played by this test) is told the
    node through the claim's annotation; the pod is bound once the claim is."""
    sched = start_scheduler()
    pool = storage.pool
    nodes = _nodes(make_node, pool, 2)
    cls = storage.storage_class(provisioner=f"example.com/{pool}")
    storage.claim("fresh", cls)
    storage.pod("app", sched.name, "fresh")

    def selected() -> str:
        annotations = storage.read_claim("fresh")["metadata"].get("annotations") or {}
        return str(annotations.get(SELECTED_NODE) or "")

    node = wait_until(selected, what="the selected-node annotation")
    assert node in nodes
    assert placement(kube, namespace)["app"] == ""  # not before its claim is bound
    volume = storage.local_volume("provisioned", node, cls, claim="fresh")
    assert storage.placed("app") == node
    assert storage.bound_to("fresh") == volume
