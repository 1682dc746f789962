"""Parsing of quantities, pods and PodGroups from the API's JSON."""

from __future__ import annotations

import pytest

from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import DEFAULT_MEMORY, DEFAULT_MILLI_CPU, parse_pod
from coscheduling.api.quantity import QuantityError, format_units, to_units
from coscheduling.api.times import parse_duration


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1", 1000), ("cpu", "250m", 250), ("cpu", "0.1", 100), ("cpu", "1.0005", 1001),
        ("memory", "1Gi", 2**30), ("memory", "128974848", 128974848),
        ("memory", "129e6", 129_000_000),
        ("memory", "123Mi", 123 * 2**20), ("memory", "1k", 1000), ("nvidia.com/gpu", "2", 2),
        ("cpu", 2, 2000), ("memory", "1.5Gi", 3 * 2**29),
    ],
)
def test_quantities(resource: str, text: object, expected: int) -> None:
    assert to_units(resource, text) == expected


@pytest.mark.parametrize("text", ["", "abc", "1Qi", "--1", True, None, [1]])
def test_bad_quantities(text: object) -> None:
    with pytest.raises(QuantityError):
        to_units("memory", text)


def test_format_units() -> None:
    assert format_units("cpu", 1500) == "1500m"
    assert format_units("cpu", 2000) == "2"
    assert format_units("memory", 2**31) == "2Gi"


def _pod(spec: dict[str, object], **meta: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u", **meta}, "spec": spec}


def test_requests_add_containers_take_max_of_init_and_add_overhead() -> None:
    pod = parse_pod(_pod({
        "containers": [
            {"name": "a", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "500m"}}},
        ],
        "initContainers": [
            {"name": "i1", "resources": {"requests": {"cpu": "2", "memory": "512Mi"}}},
        ],
        "overhead": {"cpu": "100m"},
    }))
    assert pod.requests == {"cpu": 2100, "memory": 2**30}


def test_sidecars_run_beside_the_app_and_later_init_containers() -> None:
    pod = parse_pod(_pod({
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}],
        "initContainers": [
            {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "1"}}},
            {"name": "init", "resources": {"requests": {"cpu": "3"}}},
        ],
    }))
    # app (1) + sidecar (1) = 2 while running; init (3) + sidecar (1) = 4 while initialising.
    assert pod.requests == {"cpu": 4000}


def test_nonzero_defaults_for_scoring_and_gpu_request() -> None:
    pod = parse_pod(_pod({"containers": [
        {"name": "a", "resources": {"requests": {"nvidia.com/gpu": "1"}}},
        {"name": "b"},
    ]}))
    assert pod.requests == {"nvidia.com/gpu": 1}
    assert pod.nonzero_cpu == 2 * DEFAULT_MILLI_CPU
    assert pod.nonzero_memory == 2 * DEFAULT_MEMORY


def test_group_label_and_malformed_spec_is_kept_with_error() -> None:
    pod = parse_pod(_pod(
        {"containers": [{"name": "a", "resources": {"requests": {"cpu": "lots"}}}]},
        labels={"group.batch.scheduler.tencent.com": "g1"},
    ))
    assert pod.group_key == "ns/g1"
    assert "cpu" in pod.parse_error


def _group(spec: object) -> dict[str, object]:
    return {"metadata": {"name": "g", "namespace": "ns"}, "spec": spec}


def test_valid_podgroup() -> None:
    group = parse_podgroup(_group({"minMember": 5, "maxScheduleTime": "1m30s",
                                   "minResources": {"cpu": "1"}, "priorityClassName": "high"}))
    assert group.valid
    assert group.min_member == 5
    assert group.max_schedule_time == 90
    assert group.min_resources == {"cpu": 1000}


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"minMember": 0}, "spec.minMember"),
        ({"minMember": "5"}, "spec.minMember"),
        ({}, "spec.minMember"),
        ({"minMember": 2, "maxScheduleTime": "soon"}, "spec.maxScheduleTime"),
        ({"minMember": 2, "maxScheduleTime": 30}, "spec.maxScheduleTime"),
        ({"minMember": 2, "minResources": {"cpu": "x"}}, "spec.minResources"),
        ({"minMember": 2, "priorityClassName": "Not_A_Name"}, "spec.priorityClassName"),
        (None, "spec"),
    ],
)
def test_invalid_podgroups_name_the_field(spec: object, field: str) -> None:
    group = parse_podgroup(_group(spec))
    assert not group.valid
    assert any(error.startswith(field) for error in group.errors), group.errors


def test_durations() -> None:
    assert parse_duration("30s") == 30
    assert parse_duration("1h2m3s") == 3723
    assert parse_duration("500ms") == 0.5
    for bad in ("", "5", "-3s", "1d"):
        with pytest.raises(ValueError):
            parse_duration(bad)
