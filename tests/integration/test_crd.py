"""The PodGroup and Queue CRDs on the real API server: valid objects accepted, invalid ones
refused at admission with the field named (the tables: tests/admission_cases.py)."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.localcluster import LocalCluster
from tests.admission_cases import (
    BAD_PODGROUPS,
    BAD_QUEUES,
    GOOD_PODGROUPS,
    GOOD_QUEUES,
    podgroup,
    queue,
)
from tests.integration.fixtures import CRD_DIR, kubectl
from tests.integration.kube import wait_until


def _apply(cluster: LocalCluster, obj: dict[str, Any]) -> tuple[int, str]:
    result = kubectl(cluster, "apply", "-f", "-", check=False, stdin=json.dumps(obj))
    return result.returncode, result.stdout + result.stderr


@pytest.mark.parametrize("spec", GOOD_PODGROUPS)
def test_valid_podgroups_are_accepted(local_cluster: LocalCluster, crd: None, namespace: str,
                                      spec: object) -> None:
    code, output = _apply(local_cluster, podgroup(spec, namespace=namespace))
    assert code == 0, output
    shown = kubectl(local_cluster, "get", "pg", "-n", namespace, "g").stdout
    assert "MINMEMBER" in shown and "PHASE" in shown and "SCHEDULED" in shown


@pytest.mark.parametrize(("spec", "field"), BAD_PODGROUPS)
def test_invalid_podgroups_are_refused_naming_the_field(
        local_cluster: LocalCluster, crd: None, namespace: str, spec: object,
        field: str) -> None:
    code, output = _apply(local_cluster, podgroup(spec, namespace=namespace))
    assert code != 0, f"accepted: {spec}"
    assert f"{field}:" in output or f"{field}\"" in output, output


@pytest.fixture
def queue_name(kube: KubeClient, crd: None) -> Iterator[str]:
    """A fresh Queue name, its Queue (if made) deleted afterwards."""
    wait_until(lambda: _queues_served(kube), timeout=30, what="queues to be served")
    name = f"crd-{uuid.uuid4().hex[:8]}"
    yield name
    with contextlib.suppress(ApiError):
        kube.delete(f"/apis/batch.scheduler.tencent.com/v1/queues/{name}")


def _queues_served(kube: KubeClient) -> bool:
    try:
        kube.get("/apis/batch.scheduler.tencent.com/v1/queues")
    except ApiError:
        return False
    return True


@pytest.mark.parametrize("spec", GOOD_QUEUES)
def test_valid_queues_are_accepted(local_cluster: LocalCluster, queue_name: str,
                                   spec: object) -> None:
    code, output = _apply(local_cluster, queue(spec, queue_name))
    assert code == 0, output


@pytest.mark.parametrize(("spec", "field"), BAD_QUEUES)
def test_invalid_queues_are_refused_naming_the_field(
        local_cluster: LocalCluster, queue_name: str, spec: object, field: str) -> None:
    code, output = _apply(local_cluster, queue(spec, queue_name))
    assert code != 0, f"accepted: {spec}"
    assert f"{field}:" in output or f"{field}\"" in output, output


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


def _without_rules(node: Any) -> Any:
    """The schema without its CEL rules: the CRD as it was before they were added."""
    if isinstance(node, dict):
        return {k: _without_rules(v) for k, v in node.items() if k != "x-kubernetes-validations"}
    if isinstance(node, list):
        return [_without_rules(v) for v in node]
    return node


def test_a_group_stored_before_the_rules_keeps_its_status_written_until_fixed(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str) -> None:
    """An upgrade that adds the rules (helm upgrade) over a group they refuse: the scheduler
    still writes its status (the refusal's reason goes there), labels still change, a spec
    change that leaves it wrong is refused, and the fix is accepted."""
    path = CRD_DIR / "podgroups.batch.scheduler.tencent.com.yaml"
    current = yaml.safe_load(path.read_text())
    bad = {"minMember": 2, "minGroups": 3, "subGroups": [{"name": "a", "minMember": 1},
                                                         {"name": "b", "minMember": 1}]}
    try:
        kubectl(local_cluster, "apply", "-f", "-", stdin=json.dumps(_without_rules(current)))
        wait_until(lambda: _apply(local_cluster, podgroup(bad, "old", namespace))[0] == 0,
                   timeout=30, what="the rule-less CRD to take the group")
    finally:
        kubectl(local_cluster, "apply", "-f", str(path))
    wait_until(lambda: _apply(local_cluster, podgroup(bad, "new", namespace))[0] != 0,
               timeout=30, what="the rules to be served again")
    group = f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups/old"
    kube.patch(f"{group}/status", {"status": {"phase": "Pending"}})
    kube.patch(group, {"metadata": {"labels": {"team": "a"}}})
    with pytest.raises(ApiError) as refused:
        kube.patch(group, {"spec": {"minMember": 3}})
    assert "spec.minGroups" in str(refused.value)
    kube.patch(group, {"spec": {"minGroups": 2}})
    assert kube.get(group)["status"]["phase"] == "Pending"
