"""Dynamic resource allocation against a real kube-apiserver and the resource-claim
controller (issue 25): DeviceClasses, ResourceSlices published by the test itself (no
driver, no kubelet), ResourceClaimTemplates turned into claims by the controller, and the
scheduler's allocations as the API server stores them.

Every object is named after the test's pool; the cluster-wide ones (classes, slices) are
removed afterwards.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.commands.explain import explain
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    create_priority_class,
    events_for,
    list_pods,
    placement,
    pod_condition,
    wait_until,
)
from tests.integration.test_pod_constraints import StartScheduler, _pod, _pool
from tests.integration.test_pod_semantics import _refused
from tests.integration.test_preemption import Kubelet

API = "/apis/resource.k8s.io/v1"


class Dra:
    """Creates a pool's DeviceClass, slices, templates and claims, and reads claims back."""

    def __init__(self, kube: KubeClient, namespace: str, pool: str) -> None:
        self.kube, self.namespace, self.pool = kube, namespace, pool
        self.driver = f"gpu-{pool}.example.com"
        self.created: list[str] = []

    def device_class(self, name: str = "gpu", selectors: list[str] | None = None) -> str:
        name = f"{name}-{self.pool}"
        exprs = selectors or [f'device.driver == "{self.driver}"']
        self.kube.create(f"{API}/deviceclasses", {
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": e}} for e in exprs]}})
        self.created.append(f"{API}/deviceclasses/{name}")
        return name

    def slice(self, node: str, devices: list[dict[str, Any]]) -> None:
        """A node-local slice of ``devices`` ({"name", attributes..., "memory"})."""
        name = f"{node}-{self.pool}"
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {"driver": self.driver, "nodeName": node,
                         "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                         "devices": [self._device(d) for d in devices]}}
        self.kube.create(f"{API}/resourceslices", body)
        self.created.append(f"{API}/resourceslices/{name}")

    @staticmethod
    def _device(spec: dict[str, Any]) -> dict[str, Any]:
        device: dict[str, Any] = {"name": spec["name"]}
        attributes = {k: ({"int": v} if isinstance(v, int) else {"string": v})
                      for k, v in spec.items() if k not in ("name", "memory")}
        if attributes:
            device["attributes"] = attributes
        if "memory" in spec:
            device["capacity"] = {"memory": {"value": spec["memory"]}}
        return device

    def _devices(self, cls: str, count: int = 1, selectors: list[str] | None = None,
                 constraint: str = "") -> dict[str, Any]:
        exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
        if selectors:
            exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
        devices: dict[str, Any] = {"requests": [{"name": "gpu", "exactly": exactly}]}
        if constraint:
            devices["constraints"] = [{"matchAttribute": constraint}]
        return {"devices": devices}

    def template(self, name: str, cls: str, **request: Any) -> None:
        self.kube.create(f"{API}/namespaces/{self.namespace}/resourceclaimtemplates", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": name}, "spec": {"spec": self._devices(cls, **request)}})

    def claim(self, name: str, cls: str, **request: Any) -> None:
        self.kube.create(f"{API}/namespaces/{self.namespace}/resourceclaims", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name}, "spec": self._devices(cls, **request)})

    def pod(self, name: str, scheduler: str, *, template: str = "", claim: str = "",
            group: str = "", prefer: bool = False) -> None:
        """A pod using one claim; ``prefer``: it would rather run on nodes labelled
        prefer=yes (so the order members are placed in would mislead a greedy search)."""
        source = ({"resourceClaimTemplateName": template} if template
                  else {"resourceClaimName": claim})
        spec: dict[str, Any] = {"resourceClaims": [{"name": "gpu", **source}]}
        if prefer:
            spec["affinity"] = {"nodeAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 100, "preference": {"matchExpressions": [
                        {"key": "prefer", "operator": "In", "values": ["yes"]}]}}]}}
        create_pod(self.kube, self.namespace, _pod(name, scheduler, self.pool, group=group,
                                                   **spec))

    def memory_templates(self, cls: str, *sizes: int) -> None:
        """Templates "ge<size>" asking for one device of at least <size>Gi."""
        for size in sizes:
            self.template(f"ge{size}", cls, selectors=[
                f'device.capacity["{self.driver}"].memory.compareTo(quantity("{size}Gi")) >= 0'])

    def claims(self) -> list[dict[str, Any]]:
        return list(self.kube.get(f"{API}/namespaces/{self.namespace}/resourceclaims")
                    .get("items") or [])

    def cleanup(self) -> None:
        for path in reversed(self.created):
            try:
                self.kube.delete(path)
            except ApiError as err:
                if not err.not_found:
                    raise


