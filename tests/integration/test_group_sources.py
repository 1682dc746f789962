"""Gangs of every producer against the real API server (issue 16): scheduler-plugins,
Volcano and kube-batch PodGroups (their CRDs from crd/compat/), the native scheduling.k8s.io
PodGroups of the local control plane's release, ours, and label-only groups.

For each: seed 001's race (two gangs, room for one: exactly one is bound, whole) and seed
000's shape (room for five of six: none is bound until room is added), with the status this
scheduler wrote shown by ``kubectl get``. Then precedence between markers and its Warning
event, a CRD installed while the scheduler runs, and Volcano's admission before pods exist.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from coscheduling.api.membership import (
    GROUP_NAME_ANNOTATION,
    LABEL_ONLY_MIN,
    LABEL_ONLY_NAME,
    X_K8S_LABEL,
)
from coscheduling.cluster.client import KubeClient
from coscheduling.commands.explain import explain
from coscheduling.localcluster import LocalCluster
from tests.integration.fixtures import COMPAT, kubectl
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    exists,
    list_pods,
    pod_body,
    pod_condition,
    wait_until,
)

StartScheduler = Callable[..., Any]
pytestmark = pytest.mark.usefixtures("compat_crds")


@dataclass(frozen=True)
class Kind:
    """One producer: how its group object is made and how its pods name it."""

    name: str
    resource: str  # for kubectl get; "" when there is no object
    make: Callable[[str, int], dict[str, Any]] | None
    mark: Callable[[dict[str, Any], str, int], None]
    tag: str  # what ends its gang keys

    def path(self, namespace: str) -> str:
        plural, group = self.resource.split(".", 1)
        version = {"scheduling.x-k8s.io": "v1alpha1", "scheduling.volcano.sh": "v1beta1",
                   "scheduling.incubator.k8s.io": "v1alpha1",
                   "scheduling.k8s.io": "v1beta1"}[group]
        return f"/apis/{group}/{version}/namespaces/{namespace}/{plural}"


def _object(api_version: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": api_version, "kind": "PodGroup", "metadata": {"name": name},
            "spec": spec}


def _label(key: str) -> Callable[[dict[str, Any], str, int], None]:
    def mark(body: dict[str, Any], group: str, minimum: int) -> None:
        body["metadata"].setdefault("labels", {})[key] = group
    return mark


def _annotate(body: dict[str, Any], group: str, minimum: int) -> None:
    body["metadata"].setdefault("annotations", {})[GROUP_NAME_ANNOTATION] = group


def _native_mark(body: dict[str, Any], group: str, minimum: int) -> None:
    body["spec"]["schedulingGroup"] = {"podGroupName": group}


def _label_only(body: dict[str, Any], group: str, minimum: int) -> None:
    body["metadata"].setdefault("labels", {}).update(
        {LABEL_ONLY_NAME: group, LABEL_ONLY_MIN: str(minimum)})


KINDS = [
    Kind("scheduler-plugins", "podgroups.scheduling.x-k8s.io",
         lambda n, m: _object("scheduling.x-k8s.io/v1alpha1", n, {"minMember": m}),
         _label(X_K8S_LABEL), "x-k8s"),
    Kind("volcano", "podgroups.scheduling.volcano.sh",
         lambda n, m: _object("scheduling.volcano.sh/v1beta1", n, {"minMember": m}),
         _annotate, "group-name"),
    Kind("kube-batch", "podgroups.scheduling.incubator.k8s.io",
         lambda n, m: _object("scheduling.incubator.k8s.io/v1alpha1", n, {"minMember": m}),
         _annotate, "group-name"),
    Kind("native", "podgroups.scheduling.k8s.io",
         lambda n, m: _object("scheduling.k8s.io/v1beta1", n,
                              {"schedulingPolicy": {"gang": {"minCount": m}}}),
         _native_mark, "native"),
    Kind("label-only", "", None, _label_only, "label"),
]


def _member(kind: Kind, name: str, group: str, minimum: int, scheduler: str,
            cpu: str = "1") -> dict[str, Any]:
    body = pod_body(name, scheduler=scheduler, cpu=cpu)
    kind.mark(body, group, minimum)
    return body


def _create_group(kube: KubeClient, kind: Kind, namespace: str, name: str,
                  minimum: int) -> None:
    if kind.make is not None:
        kube.create(kind.path(namespace), kind.make(name, minimum))


def _bound(kube: KubeClient, namespace: str, prefix: str) -> int:
    return sum(1 for p in list_pods(kube, namespace)
               if p["metadata"]["name"].startswith(f"{prefix}-") and p["spec"].get("nodeName"))


def _unschedulable(kube: KubeClient, namespace: str, pod: str) -> bool:
    return pod_condition(kube, namespace, pod, "PodScheduled").get("reason") == "Unschedulable"


def _shown(local_cluster: LocalCluster, kind: Kind, namespace: str, name: str) -> str:
    """What ``kubectl get`` prints for the group (its status as this scheduler wrote it)."""
    return kubectl(local_cluster, "get", kind.resource, name, "-n", namespace,
                   "-o", "json").stdout


def _status(local_cluster: LocalCluster, kind: Kind, namespace: str,
            name: str) -> dict[str, Any]:
    return dict(json.loads(_shown(local_cluster, kind, namespace, name)).get("status") or {})


def _placed(kind: Kind, status: dict[str, Any]) -> bool:
    """Whether the written status says the gang was placed, in its kind's words."""
    if kind.name == "native":
        return any(c.get("type") == "PodGroupInitiallyScheduled" and c.get("status") == "True"
                   for c in status.get("conditions") or ())
    return status.get("phase") in ("Scheduled", "Running")


