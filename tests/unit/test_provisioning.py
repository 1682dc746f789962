"""ProvisioningRequests for gangs: their state, their pod sets, the scaleUp arguments, and
when no scale-up could help."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.api.queues import parse_queue
from coscheduling.api.runtimes import SCALE_UP_WAIT_ANNOTATION
from coscheduling.api.times import parse_rfc3339
from coscheduling.config.errors import ConfigError
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.provisioning.args import ScaleUpArgs, parse_scale_up, scale_up_wait
from coscheduling.provisioning.requests import (
    ATOMIC_CLASS,
    CLASS_ANNOTATION,
    CONSUME_ANNOTATION,
    consume_patch,
    pod_sets,
    request_body,
    request_state,
    template_body,
)
from coscheduling.provisioning.scaleup import ScaleUps, no_shape_holds
from coscheduling.provisioning.worker import ApiWorker

T0 = "2026-11-28T00:00:00Z"


def _pod(name: str, gpu: str = "1", **spec: Any) -> Pod:
    resources = {"requests": {"cpu": "1", "nvidia.com/gpu": gpu}}
    return parse_pod({"metadata": {"name": name, "namespace": "ns", "uid": name},
                      "spec": {"containers": [{"name": "main", "resources": resources}],
                               **spec}})


def _conditions(*pairs: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": [
        {"type": kind, "status": status, "reason": f"R{kind}", "message": f"m{kind}",
         "lastTransitionTime": T0} for kind, status in pairs]}}


@pytest.mark.parametrize(("conditions", "state"), [
    ((), "Pending"),
    ((("Accepted", "True"),), "Accepted"),
    ((("Accepted", "True"), ("Provisioned", "False")), "Accepted"),
    ((("Accepted", "True"), ("Provisioned", "True")), "Provisioned"),
    ((("Accepted", "True"), ("Failed", "True")), "Failed"),
    ((("Provisioned", "True"), ("BookingExpired", "True")), "BookingExpired"),
    ((("Provisioned", "True"), ("CapacityRevoked", "True")), "CapacityRevoked"),
])
def test_request_state_reads_the_conditions(conditions: tuple[tuple[str, str], ...],
                                            state: str) -> None:
    found = request_state(_conditions(*conditions))
    assert found.state == state
    if state != "Pending":
        assert (found.reason, found.message) == (f"R{state}", f"m{state}")
        assert found.since == parse_rfc3339(T0)


def test_pod_sets_count_members_of_one_shape_together() -> None:
    members = [_pod("a"), _pod("b"), _pod("c", gpu="2"), _pod("d"),
               _pod("e", nodeSelector={"pool": "x"})]
    assert [(p.name, n) for p, n in pod_sets(members)] == [("a", 3), ("c", 1), ("e", 1)]


def test_request_and_templates_are_owned_by_the_podgroup() -> None:
    group = parse_podgroup({"apiVersion": "batch.scheduler.tencent.com/v1",
                            "metadata": {"name": "train", "namespace": "ns", "uid": "u1"},
                            "spec": {"minMember": 8}})
    raw = {"metadata": {"name": "train-0", "labels": {"app": "x"}},
           "spec": {"nodeName": "n1", "containers": [{"name": "main"}]}}
    template = template_body("train-gang-1-0", group, raw)
    assert "nodeName" not in template["template"]["spec"]
    assert template["template"]["metadata"]["labels"] == {"app": "x"}
    body = request_body("train-gang-1", group, ATOMIC_CLASS, [("train-gang-1-0", 8)])
    assert body["spec"]["podSets"] == [{"podTemplateRef": {"name": "train-gang-1-0"},
                                        "count": 8}]
    for made in (template, body):
        owner = made["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner["uid"]) == ("PodGroup", "train", "u1")
    # The autoscaler matches a pod to its request by both annotations.
    assert consume_patch("train-gang-1", ATOMIC_CLASS)["metadata"]["annotations"] == {
        CONSUME_ANNOTATION: "train-gang-1", CLASS_ANNOTATION: ATOMIC_CLASS}


@pytest.mark.parametrize(("raw", "field"), [
    ({"enabled": "yes"}, "args.scaleUp.enabled"),
    ({"retrySeconds": 0}, "args.scaleUp.retrySeconds"),
    ({"retrySeconds": 60, "maxRetrySeconds": 30}, "args.scaleUp.maxRetrySeconds"),
    ({"provisioningClassName": ""}, "args.scaleUp.provisioningClassName"),
    ({"class": "x"}, "args.scaleUp.class"),
    ({"provisionedHoldSeconds": 0}, "args.scaleUp.provisionedHoldSeconds"),
    ({"provisionedHoldSeconds": "10m"}, "args.scaleUp.provisionedHoldSeconds"),
])
def test_bad_scale_up_arguments_name_the_field(raw: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_scale_up(raw)
    assert error.value.path == field


def test_scale_up_defaults_are_off_and_atomic() -> None:
    assert parse_scale_up({}) == ScaleUpArgs()
    assert (ScaleUpArgs().enabled, ScaleUpArgs().provisioning_class) == (False, ATOMIC_CLASS)


def _node(name: str, gpus: str) -> NodeInfo:
    return NodeInfo(name, parse_node({"metadata": {"name": name}, "status": {
        "allocatable": {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": gpus}}}))


@pytest.mark.parametrize(("gpus", "refused"), [("1", False), ("8", False), ("9", True)])
def test_no_scale_up_when_no_node_shape_could_hold_a_member(gpus: str, refused: bool) -> None:
    why = no_shape_holds([_pod("a"), _pod("big", gpu=gpus)], [_node("n1", "4"),
                                                               _node("n2", "8")])
    assert bool(why) == refused
    if refused:
        assert "member big" in why and "nvidia.com/gpu 9" in why


class RecordingApi:
    """Answers the scale-up's API calls from a dict of objects, and records the writes."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes: list[tuple[str, str]] = []

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return self.objects.get(path) or {"metadata": {"name": path.rsplit("/", 1)[-1]},
                                          "spec": {"containers": [{"name": "main"}]}}

    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]:
        self.writes.append(("create", f"{path}/{body['metadata']['name']}"))
        return dict(body)

    def delete(self, path: str, **query: Any) -> dict[str, Any]:
        self.writes.append(("delete", path))
        return {}

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> dict[str, Any]:
        self.writes.append(("patch", path))
        return {}