@pytest.fixture
def dra(kube: KubeClient, namespace: str) -> Iterator[Dra]:
    made = Dra(kube, namespace, _pool())
    yield made
    made.cleanup()


def _nodes(make_node: Any, pool: str, count: int) -> list[str]:
    names = [f"dra-{pool}-{i}" for i in range(count)]
    for name in names:
        make_node(name, labels={"test-pool": pool})
    return names


def _three_plus_one(make_node: Any, dra: Dra) -> tuple[str, str, str]:
    """Two nodes with 3 and 1 devices of a fresh class, and the template "one-gpu" asking
    for one of them: (node 1, node 2, class)."""
    n1, n2 = _nodes(make_node, dra.pool, 2)
    cls = dra.device_class()
    dra.slice(n1, [{"name": f"gpu{i}"} for i in range(3)])
    dra.slice(n2, [{"name": "gpu0"}])
    dra.template("one-gpu", cls)
    return n1, n2, cls


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return list((allocation.get("devices") or {}).get("results") or [])


def _node_of(claim: dict[str, Any]) -> str:
    """The node an allocation names (node-local devices: matchFields metadata.name)."""
    terms = claim["status"]["allocation"]["nodeSelector"]["nodeSelectorTerms"]
    return str(terms[0]["matchFields"][0]["values"][0])


def _bound(kube: KubeClient, namespace: str, names: list[str]) -> dict[str, str]:
    return dict(wait_until(lambda: (p := placement(kube, namespace)) and all(
        p.get(n) for n in names) and p, what=f"{len(names)} pods bound"))


def _claims_by_pod(dra: Dra) -> dict[str, dict[str, Any]]:
    """Each pod's claim, by the pod its controller reference names."""
    found = {}
    for claim in dra.claims():
        for owner in claim["metadata"].get("ownerReferences") or ():
            found[owner["name"]] = claim
    return found