@pytest.fixture
def kind_served(local_cluster: LocalCluster, request: pytest.FixtureRequest) -> Kind:
    kind: Kind = request.param
    if kind.name == "native":  # the local control plane serves its release's Workload API
        assert local_cluster.workload_api.group_version == "scheduling.k8s.io/v1beta1", (
            f"the native source needs v1.37's API; this cluster serves "
            f"{local_cluster.workload_api.group_version}")
    return kind


@pytest.mark.parametrize("kind_served", KINDS, ids=[k.name for k in KINDS], indirect=True)
def test_two_racing_gangs_with_room_for_one_one_is_bound_whole(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        local_cluster: LocalCluster, kind_served: Kind) -> None:
    kind = kind_served
    sched = start_scheduler()
    make_node(f"race-{namespace}", cpu="3")
    for gang in ("a", "b"):
        _create_group(kube, kind, namespace, gang, 3)
    for i in range(3):
        for gang in ("a", "b"):
            create_pod(kube, namespace, _member(kind, f"{gang}-{i}", gang, 3, sched.name))
    wait_until(lambda: sorted([_bound(kube, namespace, "a"), _bound(kube, namespace, "b")])
               == [0, 3], what="one gang bound whole")
    loser = "a" if _bound(kube, namespace, "a") == 0 else "b"
    wait_until(lambda: _unschedulable(kube, namespace, f"{loser}-0"),
               what="the losing gang marked Unschedulable")
    assert sorted([_bound(kube, namespace, "a"), _bound(kube, namespace, "b")]) == [0, 3]
    if kind.resource:
        winner = "b" if loser == "a" else "a"
        wait_until(lambda: _placed(kind, _status(local_cluster, kind, namespace, winner)),
                   what=f"kubectl get {kind.resource} {winner} showing it placed")
        assert not _placed(kind, _status(local_cluster, kind, namespace, loser))
    sched.watcher.check_settled()


@pytest.mark.parametrize("kind_served", KINDS, ids=[k.name for k in KINDS], indirect=True)
def test_a_gang_with_room_for_five_of_six_binds_none_until_room_is_added(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        kind_served: Kind) -> None:
    kind = kind_served
    sched = start_scheduler()
    make_node(f"five-{namespace}", cpu="5")
    _create_group(kube, kind, namespace, "g", 6)
    for i in range(6):
        create_pod(kube, namespace, _member(kind, f"g-{i}", "g", 6, sched.name))
    wait_until(lambda: _unschedulable(kube, namespace, "g-0"), what="g-0 Unschedulable")
    assert _bound(kube, namespace, "g") == 0
    text = explain(kube, namespace, f"g@{kind.tag}")  # as the pods' messages name the gang
    assert "Members (6 of minMember 6)" in text and "Waiting for: 6 more members" in text, text
    make_node(f"one-{namespace}", cpu="1")
    wait_until(lambda: _bound(kube, namespace, "g") == 6, what="all 6 bound")
    sched.watcher.check_settled()


def _with_volcano() -> dict[str, Any]:
    """A scheduler of its own name that also answers to ``volcano``."""
    return {"schedulerNames": [f"cs-{uuid.uuid4().hex[:8]}", "volcano"]}


