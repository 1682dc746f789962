"""VolumeRestrictions (ReadWriteOncePod), VolumeZone and NodeVolumeLimits (CSINode counts),
and the storage records they read."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from coscheduling.api.pods import Pod
from coscheduling.api.volumes import parse_claim, parse_csinode, parse_volume
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Code
from coscheduling.plugins.nodevolumelimits import NodeVolumeLimits
from coscheduling.plugins.nodevolumelimits.plugin import EXCEEDED
from coscheduling.plugins.volumerestrictions import VolumeRestrictions
from coscheduling.plugins.volumerestrictions.plugin import CONFLICT as RWOP_CONFLICT
from coscheduling.plugins.volumezone import VolumeZone
from coscheduling.plugins.volumezone.plugin import BETA_ZONE, REGION, ZONE
from coscheduling.plugins.volumezone.plugin import CONFLICT as ZONE_CONFLICT
from tests.simulation import SimCluster
from tests.unit.test_plugins_volumebinding import (
    FAST,
    claim,
    fill,
    outcomes,
    pod_using,
    volume,
)

OK = (Code.SUCCESS, "")
SKIPPED = {"*": (Code.SKIP, "")}
UNRESOLVABLE = Code.UNSCHEDULABLE_AND_UNRESOLVABLE
Outcomes = dict[str, tuple[Code, str]]


def place(sim: SimCluster, pod: Pod, node: str) -> None:
    """A pod already running on ``node``."""
    sim.pods.on_add(dataclasses.replace(pod, node_name=node))


# -- VolumeRestrictions --------------------------------------------------------------------
RWOP = ("ReadWriteOncePod",)


@pytest.mark.parametrize(("claims", "running", "pod", "expected"), [
    pytest.param([claim("solo", modes=RWOP)], [pod_using("first", "solo")],
                 pod_using("p", "solo"),
                 {"n1": (Code.UNSCHEDULABLE, RWOP_CONFLICT),
                  "n2": (Code.UNSCHEDULABLE, RWOP_CONFLICT)}, id="claim-in-use"),
    pytest.param([claim("solo", modes=RWOP)], [], pod_using("p", "solo"),
                 {"n1": OK, "n2": OK}, id="claim-free"),
    pytest.param([claim("shared")], [pod_using("first", "shared")],
                 pod_using("p", "shared"), SKIPPED, id="read-write-once-is-not-exclusive"),
    pytest.param([claim("solo", modes=RWOP)],
                 [dataclasses.replace(pod_using("first", "solo"), namespace="elsewhere")],
                 pod_using("p", "solo"), {"n1": OK, "n2": OK}, id="same-name-other-namespace"),
    pytest.param([], [], pod_using("p", "gone"),
                 {"*": (UNRESOLVABLE, 'persistentvolumeclaim "gone" not found')},
                 id="missing-claim"),
    pytest.param([], [], pod_using("p"), SKIPPED, id="no-claims"),
])
def test_volume_restrictions(sim: SimCluster, claims: list[dict[str, Any]],
                             running: list[Pod], pod: Pod, expected: Outcomes) -> None:
    sim.add_node("n1")
    sim.add_node("n2")
    fill(sim.scheduler.volumes, claims)
    for other in running:
        place(sim, other, "n1")
    assert outcomes(sim, VolumeRestrictions({}, sim.scheduler.handle), pod) == expected


# -- VolumeZone ----------------------------------------------------------------------------
NODES = {"za": {ZONE: "a", REGION: "r1"}, "zb": {ZONE: "b", REGION: "r1"},
         "zc": {ZONE: "c", REGION: "r2"}, "bare": {}}


def _bound(labels: dict[str, str], name: str = "data") -> tuple[list[dict[str, Any]],
                                                                 list[dict[str, Any]]]:
    return ([claim(name, volume=f"pv-{name}", phase="Bound")],
            [volume(f"pv-{name}", claim_ref=name, phase="Bound", labels=labels)])


@pytest.mark.parametrize(("objects", "expected"), [
    pytest.param(_bound({ZONE: "a"}), {"za": OK, "zb": (UNRESOLVABLE, ZONE_CONFLICT),
                                       "zc": (UNRESOLVABLE, ZONE_CONFLICT), "bare": OK},
                 id="zone"),
    pytest.param(_bound({ZONE: "a__c"}), {"za": OK, "zb": (UNRESOLVABLE, ZONE_CONFLICT),
                                          "zc": OK, "bare": OK}, id="multi-zone-volume"),
    pytest.param(_bound({BETA_ZONE: "b"}), {"za": (UNRESOLVABLE, ZONE_CONFLICT), "zb": OK,
                                            "zc": (UNRESOLVABLE, ZONE_CONFLICT), "bare": OK},
                 id="beta-label-matches-ga-node-label"),
    pytest.param(_bound({REGION: "r2"}), {"za": (UNRESOLVABLE, ZONE_CONFLICT),
                                          "zb": (UNRESOLVABLE, ZONE_CONFLICT), "zc": OK,
                                          "bare": OK}, id="region"),
    pytest.param(_bound({"tier": "gold"}), SKIPPED, id="no-topology-labels"),
    pytest.param(([claim("data")], [volume("pv", labels={ZONE: "a"})]), SKIPPED,
                 id="unbound-claim-is-volume-bindings"),
    pytest.param(([claim("data", volume="pv-gone", phase="Bound")], []),
                 {"*": (UNRESOLVABLE, 'persistentvolume "pv-gone" not found')},
                 id="volume-missing"),
])
def test_volume_zone(sim: SimCluster, objects: tuple[Sequence[dict[str, Any]],
                                                     Sequence[dict[str, Any]]],
                     expected: Outcomes) -> None:
    for name, labels in NODES.items():
        sim.add_node(name, labels=labels)
    fill(sim.scheduler.volumes, *objects)
    assert outcomes(sim, VolumeZone({}, sim.scheduler.handle), pod_using("p", "data")) == expected


# -- NodeVolumeLimits ----------------------------------------------------------------------
DRIVER = "csi.example.com"  # the FAST class's provisioner too


def _csi(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    return (claim(name, volume=f"pv-{name}", phase="Bound"),
            volume(f"pv-{name}", claim_ref=name, phase="Bound", driver=DRIVER))


@pytest.mark.parametrize(("limit", "running", "pod", "expected"), [
    pytest.param(1, ["old"], pod_using("p", "new"),
                 {"n1": (Code.UNSCHEDULABLE, EXCEEDED), "n2": OK}, id="over-the-limit"),
    pytest.param(2, ["old"], pod_using("p", "new"), {"n1": OK, "n2": OK}, id="within"),
    pytest.param(1, ["old"], pod_using("p", "old"), {"n1": OK, "n2": OK},
                 id="a-volume-already-attached-counts-once"),
    pytest.param(1, ["old"], pod_using("p", "later"),
                 {"n1": (Code.UNSCHEDULABLE, EXCEEDED), "n2": OK},
                 id="a-claim-to-provision-counts-for-its-provisioner"),
    pytest.param(0, [], pod_using("p", "new"), {"n1": (Code.UNSCHEDULABLE, EXCEEDED),
                                                "n2": OK}, id="zero"),
    pytest.param(None, ["old"], pod_using("p", "new"), {"n1": OK, "n2": OK},
                 id="driver-without-a-count"),
    pytest.param(1, ["old"], pod_using("p"), SKIPPED, id="no-claims"),
])
def test_node_volume_limits(sim: SimCluster, limit: int | None, running: list[str],
                            pod: Pod, expected: Outcomes) -> None:
    sim.add_node("n1")
    sim.add_node("n2")  # no CSINode: no limits
    store = sim.scheduler.volumes
    claims, volumes = zip(*(_csi(n) for n in ("old", "new")), strict=True)
    fill(store, [*claims, claim("later", cls=FAST)], volumes)
    allocatable = {"count": limit} if limit is not None else {}
    store.csinodes["n1"] = parse_csinode({"metadata": {"name": "n1"}, "spec": {"drivers": [
        {"name": DRIVER, "nodeID": "n1", "allocatable": allocatable}]}})
    for index, name in enumerate(running):
        place(sim, pod_using(f"run-{index}", name), "n1")
    assert outcomes(sim, NodeVolumeLimits({}, sim.scheduler.handle), pod) == expected


# -- records -------------------------------------------------------------------------------
@pytest.mark.parametrize(("raw", "error"), [
    (claim("c", size="lots"), "spec.resources.requests"),
    ({**claim("c"), "spec": {**claim("c")["spec"], "selector": {"matchExpressions": [
        {"key": "k", "operator": "Near"}]}}}, "spec.selector"),
])
def test_unreadable_claims_name_the_field(raw: dict[str, Any], error: str) -> None:
    assert parse_claim(raw).parse_error.startswith(error)


def test_unreadable_volumes_name_the_field() -> None:
    raw = volume("pv")
    raw["spec"]["capacity"] = {"storage": "huge"}
    assert parse_volume(raw).parse_error.startswith("spec.capacity")


def test_a_claim_that_cannot_be_read_refuses_its_pods(sim: SimCluster) -> None:
    sim.add_node("n1")
    fill(sim.scheduler.volumes, [claim("data", size="lots")])
    status = VolumeZone({}, sim.scheduler.handle).pre_filter(CycleState(), pod_using("p", "data"))
    assert status.code == UNRESOLVABLE
    assert status.message.startswith('persistentvolumeclaim "data": spec.resources.requests')


def test_plugins_refuse_to_run_without_a_handle() -> None:
    for plugin in (VolumeRestrictions, VolumeZone, NodeVolumeLimits):
        with pytest.raises(ValueError, match="needs the scheduler handle"):
            plugin({}, None)
