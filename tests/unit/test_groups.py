"""The group sources (coscheduling.groups): which gang a pod belongs to, how each kind of
group object is read, how status is written back in each kind's shape, and every kind's
gangs scheduled all or nothing by the real scheduler (tests/simulation.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling.api import podgroups as pg
from coscheduling.api.membership import (
    GROUP_NAME,
    GROUP_NAME_ANNOTATION,
    LABEL_ONLY,
    LABEL_ONLY_MIN,
    LABEL_ONLY_NAME,
    NATIVE,
    OURS,
    SCHEDULER_PLUGINS,
    X_K8S_LABEL,
)
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config import ConfigError, parse_config
from coscheduling.groups import (
    GroupApi,
    StatusInput,
    api_for,
    kubebatch,
    labelonly,
    membership,
    native,
    ours,
    scheduled_here,
    schedulerplugins,
    volcano,
)
from coscheduling.groups.table import KindTable
from coscheduling.plugins.coscheduling import Coscheduling
from coscheduling.plugins.registry import default_registry
from tests.simulation import GROUP_LABEL, SimCluster

OUR_MARK = {"labels": {GROUP_LABEL: "g"}}
X_K8S_MARK = {"labels": {X_K8S_LABEL: "g"}}
VOLCANO_MARK = {"annotations": {GROUP_NAME_ANNOTATION: "g"}}
NATIVE_MARK = {"spec": {"schedulingGroup": {"podGroupName": "g"}}}


def label_only_mark(minimum: str = "3", name: str = "g") -> dict[str, Any]:
    return {"labels": {LABEL_ONLY_NAME: name, LABEL_ONLY_MIN: minimum}}


def merged(*marks: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"labels": {}, "annotations": {}, "spec": {}}
    for mark in marks:
        for part, values in mark.items():
            out[part].update(values)
    return out


def member(mark: dict[str, Any]) -> Any:
    return membership("ns", mark.get("labels", {}), mark.get("annotations", {}),
                      mark.get("spec", {}))


@pytest.mark.parametrize(("marks", "key", "tag", "ignored"), [
    ([OUR_MARK], "ns/g", OURS, 0),
    ([X_K8S_MARK], "ns/g@x-k8s", SCHEDULER_PLUGINS, 0),
    ([VOLCANO_MARK], "ns/g@group-name", GROUP_NAME, 0),
    ([NATIVE_MARK], "ns/g@native", NATIVE, 0),
    ([label_only_mark()], "ns/g@label", LABEL_ONLY, 0),
    # precedence: native, scheduler-plugins, Volcano/kube-batch, ours, label-only
    ([label_only_mark(), OUR_MARK], "ns/g", OURS, 1),
    ([OUR_MARK, VOLCANO_MARK], "ns/g@group-name", GROUP_NAME, 1),
    ([VOLCANO_MARK, X_K8S_MARK, OUR_MARK], "ns/g@x-k8s", SCHEDULER_PLUGINS, 2),
    ([X_K8S_MARK, NATIVE_MARK, label_only_mark()], "ns/g@native", NATIVE, 2),
])
def test_a_pod_belongs_to_its_highest_marker(marks: list[dict[str, Any]], key: str, tag: str,
                                             ignored: int) -> None:
    found = member(merged(*marks))
    assert (found.key, found.tag, len(found.ignored), found.error) == (key, tag, ignored, "")


def test_no_marker_no_group() -> None:
    assert member({}).key == ""


@pytest.mark.parametrize(("mark", "error"), [
    ({"labels": {LABEL_ONLY_NAME: "g"}}, f"metadata.labels[{LABEL_ONLY_MIN}]: a label-only "
                                         "group needs both"),
    ({"labels": {LABEL_ONLY_MIN: "2"}}, f"metadata.labels[{LABEL_ONLY_NAME}]"),
    (label_only_mark("0"), f"metadata.labels[{LABEL_ONLY_MIN}]: must be an integer >= 1, "
                           "got '0'"),
    (label_only_mark("two"), f"metadata.labels[{LABEL_ONLY_MIN}]: must be an integer >= 1, "
                             "got 'two'"),
    ({"annotations": {GROUP_NAME_ANNOTATION: "Not_A_Name"}},
     f"metadata.annotations[{GROUP_NAME_ANNOTATION}]: 'Not_A_Name' is not a valid"),
    ({"spec": {"schedulingGroup": {}}}, "spec.schedulingGroup.podGroupName: must name"),
])
def test_a_malformed_marker_is_an_error_naming_it(mark: dict[str, Any], error: str) -> None:
    found = member(mark)
    assert found.key == "" and found.error.startswith(error), found.error
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns", **mark},
                     "spec": {"containers": [{"name": "c"}], **mark.get("spec", {})}})
    assert pod.parse_error.startswith(error)


def obj(spec: Any, status: dict[str, Any] | None = None, name: str = "g") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": "u"}, "spec": spec,
            "status": status or {}}


@pytest.mark.parametrize(("api", "spec", "expect"), [
    (schedulerplugins.API, {"minMember": 4, "minResources": {"cpu": "4"}},
     {"min_member": 4, "min_resources": {"cpu": 4000}, "max_schedule_time": None}),
    (schedulerplugins.API, {"minMember": 2, "scheduleTimeoutSeconds": 0},
     {"max_schedule_time": None}),  # 0: the scheduler's default, as the MPI operator means it
    (schedulerplugins.API, {"minMember": 2, "scheduleTimeoutSeconds": 30},
     {"max_schedule_time": 30.0}),
    (volcano.API, {"minMember": 3, "queue": "research", "priorityClassName": "high"},
     {"min_member": 3, "queue": "research", "priority_class_name": "high"}),
    (volcano.API, {"minMember": 0}, {"min_member": 1}),  # no gang: each pod may go alone
    (volcano.API, {}, {"min_member": 1, "queue": "default"}),
    (kubebatch.API, {"minMember": 6, "queue": "q"}, {"min_member": 6, "queue": "q"}),
    (native.API, {"schedulingPolicy": {"gang": {"minCount": 5}}}, {"min_member": 5}),
    (native.API, {"schedulingPolicy": {"basic": {}}}, {"min_member": 1}),
    (native.API, {"schedulingPolicy": {"gang": {"minCount": 2}},
                  "schedulingConstraints": {"topology": [{"key": "rack"}]}},
     {"topology": pg.Topology(pg.TOPOLOGY_REQUIRED, ("rack",))}),
])
def test_each_kind_is_read_into_one_model(api: GroupApi, spec: dict[str, Any],
                                          expect: dict[str, Any]) -> None:
    record = api.parse(obj(spec))
    assert record.errors == ()
    assert {name: getattr(record, name) for name in expect} == expect
    assert record.key == f"ns/g@{api.tag}" and api_for(record) is api


@pytest.mark.parametrize(("api", "spec", "error"), [
    (schedulerplugins.API, {"minMember": 0}, "spec.minMember: must be >= 1, got 0"),
    (schedulerplugins.API, {"minMember": 2, "scheduleTimeoutSeconds": -1},
     "spec.scheduleTimeoutSeconds: must be an integer >= 0, got -1"),
    (volcano.API, {"minMember": 2, "minTaskMember": {"worker": -1}},
     "spec.minTaskMember[worker]: must be an integer >= 0, got -1"),
    (volcano.API, {"minMember": 2, "minTaskMember": {"w": 1}, "subGroupPolicy": [{}]},
     "spec.subGroupPolicy: not implemented together with minTaskMember"),
    (volcano.API, {"minMember": 2, "subGroupPolicy": [
        {"subGroupSize": 2, "matchLabelKeys": ["r"], "labelSelector": {"a": "b"}}]},
     "spec.subGroupPolicy[0].labelSelector: not implemented by this scheduler"),
    (volcano.API, {"minMember": 2, "subGroupPolicy": [{"subGroupSize": 2}]},
     "spec.subGroupPolicy[0].matchLabelKeys: must list the member label keys"),
    (volcano.API, {"minMember": "3"}, "spec.minMember: must be an integer >= 0, got '3'"),
    (kubebatch.API, {"minMember": 2, "queue": "Bad Queue"},
     "spec.queue: 'Bad Queue' is not a valid Queue name"),
    (native.API, {"schedulingPolicy": {"gang": {"minCount": 2}, "basic": {}}},
     "spec.schedulingPolicy: must set exactly one of gang or basic"),
    (native.API, {"schedulingPolicy": {"gang": {}}},
     "spec.schedulingPolicy.gang.minCount: must be an integer >= 1, got None"),
    (native.API, {"schedulingPolicy": {"basic": {}}, "resourceClaims": [{"name": "x"}]},
     "spec.resourceClaims: dynamic resource allocation is not implemented"),
    (native.API, "nonsense", "spec: required, and must be an object"),
])
def test_a_malformed_group_object_says_which_field(api: GroupApi, spec: Any,
                                                   error: str) -> None:
    record = api.parse(obj(spec))
    assert any(e.startswith(error) for e in record.errors), record.errors


def status_of(ours_phase: str, **extra: Any) -> dict[str, Any]:
    return {"phase": ours_phase, "running": 0, "succeeded": 0, "failed": 0, "scheduled": 0,
            "conditions": [], **extra}


def test_scheduler_plugins_status_keeps_only_its_schema_fields() -> None:
    record = schedulerplugins.API.parse(obj({"minMember": 2}))
    shaped = schedulerplugins.API.shape(StatusInput(record, status_of(
        pg.PHASE_SCHEDULED, occupiedBy="Job/j/u", scheduleStartTime="t",
        conditions=[{"type": "Scheduled"}])))
    assert shaped == {"phase": "Scheduled", "occupiedBy": "Job/j/u", "running": 0,
                      "succeeded": 0, "failed": 0, "scheduleStartTime": "t"}


@pytest.mark.parametrize(("ours_phase", "last_written", "fits", "phase"), [
    (pg.PHASE_PRE_SCHEDULING, "", True, volcano.INQUEUE),  # admitted before pods exist
    (pg.PHASE_PRE_SCHEDULING, "", False, volcano.PENDING),
    (pg.PHASE_PRE_SCHEDULING, "Pending", False, volcano.PENDING),
    (pg.PHASE_SCHEDULING, volcano.INQUEUE, False, volcano.INQUEUE),  # never back to Pending
    (pg.PHASE_SCHEDULED, volcano.INQUEUE, True, volcano.RUNNING),
    (pg.PHASE_RUNNING, volcano.RUNNING, True, volcano.RUNNING),
    (pg.PHASE_FINISHED, volcano.RUNNING, True, volcano.COMPLETED),
    (pg.PHASE_FAILED, volcano.RUNNING, True, volcano.UNKNOWN),
])
def test_volcano_admission_phases(ours_phase: str, last_written: str, fits: bool,
                                  phase: str) -> None:
    for api in (volcano.API, kubebatch.API):
        record = api.parse(obj({"minMember": 2}, {"phase": last_written}))
        shaped = api.shape(StatusInput(record, status_of(ours_phase), fits, "cpu short"))
        assert shaped["phase"] == phase
        unschedulable = [c for c in shaped["conditions"] if c["type"] == "Unschedulable"]
        if phase == volcano.PENDING:
            assert unschedulable[0]["reason"] == "NotEnoughResources"
            assert "cpu short" in unschedulable[0]["message"]
        else:
            assert not unschedulable


def test_native_status_is_the_initially_scheduled_condition_which_stays_true() -> None:
    record = native.API.parse(obj({"schedulingPolicy": {"gang": {"minCount": 2}}}))
    waiting = native.API.shape(StatusInput(record, status_of(pg.PHASE_SCHEDULING, conditions=[
        {"type": "Unschedulable", "message": "2 of 3 fit"}])))
    assert waiting["conditions"][0] == {"type": native.SCHEDULED, "status": "False",
                                        "reason": "Unschedulable", "message": "2 of 3 fit"}
    placed = native.API.shape(StatusInput(record, status_of(pg.PHASE_SCHEDULED)))
    assert placed["conditions"][0]["status"] == "True"
    seen = native.API.parse(obj({"schedulingPolicy": {"gang": {"minCount": 2}}},
                                {"conditions": [{"type": native.SCHEDULED, "status": "True"}]}))
    later = native.API.shape(StatusInput(seen, status_of(pg.PHASE_PRE_SCHEDULING)))
    assert later["conditions"][0]["status"] == "True"


def test_ours_status_is_written_as_built() -> None:
    record = ours.API.parse(obj({"minMember": 2}))
    status = status_of(pg.PHASE_SCHEDULED, conditions=[{"type": "Frozen"}])
    assert ours.API.shape(StatusInput(record, status)) == {"reservation": None, **status}


def test_volcano_object_is_used_before_kube_batch_one_of_the_same_name() -> None:
    table = KindTable()
    batch = kubebatch.API.parse(obj({"minMember": 6}))
    vc = volcano.API.parse(obj({"minMember": 2}))
    assert table.put(batch) is batch
    assert table.put(vc) is vc
    assert table.put(batch) is vc and table.shadowed(vc) == [batch]
    assert table.remove(vc) is batch
    assert table.remove(batch) is None


# -- all or nothing, for every kind (seed 001: two gangs, room for one; seed 000: room for
# five of six) -------------------------------------------------------------------------------

def add_group(sim: SimCluster, api: GroupApi, name: str, minimum: int) -> None:
    spec: dict[str, Any] = ({"schedulingPolicy": {"gang": {"minCount": minimum}}}
                            if api is native.API else {"minMember": minimum})
    sim.groups.on_add(api.parse(obj(spec, name=name)))


def marked(tag: str, group: str, minimum: int) -> dict[str, Any]:
    return {SCHEDULER_PLUGINS: {"labels": {X_K8S_LABEL: group}},
            GROUP_NAME: {"annotations": {GROUP_NAME_ANNOTATION: group}},
            NATIVE: {"spec": {"schedulingGroup": {"podGroupName": group}}},
            OURS: {"labels": {GROUP_LABEL: group}},
            LABEL_ONLY: label_only_mark(str(minimum), group)}[tag]


def add_member(sim: SimCluster, name: str, mark: dict[str, Any], cpu: str = "1",
               scheduler: str = "batch-scheduler") -> Pod:
    sim._seq += 1
    pod = parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"u-{name}",
                     "resourceVersion": str(sim._seq),
                     "creationTimestamp": f"2026-01-01T00:00:{sim._seq:02d}Z",
                     "labels": mark.get("labels", {}),
                     "annotations": mark.get("annotations", {})},
        "spec": {"schedulerName": scheduler, **mark.get("spec", {}),
                 "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}})
    assert not pod.parse_error, pod.parse_error
    sim.pods.on_add(pod)
    return pod


KINDS = [(volcano.API, GROUP_NAME), (kubebatch.API, GROUP_NAME),
         (schedulerplugins.API, SCHEDULER_PLUGINS), (native.API, NATIVE), (ours.API, OURS),
         (None, LABEL_ONLY)]


def bound(sim: SimCluster, prefix: str) -> int:
    return sum(1 for key in sim.bound if key.startswith(f"ns/{prefix}-"))


@pytest.mark.parametrize(("api", "tag"), KINDS)
def test_two_racing_gangs_with_room_for_one_one_is_bound_whole(
        sim: SimCluster, api: GroupApi | None, tag: str) -> None:
    sim.add_node("n1", cpu="3")
    for gang in ("a", "b"):
        if api is not None:
            add_group(sim, api, gang, 3)
    for i in range(3):
        for gang in ("a", "b"):
            add_member(sim, f"{gang}-{i}", marked(tag, gang, 3))
    sim.run()
    assert sorted((bound(sim, "a"), bound(sim, "b"))) == [0, 3]


@pytest.mark.parametrize(("api", "tag"), KINDS)
def test_a_gang_with_room_for_five_of_six_binds_none(sim: SimCluster, api: GroupApi | None,
                                                    tag: str) -> None:
    sim.add_node("n1", cpu="5")
    if api is not None:
        add_group(sim, api, "g", 6)
    for i in range(6):
        add_member(sim, f"g-{i}", marked(tag, "g", 6))
    sim.run()
    assert bound(sim, "g") == 0
    sim.add_node("n2", cpu="1")
    sim.run()
    assert bound(sim, "g") == 6


def test_label_only_group_is_fixed_by_its_first_member_and_refuses_a_disagreeing_one(
        sim: SimCluster) -> None:
    sim.add_node("n1", cpu="8")
    add_member(sim, "g-0", label_only_mark("2"))
    add_member(sim, "g-1", label_only_mark("3"))
    group = sim.scheduler.listers.podgroup("ns/g@label")
    assert group is not None and group.min_member == 2
    refusal = labelonly.disagreement(sim.scheduler.cache.pod("ns/g-1"), group)  # type: ignore[arg-type]
    assert refusal.startswith(f"label {LABEL_ONLY_MIN}=3 disagrees with the group's "
                              "min-available 2")
    sim.run()
    assert "ns/g-1" not in sim.bound
    for key in ("ns/g-0", "ns/g-1"):
        sim.delete_pod(key)
    assert sim.scheduler.listers.podgroup("ns/g@label") is None  # gone with its last member


def test_a_pod_waits_for_its_missing_group_object_with_the_kinds_named(sim: SimCluster) -> None:
    sim.add_node("n1")
    add_member(sim, "g-0", VOLCANO_MARK)
    result = sim.scheduler.schedule_one(timeout=0.1)
    assert result is not None
    assert result.status.message.startswith(
        'Volcano PodGroup (scheduling.volcano.sh/v1beta1) or kube-batch PodGroup '
        '(scheduling.incubator.k8s.io/v1alpha1) "ns/g" not found (annotation '
        f'{GROUP_NAME_ANNOTATION}=g)')
    add_group(sim, kubebatch.API, "g", 1)
    sim.run()
    assert sim.bound == {"ns/g-0": "n1"}


def test_same_named_groups_of_two_kinds_are_two_gangs(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="4")
    add_group(sim, ours.API, "g", 2)
    add_group(sim, schedulerplugins.API, "g", 3)
    for i in range(2):
        add_member(sim, f"ours-{i}", OUR_MARK)
    for i in range(2):  # one short of its minMember 3
        add_member(sim, f"x-{i}", X_K8S_MARK)
    sim.run()
    assert bound(sim, "ours") == 2 and bound(sim, "x") == 0


@pytest.fixture
def volcano_sim() -> Iterator[SimCluster]:
    """A scheduler that also runs under Volcano's name: Volcano groups without members yet
    are its own to admit (and to write status for)."""
    cluster = SimCluster({"schedulerNames": ["batch-scheduler", "volcano"]})
    yield cluster
    cluster.close()
    assert not cluster.violations, cluster.violations


def test_volcano_group_is_admitted_when_its_min_resources_fit(volcano_sim: SimCluster) -> None:
    sim = volcano_sim
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    sim.add_node("n1", cpu="4")
    sim.groups.on_add(volcano.API.parse(obj({"minMember": 4, "minResources": {"cpu": "6"}})))
    made_of = plugin.status_of("ns/g@group-name")
    assert made_of is not None and not made_of.fits
    assert volcano.API.shape(made_of)["phase"] == volcano.PENDING
    assert "cpu 6 wanted, 4 free" in made_of.why_not
    changed: list[str] = []
    sim.scheduler.notices.listeners.append(changed.append)
    sim.add_node("n2", cpu="4")  # room appears: the waiting group's status is looked at again
    assert "ns/g@group-name" in changed
    made_of = plugin.status_of("ns/g@group-name")
    assert made_of is not None and made_of.fits
    assert volcano.API.shape(made_of)["phase"] == volcano.INQUEUE


def test_scheduler_takes_pods_for_every_name_it_is_given() -> None:
    sim = SimCluster({"schedulerNames": ["batch-scheduler", "volcano"]})
    try:
        sim.add_node("n1")
        add_group(sim, volcano.API, "g", 2)
        for i in range(2):
            add_member(sim, f"g-{i}", VOLCANO_MARK, scheduler="volcano")
        add_member(sim, "other", {}, scheduler="default-scheduler")
        sim.run()
        assert sorted(sim.bound) == ["ns/g-0", "ns/g-1"]
    finally:
        sim.close()


@pytest.mark.parametrize(("doc", "field"), [
    ({"schedulerName": "a", "schedulerNames": ["a"]}, "schedulerNames"),
    ({"schedulerNames": []}, "schedulerNames"),
    ({"schedulerNames": ["a", "a"]}, "schedulerNames[1]"),
    ({"schedulerNames": ["a", ""]}, "schedulerNames[1]"),
    ({"schedulerNames": "a"}, "schedulerNames"),
])
def test_bad_scheduler_names_are_refused_naming_the_field(doc: dict[str, Any],
                                                          field: str) -> None:
    base = {"apiVersion": "config.batch.scheduler.tencent.com/v1",
            "kind": "SchedulerConfiguration"}
    with pytest.raises(ConfigError) as raised:
        parse_config({**base, **doc}, default_registry())
    assert raised.value.path == field


def test_scheduler_names_first_is_primary() -> None:
    config = parse_config({"apiVersion": "config.batch.scheduler.tencent.com/v1",
                           "kind": "SchedulerConfiguration",
                           "schedulerNames": ["batch-scheduler", "volcano"]},
                          default_registry())
    assert config.scheduler_name == "batch-scheduler"
    assert config.scheduler_names == ("batch-scheduler", "volcano")


def test_an_invalid_group_says_why_on_its_own_status(volcano_sim: SimCluster) -> None:
    sim = volcano_sim
    """A producer that waits on the group's status (the training operator on Volcano's
    phase) creates no pod to carry the reason: the group itself says what is wrong."""
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    sim.add_node("n1")
    sim.groups.on_add(volcano.API.parse(obj({"minMember": 2, "networkTopology": {"a": 1}})))
    made_of = plugin.status_of("ns/g@group-name")
    assert made_of is not None
    shaped = volcano.API.shape(made_of)
    assert shaped["phase"] == volcano.PENDING
    (condition,) = shaped["conditions"]
    assert (condition["type"], condition["reason"]) == ("Unschedulable", "InvalidSpec")
    assert "spec.networkTopology: not implemented" in condition["message"]


@pytest.mark.parametrize(("mark", "key"), [
    ({"labels": {GROUP_LABEL: ""}}, ""),  # an empty value is no marker (a rendered template)
    ({"labels": {X_K8S_LABEL: "", GROUP_LABEL: "g"}}, "ns/g"),
    # a malformed marker below the one the pod follows is only ignored
    (merged(X_K8S_MARK, label_only_mark("0")), "ns/g@x-k8s"),
    (merged(OUR_MARK, {"annotations": {GROUP_NAME_ANNOTATION: ""}}), "ns/g"),
])
def test_empty_and_lower_malformed_markers(mark: dict[str, Any], key: str) -> None:
    found = member(mark)
    assert (found.key, found.error) == (key, "")


def test_a_malformed_marker_costs_nothing_else_of_the_pod() -> None:
    """A bound pod's requests still count on its node; a pending one is still ours, refused."""
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns",
                                  "labels": {LABEL_ONLY_NAME: "g"}},
                     "spec": {"nodeName": "n1", "schedulerName": "batch-scheduler",
                              "containers": [{"name": "c", "resources": {
                                  "requests": {"cpu": "4"}}}]},
                     "status": {"phase": "Running"}})
    assert (pod.node_name, pod.scheduler_name, pod.phase, pod.requests["cpu"]) == (
        "n1", "batch-scheduler", "Running", 4000)
    assert pod.parse_error.startswith(f"metadata.labels[{LABEL_ONLY_MIN}]")