def _scale_ups(**args: Any) -> tuple[ScaleUps, RecordingApi, ApiWorker]:
    api, worker = RecordingApi(), ApiWorker()
    return ScaleUps(api, parse_scale_up({"enabled": True, **args}), worker), api, worker


def _settle(worker: ApiWorker) -> None:
    deadline = time.monotonic() + 10
    while not worker.idle():
        assert time.monotonic() < deadline, "the worker did not finish"
        time.sleep(0.01)


GROUP = parse_podgroup({"apiVersion": "batch.scheduler.tencent.com/v1",
                        "metadata": {"name": "train", "namespace": "ns", "uid": "u1"},
                        "spec": {"minMember": 2}})


def test_one_request_for_the_gang_then_none_until_it_ends_then_backoff_doubles() -> None:
    scale_ups, api, worker = _scale_ups(retrySeconds=10, maxRetrySeconds=15)
    nodes = [_node("n1", "8")]
    members = [_pod("train-0"), _pod("train-1")]
    said, asked = scale_ups.consider(GROUP, members, nodes, now=100.0)
    assert asked is not None and asked.name == "train-gang-1" and "asked" in said
    _settle(worker)
    assert [w for w in api.writes if w[0] == "create"] == [
        ("create", "/api/v1/namespaces/ns/podtemplates/train-gang-1-0"),
        ("create", "/apis/autoscaling.x-k8s.io/v1/namespaces/ns/provisioningrequests/"
                   "train-gang-1")]
    assert sum(1 for w in api.writes if w[0] == "patch") == 2  # both members annotated
    assert scale_ups.consider(GROUP, members, nodes, now=101.0)[1] is None
    for attempt, backoff in ((1, 10.0), (2, 15.0)):  # 10, then 20 capped at 15
        path = f"/apis/autoscaling.x-k8s.io/v1/namespaces/ns/provisioningrequests/" \
               f"train-gang-{attempt}"
        api.objects[path] = _conditions(("Failed", "True"))
        scale_ups.poll()
        _settle(worker)
        [(key, ended)] = scale_ups.changes(now=200.0)
        assert (key, ended.state.state, ended.retry_at) == (GROUP.key, "Failed", 200 + backoff)
        assert scale_ups.consider(GROUP, members, nodes, now=200.0 + backoff - 1)[1] is None
        assert scale_ups.due(200.0 + backoff - 1) == []
        assert scale_ups.due(200.0 + backoff) == [GROUP.key]  # tried again, once
        assert scale_ups.due(200.0 + backoff) == []
        again = scale_ups.consider(GROUP, members, nodes, now=200.0 + backoff)[1]
        assert again is not None and again.attempt == attempt + 1
        _settle(worker)
        assert ("delete", path) in api.writes


