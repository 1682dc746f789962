"""VolumeBinding: claims decide where a pod may run (kube-scheduler's volume binder
semantics), Reserve assumes the chosen volumes, PreBind binds them or undoes its writes."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import pytest

from coscheduling.api.pods import Pod, parse_pod
from coscheduling.api.volumes import (
    SELECTED_NODE,
    Claim,
    Volume,
    VolumeStore,
    parse_claim,
    parse_storage_class,
    parse_volume,
)
from coscheduling.config.errors import ConfigError
from coscheduling.core.eventhandlers import VolumeEvents
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.status import Code
from coscheduling.plugins.volumebinding import VolumeBinding, validate_args
from coscheduling.plugins.volumebinding.binder import (
    BIND_CONFLICT,
    NODE_CONFLICT,
    UNBOUND_IMMEDIATE,
    VOLUME_MISSING,
)
from tests.simulation import GROUP_LABEL, SimCluster

LOCAL = "local"  # WaitForFirstConsumer, no provisioner: static volumes only
FAST = "fast"  # WaitForFirstConsumer with a provisioner allowed in zone a
NOW = "now"  # Immediate


def claim(name: str, *, cls: str = LOCAL, size: str = "1Gi",
          modes: tuple[str, ...] = ("ReadWriteOnce",), volume: str = "",
          phase: str = "Pending", owner: str = "", deleting: bool = False,
          selector: Mapping[str, str] | None = None, mode: str = "",
          selected_node: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": f"uid-{name}",
                            "resourceVersion": "1"}
    if owner:
        meta["ownerReferences"] = [{"kind": "Pod", "name": owner, "uid": f"u-{owner}",
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    if selected_node:
        meta["annotations"] = {SELECTED_NODE: selected_node}
    spec: dict[str, Any] = {"storageClassName": cls, "accessModes": list(modes),
                            "resources": {"requests": {"storage": size}}}
    if volume:
        spec["volumeName"] = volume
    if selector is not None:
        spec["selector"] = {"matchLabels": dict(selector)}
    if mode:
        spec["volumeMode"] = mode
    return {"metadata": meta, "spec": spec, "status": {"phase": phase}}


def volume(name: str, *, node: str = "", cls: str = LOCAL, size: str = "1Gi",
           modes: tuple[str, ...] = ("ReadWriteOnce",), phase: str = "Available",
           claim_ref: str = "", labels: Mapping[str, str] | None = None,
           driver: str = "", mode: str = "") -> dict[str, Any]:
    spec: dict[str, Any] = {"storageClassName": cls, "accessModes": list(modes),
                            "capacity": {"storage": size}}
    if node:
        spec["nodeAffinity"] = {"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}
    if claim_ref:
        spec["claimRef"] = {"namespace": "ns", "name": claim_ref, "uid": f"uid-{claim_ref}"}
    if driver:
        spec["csi"] = {"driver": driver, "volumeHandle": name}
    if mode:
        spec["volumeMode"] = mode
    return {"metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": "1",
                         "labels": dict(labels or {})},
            "spec": spec, "status": {"phase": phase}}


CLASSES = [
    {"metadata": {"name": LOCAL}, "provisioner": "kubernetes.io/no-provisioner",
     "volumeBindingMode": "WaitForFirstConsumer"},
    {"metadata": {"name": FAST}, "provisioner": "csi.example.com",
     "volumeBindingMode": "WaitForFirstConsumer",
     "allowedTopologies": [{"matchLabelExpressions": [{"key": "zone", "values": ["a"]}]}]},
    {"metadata": {"name": NOW}, "provisioner": "csi.example.com"},
]


def pod_using(name: str = "p", *claims: str, ephemeral: str = "", group: str = "") -> Pod:
    volumes: list[dict[str, Any]] = [{"name": f"v-{c}", "persistentVolumeClaim":
                                      {"claimName": c}} for c in claims]
    if ephemeral:
        volumes.append({"name": ephemeral, "ephemeral": {"volumeClaimTemplate": {"spec": {}}}})
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "labels": {GROUP_LABEL: group} if group else {}},
        "spec": {"schedulerName": "batch-scheduler", "volumes": volumes,
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": "1"}}}]}})


def fill(store: VolumeStore, claims: Sequence[dict[str, Any]] = (),
         volumes: Sequence[dict[str, Any]] = ()) -> None:
    for raw in CLASSES:
        record = parse_storage_class(raw)
        store.classes[record.name] = record
    for raw in claims:
        c = parse_claim(raw)
        store.claims[c.key] = c
    for raw in volumes:
        v = parse_volume(raw)
        store.volumes[v.name] = v


@pytest.fixture
def cluster(sim: SimCluster) -> Iterator[SimCluster]:
    sim.add_node("n1", labels={"zone": "a"})
    sim.add_node("n2", labels={"zone": "b"})
    yield sim


def outcomes(sim: SimCluster, plugin: FilterPlugin, pod: Pod) -> dict[str, tuple[Code, str]]:
    """PreFilter's answer when it is not Success (key "*"), else Filter's on each node."""
    assert isinstance(plugin, PreFilterPlugin)
    state = CycleState()
    status = plugin.pre_filter(state, pod)
    if not status.ok:
        return {"*": (status.code, status.message)}
    return {info.name: (plugin.filter(state, pod, info).code,
                        plugin.filter(state, pod, info).message)
            for info in sim.scheduler.cache.nodes()}


OK = (Code.SUCCESS, "")
UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE


@pytest.mark.parametrize(("claims", "volumes", "pod", "expected"), [
    pytest.param([], [], pod_using("p", "data"),
                 {"*": (UNRESOLVABLE, 'persistentvolumeclaim "data" not found')}, id="missing"),
    pytest.param([claim("data", deleting=True)], [], pod_using("p", "data"),
                 {"*": (UNRESOLVABLE, 'persistentvolumeclaim "data" is being deleted')},
                 id="deleting"),
    pytest.param([claim("p-scratch", owner="other")], [volume("pv", node="n1")],
                 pod_using("p", ephemeral="scratch"),
                 {"*": (UNRESOLVABLE, "PVC ns/p-scratch was not created for pod ns/p (pod is "
                                      "not owner)")}, id="ephemeral-not-owned"),
    pytest.param([claim("p-scratch", owner="p")], [volume("pv", node="n1")],
                 pod_using("p", ephemeral="scratch"),
                 {"n1": OK, "n2": (UNRESOLVABLE, BIND_CONFLICT)}, id="ephemeral-owned"),
    pytest.param([claim("data", volume="pv", phase="Bound")],
                 [volume("pv", node="n1", claim_ref="data", phase="Bound")],
                 pod_using("p", "data"), {"n1": OK, "n2": (UNRESOLVABLE, NODE_CONFLICT)},
                 id="bound-local"),
    pytest.param([claim("data", volume="pv", phase="Bound")], [], pod_using("p", "data"),
                 {"*": (UNRESOLVABLE, VOLUME_MISSING)}, id="bound-volume-missing"),
    pytest.param([claim("data", cls=NOW)], [], pod_using("p", "data"),
                 {"*": (UNRESOLVABLE, UNBOUND_IMMEDIATE)}, id="unbound-immediate"),
    pytest.param([claim("data", cls="no-such-class")], [], pod_using("p", "data"),
                 {"*": (UNRESOLVABLE, UNBOUND_IMMEDIATE)}, id="unknown-class-is-immediate"),
    pytest.param([claim("data")], [volume("pv", node="n1")], pod_using("p", "data"),
                 {"n1": OK, "n2": (UNRESOLVABLE, BIND_CONFLICT)}, id="wffc-local-volume"),
    pytest.param([claim("data")], [volume("pv")], pod_using("p", "data"),
                 {"n1": OK, "n2": OK}, id="wffc-volume-without-affinity"),
    pytest.param([claim("data", size="2Gi")], [volume("pv", node="n1")],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                          "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="volume-too-small"),
    pytest.param([claim("data", modes=("ReadWriteMany",))], [volume("pv", node="n1")],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                          "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="access-mode-missing"),
    pytest.param([claim("data", mode="Block")], [volume("pv", node="n1")],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                          "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="volume-mode-differs"),
    pytest.param([claim("data", selector={"tier": "gold"})],
                 [volume("pv", node="n1", labels={"tier": "silver"}),
                  volume("gold", node="n2", labels={"tier": "gold"})],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT), "n2": OK},
                 id="selector"),
    pytest.param([claim("data"), claim("other")],
                 [volume("pv", node="n1", claim_ref="other", phase="Bound")],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                          "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="volume-taken-by-another-claim"),
    pytest.param([claim("data")], [volume("pv", node="n1", claim_ref="data", phase="Bound")],
                 pod_using("p", "data"), {"n1": OK, "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="volume-reserved-for-this-claim"),
    pytest.param([claim("data")], [volume("pv", node="n1", phase="Released")],
                 pod_using("p", "data"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                          "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="released-volume"),
    pytest.param([claim("a"), claim("b")], [volume("pv", node="n1")],
                 pod_using("p", "a", "b"), {"n1": (UNRESOLVABLE, BIND_CONFLICT),
                                            "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="two-claims-one-volume"),
    pytest.param([claim("a"), claim("b")], [volume("pv1", node="n1"), volume("pv2", node="n1")],
                 pod_using("p", "a", "b"), {"n1": OK, "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="two-claims-two-volumes"),
    pytest.param([claim("data", cls=FAST)], [], pod_using("p", "data"),
                 {"n1": OK, "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="provisioning-allowed-topologies"),
    pytest.param([claim("data", cls=FAST, selected_node="n2")], [], pod_using("p", "data"),
                 {"n1": (UNRESOLVABLE, BIND_CONFLICT), "n2": (UNRESOLVABLE, BIND_CONFLICT)},
                 id="provisioning-promised-elsewhere"),
])
def test_filter(cluster: SimCluster, claims: list[dict[str, Any]],
                volumes: list[dict[str, Any]], pod: Pod,
                expected: dict[str, tuple[Code, str]]) -> None:
    fill(cluster.scheduler.volumes, claims, volumes)
    assert outcomes(cluster, VolumeBinding({}, cluster.scheduler.handle), pod) == expected


def test_a_pod_without_claims_is_skipped_and_signs(cluster: SimCluster) -> None:
    plugin = VolumeBinding({}, cluster.scheduler.handle)
    plain = pod_using("plain")
    assert plugin.pre_filter(CycleState(), plain).code == Code.SKIP
    assert plugin.sign(plain) == ()
    assert plugin.sign(pod_using("p", "data")) is None


def test_reserve_takes_the_smallest_fitting_volume_and_hides_it_from_others(
        cluster: SimCluster) -> None:
    store = cluster.scheduler.volumes
    fill(store, [claim("a"), claim("b")],
         [volume("big", node="n1", size="5Gi"), volume("small", node="n1", size="2Gi")])
    plugin = VolumeBinding({}, cluster.scheduler.handle)
    first, second = pod_using("p1", "a"), pod_using("p2", "b")
    state = CycleState()
    assert plugin.pre_filter(state, first).ok
    assert plugin.reserve(state, first, "n1").ok
    assert store.assumed["ns/p1"].static == (("ns/a", "small"),)
    other = CycleState()
    plugin.pre_filter(other, second)
    assert plugin.reserve(other, second, "n1").ok
    assert store.assumed["ns/p2"].static == (("ns/b", "big"),)
    third = pod_using("p3", "a")  # the same claim as p1: may take p1's volume, no other
    assert outcomes(cluster, plugin, third)["n1"] == OK
    plugin.unreserve(state, first, "n1")
    plugin.unreserve(other, second, "n1")
    assert store.assumed == {} and store.assumed_volumes == {}


class VolumeApi:
    """Stands in for the API server and the PV binder controller: a patch changes the
    record in the store through the watch handlers; with ``binds`` the controller then
    binds the claim (to the volume in the claimRef, or to a provisioned one)."""

    def __init__(self, sim: SimCluster, binds: bool = True) -> None:
        self.sim, self.binds = sim, binds
        self.patches: list[tuple[str, dict[str, Any]]] = []
        store = sim.scheduler.volumes
        self.claim_events = VolumeEvents(sim.scheduler, store.claims, lambda c: c.key)
        self.volume_events = VolumeEvents(sim.scheduler, store.volumes, lambda v: v.name)

    def patch(self, path: str, body: dict[str, Any], *, kind: str = "merge") -> dict[str, Any]:
        self.patches.append((path, body))
        store = self.sim.scheduler.volumes
        name = path.rsplit("/", 1)[1]
        if "/persistentvolumes/" in path:
            old_volume = store.volumes[name]
            ref = body["spec"]["claimRef"]
            new_volume = dataclasses.replace(
                old_volume, claim_ref=(ref["namespace"], ref["name"], ref["uid"]) if ref
                else None)
            self.volume_events.on_update(old_volume, new_volume)
            if ref and self.binds:
                self._bind(store.claims[f"{ref['namespace']}/{ref['name']}"], name)
        else:
            old_claim = store.claims[f"ns/{name}"]
            node = body["metadata"]["annotations"][SELECTED_NODE]
            new_claim = dataclasses.replace(old_claim, selected_node=node or "")
            self.claim_events.on_update(old_claim, new_claim)
            if node and self.binds:
                provisioned = Volume(f"pvc-{name}", phase="Bound")
                self.volume_events.on_add(provisioned)
                self._bind(new_claim, provisioned.name)
        return {}

    def _bind(self, old: Claim, volume_name: str) -> None:
        self.claim_events.on_update(old, dataclasses.replace(old, phase="Bound",
                                                             volume_name=volume_name))


def volume_plugin(cluster: SimCluster) -> VolumeBinding:
    """The scheduler's own VolumeBinding instance (its PreBind writes through ``api``)."""
    plugin = cluster.scheduler.framework.instances["VolumeBinding"]
    assert isinstance(plugin, VolumeBinding)
    return plugin