def _events(kube: KubeClient, namespace: str, reason: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{namespace}/events").get("items") or []
    return [e for e in items if e.get("reason") == reason]


def test_the_highest_marker_wins_and_the_conflict_is_a_warning(
        kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: StartScheduler) -> None:
    sched = start_scheduler()
    make_node(f"prec-{namespace}", cpu="4")
    create_podgroup(kube, namespace, "g", 5)  # ours: would wait for five members
    _create_group(kube, KINDS[0], namespace, "g", 1)  # scheduler-plugins: one is enough
    body = pod_body("both", scheduler=sched.name, cpu="1", group="g")
    body["metadata"]["labels"][X_K8S_LABEL] = "g"
    create_pod(kube, namespace, body)
    wait_until(lambda: any(p["spec"].get("nodeName") for p in list_pods(kube, namespace)),
               what="the pod bound as a member of the scheduler-plugins group")
    wait_until(lambda: _events(kube, namespace, "GroupMarkerConflict"),
               what="a GroupMarkerConflict event")
    event = _events(kube, namespace, "GroupMarkerConflict")[0]
    assert event["type"] == "Warning"
    assert f"label {X_K8S_LABEL}=g" in event["message"]
    assert "ignored: label group.batch.scheduler.tencent.com=g" in event["message"]


KUBE_BATCH_CRD = "podgroups.scheduling.incubator.k8s.io"


def test_a_crd_installed_while_the_scheduler_runs_is_picked_up(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        local_cluster: LocalCluster) -> None:
    kind = KINDS[2]  # kube-batch
    kubectl(local_cluster, "delete", "crd", KUBE_BATCH_CRD, "--ignore-not-found",
            "--timeout=120s")
    wait_until(lambda: not exists(kube, "/apis/scheduling.incubator.k8s.io/v1alpha1"),
               what="kube-batch's API gone")
    try:
        sched = start_scheduler()
        make_node(f"late-{namespace}", cpu="2")
        for i in range(2):
            create_pod(kube, namespace, _member(kind, f"g-{i}", "g", 2, sched.name))
        wait_until(lambda: _unschedulable(kube, namespace, "g-0"), what="g-0 waiting")
        message = pod_condition(kube, namespace, "g-0", "PodScheduled").get("message", "")
        assert f'"{namespace}/g" not found (annotation {GROUP_NAME_ANNOTATION}=g)' in message
        kubectl(local_cluster, "apply", "-f", str(COMPAT / f"{KUBE_BATCH_CRD}.yaml"))
        wait_until(lambda: exists(kube, kind.path(namespace)), what="kube-batch served")
        _create_group(kube, kind, namespace, "g", 2)
        wait_until(lambda: _bound(kube, namespace, "g") == 2, timeout=90,
                   what="the gang bound once the CRD and its PodGroup exist")
        sched.watcher.check_settled()
    finally:
        kubectl(local_cluster, "apply", "-f", str(COMPAT / f"{KUBE_BATCH_CRD}.yaml"))


def test_volcano_groups_are_admitted_before_their_pods_exist_only_when_they_fit(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        local_cluster: LocalCluster) -> None:
    volcano = KINDS[1]
    start_scheduler(_with_volcano())  # a group without pods is Volcano's scheduler's to admit
    make_node(f"adm-{namespace}", cpu="4")
    kube.create(volcano.path(namespace), _object("scheduling.volcano.sh/v1beta1", "fits", {
        "minMember": 2, "minResources": {"cpu": "2"}}))
    kube.create(volcano.path(namespace), _object("scheduling.volcano.sh/v1beta1", "huge", {
        "minMember": 2, "minResources": {"cpu": "1000"}}))
    wait_until(lambda: _status(local_cluster, volcano, namespace, "fits").get("phase")
               == "Inqueue", what="the fitting group Inqueue")
    wait_until(lambda: any(c.get("reason") == "NotEnoughResources" for c in _status(
        local_cluster, volcano, namespace, "huge").get("conditions") or ()),
        what="the huge group's NotEnoughResources condition")
    huge = _status(local_cluster, volcano, namespace, "huge")
    assert huge["phase"] == "Pending"
    assert "cpu 1000 wanted" in huge["conditions"][-1]["message"]
    printed = kubectl(local_cluster, "get", volcano.resource, "-n", namespace).stdout
    assert any(line.split()[:2] == ["fits", "Inqueue"] for line in printed.splitlines()), printed
    assert any(line.split()[:2] == ["huge", "Pending"] for line in printed.splitlines()), printed


def test_status_is_written_on_the_object_where_the_owners_crd_has_no_status_subresource(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        local_cluster: LocalCluster, tmp_path: Any) -> None:
    """Volcano's own CRD has no status subresource: status is then a field of the object."""
    volcano = KINDS[1]
    source = COMPAT / f"{volcano.resource}.yaml"
    crd = yaml.safe_load(source.read_text())
    for version in crd["spec"]["versions"]:
        version.pop("subresources", None)
    bare = tmp_path / "volcano-without-status.yaml"
    bare.write_text(yaml.safe_dump(crd))
    kubectl(local_cluster, "apply", "-f", str(bare))
    try:
        probe = f"/apis/scheduling.volcano.sh/v1beta1/namespaces/{namespace}/podgroups"
        kube.create(probe, _object("scheduling.volcano.sh/v1beta1", "probe", {"minMember": 1}))
        wait_until(lambda: not exists(kube, f"{probe}/probe/status"),
                   what="the status subresource gone")
        sched = start_scheduler(_with_volcano())
        make_node(f"bare-{namespace}", cpu="2")
        _create_group(kube, volcano, namespace, "g", 2)
        wait_until(lambda: _status(local_cluster, volcano, namespace, "g").get("phase")
                   == "Inqueue", what="Inqueue written on the object")
        for i in range(2):
            create_pod(kube, namespace, _member(volcano, f"g-{i}", "g", 2, sched.name))
        wait_until(lambda: _bound(kube, namespace, "g") == 2, what="the gang bound")
        wait_until(lambda: _status(local_cluster, volcano, namespace, "g").get("phase")
                   == "Running", what="Running written on the object")
    finally:
        kubectl(local_cluster, "apply", "-f", str(source))