@pytest.mark.parametrize(("api", "members", "names", "owned"), [
    (ours.API, [], ["a"], True),
    (schedulerplugins.API, ["a"], ["a"], True),
    (schedulerplugins.API, ["other"], ["a"], False),  # another scheduler's gang
    (schedulerplugins.API, [], ["a"], False),
    (native.API, [], ["a"], False),  # kube-scheduler's, until a member asks for us
    (volcano.API, [], ["a", "volcano"], True),  # admitted here before its pods exist
    (volcano.API, [], ["a"], False),  # Volcano's own scheduler admits it
    (kubebatch.API, [], ["kube-batch"], True),
    (volcano.API, ["volcano"], ["a"], False),
])
def test_status_is_written_only_for_groups_scheduled_here(
        api: GroupApi, members: list[str], names: list[str], owned: bool) -> None:
    spec = ({"schedulingPolicy": {"gang": {"minCount": 2}}} if api is native.API
            else {"minMember": 2})
    assert scheduled_here(api.parse(obj(spec)), members, names) is owned


def test_groups_admitted_in_one_pass_share_the_room(volcano_sim: SimCluster) -> None:
    sim = volcano_sim
    """Two groups that each fit, but not together: the second is not admitted before the
    first's admission comes back through the watch."""
    plugin = sim.scheduler.framework.instances["Coscheduling"]
    assert isinstance(plugin, Coscheduling)
    sim.add_node("n1", cpu="4")
    for name in ("first", "second"):
        sim.groups.on_add(volcano.API.parse(obj({"minMember": 2, "minResources": {"cpu": "3"}},
                                                name=name)))
    first = plugin.status_of("ns/first@group-name")
    second = plugin.status_of("ns/second@group-name")
    assert first is not None and first.fits
    assert second is not None and not second.fits