def test_prebind_binds_static_and_provisioned_claims(cluster: SimCluster) -> None:
    store = cluster.scheduler.volumes
    fill(store, [claim("a"), claim("b", cls=FAST)], [volume("pv", node="n1")])
    api = VolumeApi(cluster)
    plugin = VolumeBinding({}, dataclasses.replace(cluster.scheduler.handle, api=api))
    pod, state = pod_using("p", "a", "b"), CycleState()
    assert plugin.pre_filter(state, pod).ok
    assert plugin.reserve(state, pod, "n1").ok
    assert plugin.pre_bind(state, pod, "n1").ok
    assert [path for path, _ in api.patches] == [
        "/api/v1/persistentvolumes/pv", "/api/v1/namespaces/ns/persistentvolumeclaims/b"]
    assert store.claims["ns/a"].volume_name == "pv" and store.claims["ns/b"].bound
    assert list(store.assumed) == ["ns/p"]  # until the watch sees the pod bound
    cluster.pods.on_update(pod, dataclasses.replace(pod, node_name="n1"))
    assert store.assumed == {}


def test_prebind_that_times_out_undoes_its_writes(cluster: SimCluster) -> None:
    store = cluster.scheduler.volumes
    fill(store, [claim("a"), claim("b", cls=FAST)], [volume("pv", node="n1")])
    api = VolumeApi(cluster, binds=False)
    plugin = VolumeBinding({"bindTimeoutSeconds": 0},
                           dataclasses.replace(cluster.scheduler.handle, api=api))
    pod, state = pod_using("p", "a", "b"), CycleState()
    plugin.pre_filter(state, pod)
    plugin.reserve(state, pod, "n1")
    status = plugin.pre_bind(state, pod, "n1")
    assert status.code == Code.ERROR
    assert status.message == "binding volumes for ns/a, ns/b timed out after 0s"
    undone = [body for _, body in api.patches[2:]]
    assert undone == [{"metadata": {"annotations": {SELECTED_NODE: None}}},
                      {"spec": {"claimRef": None}}]
    assert store.volumes["pv"].claim_ref is None and store.claims["ns/b"].selected_node == ""