@pytest.mark.parametrize(("state", "delay", "now", "holds"), [
    ("", 30.0, 0.0, True),  # not asked yet: this attempt asks first
    ("Pending", 30.0, 129.0, True),
    ("Pending", 30.0, 130.0, False),  # the wait ran out
    ("Accepted", 30.0, 110.0, True),
    ("Failed", 30.0, 110.0, False),  # the autoscaler cannot help: preempt now
    ("Provisioned", 30.0, 110.0, False),
    ("Pending", 0.0, 110.0, False),  # no wait configured
])
def test_preemption_waits_for_a_scale_up_only_while_it_may_come(
        state: str, delay: float, now: float, holds: bool) -> None:
    scale_ups, api, worker = _scale_ups()
    if state:
        scale_ups.consider(GROUP, [_pod("train-0")], [_node("n1", "8")], 100.0, delay)
        _settle(worker)
        path = "/apis/autoscaling.x-k8s.io/v1/namespaces/ns/provisioningrequests/train-gang-1"
        api.objects[path] = _conditions(("Accepted", "True"), *(
            [(state, "True")] if state not in ("Pending", "Accepted") else []))
        if state != "Pending":
            scale_ups.poll()
            _settle(worker)
    assert scale_ups.holds_back_preemption(GROUP.key, delay, now) == holds


def test_scale_up_wait_annotation_on_the_podgroup() -> None:
    def group(value: str) -> Any:
        return parse_podgroup({"metadata": {"name": "g", "namespace": "ns", "annotations": {
            SCALE_UP_WAIT_ANNOTATION: value}}, "spec": {"minMember": 1}})

    assert group("2m").scale_up_wait_seconds == 120.0
    bad = group("soon")
    assert bad.scale_up_wait_seconds is None
    assert any(SCALE_UP_WAIT_ANNOTATION in w for w in bad.warnings)


@pytest.mark.parametrize(("group", "queue", "default", "wait"), [
    (None, None, 30.0, 30.0),  # the plugin's preemptionDelaySeconds
    (None, 120.0, 30.0, 120.0),  # the Queue's spec.scaleUpWaitSeconds before it
    (10.0, 120.0, 30.0, 10.0),  # the PodGroup's annotation before both
    (0.0, 120.0, 30.0, 0.0),  # a PodGroup may say "do not wait"
    (None, 0.0, 30.0, 0.0),  # and so may a Queue
])
def test_scale_up_wait_podgroup_then_queue_then_default(
        group: float | None, queue: float | None, default: float, wait: float) -> None:
    assert scale_up_wait(group, queue, default) == wait


@pytest.mark.parametrize(("raw", "seconds", "error"), [
    (None, None, ""),
    (45, 45.0, ""),
    (2.5, 2.5, ""),
    (-1, None, "spec.scaleUpWaitSeconds: must be a number of seconds >= 0, got -1"),
    ("2m", None, "spec.scaleUpWaitSeconds: must be a number of seconds >= 0, got '2m'"),
    (True, None, "spec.scaleUpWaitSeconds: must be a number of seconds >= 0, got True"),
])
def test_queue_scale_up_wait_is_read_or_refused_naming_the_field(
        raw: object, seconds: float | None, error: str) -> None:
    spec = {} if raw is None else {"scaleUpWaitSeconds": raw}
    queue = parse_queue({"metadata": {"name": "team"}, "spec": spec})
    assert queue.scale_up_wait_seconds == seconds
    assert queue.errors == ((error,) if error else ())