def test_gang_of_four_with_template_claims_on_three_plus_one_devices(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    n1, n2, cls = _three_plus_one(make_node, dra)
    create_podgroup(kube, namespace, "train", 4)
    names = [f"train-{i}" for i in range(4)]
    for name in names:
        dra.pod(name, sched.name, template="one-gpu", group="train")
    nodes = _bound(kube, namespace, names)
    assert sorted(nodes.values()) == sorted([n1, n1, n1, n2])
    claims = _claims_by_pod(dra)
    devices = []
    for name in names:
        claim = claims[name]
        assert _node_of(claim) == nodes[name]
        results = _results(claim)
        assert len(results) == 1 and results[0]["pool"] == nodes[name]
        devices.append((results[0]["pool"], results[0]["device"]))
        reserved = claim["status"]["reservedFor"]
        assert [r["name"] for r in reserved] == [name]
        assert "resource.kubernetes.io/delete-protection" in claim["metadata"]["finalizers"]
    assert len(set(devices)) == 4, devices
    text = explain(kube, namespace, "train")
    assert f"needs 4 devices of class {cls} (1 per member); 0 free" in text, text
    for name in names:
        claim = claims[name]
        device = _results(claim)[0]
        assert any(line.split() == [name, claim["metadata"]["name"],
                                    f"{device['pool']}/{device['device']}"]
                   for line in text.splitlines()), text
    sched.watcher.check_settled()


def test_gang_needing_more_devices_than_exist_binds_nothing_and_allocates_nothing(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    n1, n2, cls = _three_plus_one(make_node, dra)
    create_podgroup(kube, namespace, "big", 5)
    names = [f"big-{i}" for i in range(5)]
    for name in names:
        dra.pod(name, sched.name, template="one-gpu", group="big")

    def all_refused() -> bool:
        conditions = [pod_condition(kube, namespace, n, "PodScheduled") for n in names]
        return all(c.get("reason") == "Unschedulable" and "cannot allocate all claims"
                   in c.get("message", "") for c in conditions)

    wait_until(all_refused, what="every member Unschedulable for lack of devices")
    assert len(dra.claims()) == 5  # the controller made them; none was allocated
    assert not any(placement(kube, namespace).values())
    assert [c["metadata"]["name"] for c in dra.claims() if _results(c)] == []
    text = explain(kube, namespace, "big")
    assert (f"needs 5 devices of class {cls} (1 per member); 4 free: {n1} 3, {n2} 1"
            in text), text
    sched.watcher.check_settled()


def test_cel_attribute_selector_picks_the_node_with_the_right_model(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    n1, n2 = _nodes(make_node, dra.pool, 2)
    cls = dra.device_class()
    dra.slice(n1, [{"name": "gpu0", "model": "a100"}, {"name": "gpu1", "model": "a100"}])
    dra.slice(n2, [{"name": "gpu0", "model": "h100"}])
    dra.template("h100", cls, selectors=[
        f'device.attributes["{dra.driver}"].model == "h100"'])
    dra.pod("solo", sched.name, template="h100")
    assert _bound(kube, namespace, ["solo"])["solo"] == n2
    claim = _claims_by_pod(dra)["solo"]
    assert [(r["pool"], r["device"]) for r in _results(claim)] == [(n2, "gpu0")]


def test_match_attribute_picks_two_devices_on_one_numa_node(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    (node,) = _nodes(make_node, dra.pool, 1)
    cls = dra.device_class()
    dra.slice(node, [{"name": "gpu0", "numa": 0}, {"name": "gpu1", "numa": 1},
                     {"name": "gpu2", "numa": 1}])
    dra.template("pair", cls, count=2, constraint=f"{dra.driver}/numa")
    dra.pod("pair", sched.name, template="pair")
    _bound(kube, namespace, ["pair"])
    claim = _claims_by_pod(dra)["pair"]
    assert sorted(r["device"] for r in _results(claim)) == ["gpu1", "gpu2"]


def test_claim_shared_by_a_gang_pulls_every_member_to_its_device(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    nodes = _nodes(make_node, dra.pool, 3)
    cls = dra.device_class()
    dra.slice(nodes[2], [{"name": "nvlink"}])
    dra.claim("domain", cls)
    create_podgroup(kube, namespace, "shared", 3)
    names = [f"shared-{i}" for i in range(3)]
    for name in names:
        dra.pod(name, sched.name, claim="domain", group="shared")
    assert set(_bound(kube, namespace, names).values()) == {nodes[2]}
    (claim,) = dra.claims()
    assert _node_of(claim) == nodes[2]
    assert [(r["pool"], r["device"]) for r in _results(claim)] == [(nodes[2], "nvlink")]
    assert sorted(r["name"] for r in claim["status"]["reservedFor"]) == names
    sched.watcher.check_settled()


def _small_then_big(dra: Dra) -> None:
    """pair-0 (>= 40Gi) got the 40Gi device, pair-1 (>= 80Gi) the 80Gi one."""
    claims = _claims_by_pod(dra)
    assert [r["device"] for r in _results(claims["pair-0"])] == ["small"]
    assert [r["device"] for r in _results(claims["pair-1"])] == ["big"]


def test_gang_search_backtracks_so_both_members_fit(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """Member 0 asks >= 40Gi, member 1 >= 80Gi; the node has an 80Gi device listed before a
    40Gi one. First fit gives member 0 the 80Gi device and member 1 nothing."""
    sched = start_scheduler()
    (node,) = _nodes(make_node, dra.pool, 1)
    cls = dra.device_class()
    dra.slice(node, [{"name": "big", "memory": "80Gi"}, {"name": "small", "memory": "40Gi"}])
    dra.memory_templates(cls, 40, 80)
    create_podgroup(kube, namespace, "pair", 2)
    dra.pod("pair-0", sched.name, template="ge40", group="pair")
    dra.pod("pair-1", sched.name, template="ge80", group="pair")
    _bound(kube, namespace, ["pair-0", "pair-1"])
    _small_then_big(dra)
    sched.watcher.check_settled()


def test_gang_search_moves_a_member_to_another_node_so_both_fit(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """Across nodes: the preferred node has only an 80Gi device, the other only a 40Gi
    one. Placed one after the other, member 0 (>= 40Gi) takes the preferred node and member
    1 (>= 80Gi) finds none; the gang's search moves member 0. Everything exists before the
    scheduler starts, so member 0 is placed first."""
    sched = start_scheduler(start=False)
    preferred, other = f"dra-{dra.pool}-0", f"dra-{dra.pool}-1"
    make_node(preferred, labels={"test-pool": dra.pool, "prefer": "yes"})
    make_node(other, labels={"test-pool": dra.pool})
    cls = dra.device_class()
    dra.slice(preferred, [{"name": "big", "memory": "80Gi"}])
    dra.slice(other, [{"name": "small", "memory": "40Gi"}])
    dra.memory_templates(cls, 40, 80)
    create_podgroup(kube, namespace, "pair", 2)
    dra.pod("pair-0", sched.name, template="ge40", group="pair", prefer=True)
    dra.pod("pair-1", sched.name, template="ge80", group="pair")
    wait_until(lambda: len(_claims_by_pod(dra)) == 2, what="both claims made")
    sched.start()
    nodes = _bound(kube, namespace, ["pair-0", "pair-1"])
    assert nodes == {"pair-0": other, "pair-1": preferred}
    _small_then_big(dra)
    sched.watcher.check_settled()


def test_gang_device_constraint_keeps_every_member_in_one_clique(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """spec.deviceConstraints: the preferred node's clique "a" has 2 devices, clique "b" 3
    on two nodes; a gang of 3 gets clique b whole, never 2 of a and 1 of b. A second gang of
    2 then takes clique a, the only one left with room."""
    sched = start_scheduler()
    preferred, b1, b2 = (f"dra-{dra.pool}-{i}" for i in range(3))
    make_node(preferred, labels={"test-pool": dra.pool, "prefer": "yes"})
    for name in (b1, b2):
        make_node(name, labels={"test-pool": dra.pool})
    cls = dra.device_class()
    dra.slice(preferred, [{"name": f"gpu{i}", "clique": "a"} for i in range(2)])
    dra.slice(b1, [{"name": "gpu0", "clique": "b"}])
    dra.slice(b2, [{"name": f"gpu{i}", "clique": "b"} for i in range(2)])
    dra.template("one-gpu", cls)
    same_clique = [{"matchAttribute": f"{dra.driver}/clique"}]
    for group, size in (("big", 3), ("small", 2)):
        create_podgroup(kube, namespace, group, size, deviceConstraints=same_clique)
        names = [f"{group}-{i}" for i in range(size)]
        for name in names:
            dra.pod(name, sched.name, template="one-gpu", group=group, prefer=True)
        nodes = {n: node for n, node in _bound(kube, namespace, names).items() if n in names}
        claims = _claims_by_pod(dra)
        cliques = {"big": {b1, b2}, "small": {preferred}}[group]
        assert set(nodes.values()) <= cliques, nodes
        assert all(_node_of(claims[n]) == nodes[n] for n in names)
    sched.watcher.check_settled()


def test_selector_that_does_not_compile_is_named_in_an_event(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """The API server refuses what its own CEL cannot compile, so the expression here is
    one it accepts and this scheduler cannot compile: a Kubernetes CEL library (IP
    addresses) that DRA selectors rarely need and this scheduler does not declare."""
    sched = start_scheduler()
    (node,) = _nodes(make_node, dra.pool, 1)
    cls = dra.device_class("broken", selectors=['ip("10.0.0.1").family() == 4'])
    dra.slice(node, [{"name": "gpu0"}])
    dra.template("broken", cls)
    dra.pod("broken", sched.name, template="broken")
    where = f'deviceclass "{cls}": spec.selectors[0].cel.expression: the CEL expression ' \
            "does not compile"

    def class_event() -> list[dict[str, Any]]:
        return [e for e in kube.get("/api/v1/namespaces/default/events").get("items") or []
                if e["involvedObject"].get("name") == cls
                and e["involvedObject"].get("kind") == "DeviceClass"]

    events = wait_until(class_event, what="an event on the DeviceClass")
    assert events[0]["reason"] == "FailedCompilation" and where in events[0]["message"]
    wait_until(lambda: any(where in e.get("message", "")
                           for e in events_for(kube, namespace, "broken")),
               what="a FailedScheduling event naming the class and field")
    assert not any(placement(kube, namespace).values())
    assert list_pods(kube, namespace)


def test_unimplemented_request_field_is_refused_naming_it(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """Admin access (the API server allows it in namespaces labelled for it) is not
    implemented here: the pod is refused with the field named, never placed without it."""
    sched = start_scheduler()
    (node,) = _nodes(make_node, dra.pool, 1)
    cls = dra.device_class()
    dra.slice(node, [{"name": "gpu0"}])
    kube.patch(f"/api/v1/namespaces/{namespace}", {"metadata": {"labels": {
        "resource.kubernetes.io/admin-access": "true"}}})
    kube.create(f"{API}/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "admin"}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": cls, "adminAccess": True}}]}}})
    dra.pod("admin", sched.name, claim="admin")
    _refused(kube, namespace, "admin",
             'resourceclaim "admin": spec.devices.requests[0].exactly.adminAccess is not '
             "implemented by this scheduler; the pod is not placed")
    assert not _results(dra.claims()[0])


def test_a_higher_priority_gang_preempts_for_the_devices_its_victims_free(
        kube: KubeClient, namespace: str, make_node: Any, dra: Dra,
        start_scheduler: StartScheduler) -> None:
    """One node with 2 devices held by a low-priority gang of 2: a high-priority gang of 2
    that needs them evicts it whole (the devices are counted free without the victims),
    and once the victims are gone its own claims get the same 2 devices, none twice."""
    create_priority_class(kube, "dra-low", 10)
    create_priority_class(kube, "dra-high", 100_000)
    sched = start_scheduler()
    (node,) = _nodes(make_node, dra.pool, 1)
    cls = dra.device_class()
    dra.slice(node, [{"name": "gpu0"}, {"name": "gpu1"}])
    dra.template("one-gpu", cls)

    def gang(name: str, priority: str) -> list[str]:
        create_podgroup(kube, namespace, name, 2)
        members = [f"{name}-{i}" for i in range(2)]
        for member in members:
            create_pod(kube, namespace, _pod(
                member, sched.name, dra.pool, group=name, priorityClassName=priority,
                resourceClaims=[{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]))
        return members

    low = gang("low", "dra-low")
    _bound(kube, namespace, low)
    high = gang("high", "dra-high")
    kubelet = Kubelet(kube, namespace)
    kubelet.until(lambda: all(placement(kube, namespace).get(n) for n in high),
                  what="the high-priority gang bound once its victims are gone")
    left = placement(kube, namespace)
    assert not any(n in left for n in low), f"the low-priority gang was not evicted: {left}"
    claims = _claims_by_pod(dra)
    devices = [(_results(claims[n])[0]["pool"], _results(claims[n])[0]["device"])
               for n in high]
    assert sorted(devices) == [(node, "gpu0"), (node, "gpu1")], devices
    sched.watcher.check_settled()