@pytest.mark.parametrize(("args", "error"), [
    ({"bindTimeoutSeconds": -1}, "args.bindTimeoutSeconds"),
    ({"bindTimeoutSeconds": "soon"}, "args.bindTimeoutSeconds"),
    ({"timeout": 5}, "args"),
])
def test_bad_args_are_refused_by_field(args: dict[str, Any], error: str) -> None:
    with pytest.raises(ConfigError) as raised:
        validate_args(args, "args")
    assert raised.value.path.startswith(error)


def test_args_default_to_upstreams_bind_timeout() -> None:
    assert validate_args({}, "args") == {"bindTimeoutSeconds": 600.0}


def test_a_gang_whose_claims_fit_only_one_node_lands_there(cluster: SimCluster) -> None:
    store = cluster.scheduler.volumes
    fill(store, [claim("d0"), claim("d1")],
         [volume("pv0", node="n2"), volume("pv1", node="n2")])
    volume_plugin(cluster).api = VolumeApi(cluster)
    cluster.add_group("g", 2)
    for i in range(2):
        cluster.pods.on_add(pod_using(f"m{i}", f"d{i}", group="g"))
    cluster.run()
    assert cluster.bound == {"ns/m0": "n2", "ns/m1": "n2"}
    assert {store.claims[f"ns/d{i}"].volume_name for i in range(2)} == {"pv0", "pv1"}


