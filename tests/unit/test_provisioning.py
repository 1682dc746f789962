"""ProvisioningRequests for gangs: their state, their pod sets, the scaleUp arguments, and
when no scale-up could help."""

from __future__ import annotations

from typing import Any

import pytest

from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.api.times import parse_rfc3339
from coscheduling.config.errors import ConfigError
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.provisioning.args import ScaleUpArgs, parse_scale_up
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
from coscheduling.provisioning.scaleup import no_shape_holds

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
