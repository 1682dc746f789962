"""The PodGroup CRD: valid groups accepted, invalid ones refused with the field named."""

from __future__ import annotations

import json

import pytest

from coscheduling.localcluster import LocalCluster
from tests.integration.fixtures import kubectl


def _apply(cluster: LocalCluster, namespace: str, spec: object) -> tuple[int, str]:
    doc = {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": "PodGroup",
           "metadata": {"name": "g", "namespace": namespace}, "spec": spec}
    result = kubectl(cluster, "apply", "-f", "-", check=False, stdin=json.dumps(doc))
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("spec", [
    {"minMember": 1},
    {"minMember": 6, "maxScheduleTime": "30s"},
    {"minMember": 2, "maxScheduleTime": "1h30m", "minResources": {"cpu": "500m",
                                                                 "memory": "1Gi",
                                                                 "nvidia.com/gpu": 1}},
    {"minMember": 3, "priorityClassName": "high-priority"},
    {"minMember": 2, "topology": {"mode": "Preferred",
                                  "keys": ["example.com/rack", "topology.kubernetes.io/zone"]}},
])
def test_valid_podgroups_are_accepted(local_cluster: LocalCluster, crd: None, namespace: str,
                                      spec: object) -> None:
    code, output = _apply(local_cluster, namespace, spec)
    assert code == 0, output
    shown = kubectl(local_cluster, "get", "pg", "-n", namespace, "g").stdout
    assert "MINMEMBER" in shown and "PHASE" in shown and "SCHEDULED" in shown


@pytest.mark.parametrize(("spec", "field"), [
    ({}, "spec.minMember"),
    ({"minMember": 0}, "spec.minMember"),
    ({"minMember": -3}, "spec.minMember"),
    ({"minMember": "five"}, "spec.minMember"),
    ({"minMember": 2.5}, "spec.minMember"),
    ({"minMember": 2, "maxScheduleTime": "soon"}, "spec.maxScheduleTime"),
    ({"minMember": 2, "maxScheduleTime": 30}, "spec.maxScheduleTime"),
    ({"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources"),
    ({"minMember": 2, "minResources": "4 cpus"}, "spec.minResources"),
    ({"minMember": 2, "priorityClassName": "Not_A_Name"}, "spec.priorityClassName"),
    ({"minMember": 2, "unknownField": 1}, "unknownField"),
    ("not-an-object", "spec"),
    ({"minMember": 2, "topology": {"mode": "Sometimes", "keys": ["example.com/rack"]}},
     "spec.topology.mode"),
    ({"minMember": 2, "topology": {"mode": "required", "keys": ["example.com/rack"]}},
     "spec.topology.mode"),
    ({"minMember": 2, "topology": {"mode": "Required", "keys": []}}, "spec.topology.keys"),
    ({"minMember": 2, "topology": {"mode": "Required"}}, "spec.topology.keys"),
    ({"minMember": 2, "topology": {"keys": [""]}}, "spec.topology.keys[0]"),
    ({"minMember": 2, "topology": {"keys": ["bad key"]}}, "spec.topology.keys[0]"),
    ({"minMember": 2, "topology": {"keys": ["example.com/rack", "example.com/rack"]}},
     "spec.topology.keys[1]"),
])
def test_invalid_podgroups_are_refused_naming_the_field(
        local_cluster: LocalCluster, crd: None, namespace: str, spec: object,
        field: str) -> None:
    code, output = _apply(local_cluster, namespace, spec)
    assert code != 0, f"accepted: {spec}"
    assert field in output, output


def test_crd_has_short_names_status_subresource_and_columns(local_cluster: LocalCluster,
                                                           crd: None) -> None:
    raw = kubectl(local_cluster, "get", "crd", "podgroups.batch.scheduler.tencent.com",
                  "-o", "json").stdout
    crd_doc = json.loads(raw)
    assert set(crd_doc["spec"]["names"]["shortNames"]) == {"pg", "pgs"}
    version = crd_doc["spec"]["versions"][0]
    assert "status" in version["subresources"]
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Phase", "MinMember", "Scheduled", "Running", "Age"} <= columns