def test_a_pod_waiting_for_its_claim_is_placed_once_the_claim_appears(
        cluster: SimCluster) -> None:
    store = cluster.scheduler.volumes
    fill(store, [], [volume("pv", node="n1")])
    volume_plugin(cluster).api = VolumeApi(cluster)
    cluster.pods.on_add(pod_using("p", "data"))
    cluster.run()
    queued = cluster.scheduler.queue.get("ns/p")
    assert queued is not None and queued.last_reason == 'persistentvolumeclaim "data" not found'
    VolumeEvents(cluster.scheduler, store.claims, lambda c: c.key).on_add(
        parse_claim(claim("data")))
    cluster.run()
    assert cluster.bound == {"ns/p": "n1"}


def test_an_assumption_ends_when_the_pods_binding_is_seen(cluster: SimCluster) -> None:
    """A pod bound by someone else (a gRPC caller binds itself): no PreBind of ours runs."""
    store = cluster.scheduler.volumes
    fill(store, [claim("data")], [volume("pv", node="n1")])
    plugin = VolumeBinding({}, cluster.scheduler.handle)
    pod, state = pod_using("p", "data"), CycleState()
    cluster.pods.on_add(pod)
    plugin.pre_filter(state, pod)
    plugin.reserve(state, pod, "n1")
    assert store.assumed_volumes == {"pv": "ns/data"}
    cluster.pods.on_update(pod, dataclasses.replace(pod, node_name="n1"))
    assert store.assumed == {} and store.assumed_volumes == {}
