"""PodGroups and Queues the API server must refuse at admission (naming the field), and ones
it must accept: one table for the real API server (tests/integration/test_crd.py) and for
the check that every run-time refusal of the scheduler has an admission twin
(tests/unit/test_admission_twins.py)."""

from __future__ import annotations

from typing import Any

_RACK = "example.com/rack"
_LONG_PREFIX = "a" * 254 + "/rack"  # a label key's prefix is at most 253 characters
_TWO_ROLES = [{"name": "ps", "minMember": 1}, {"name": "worker", "minMember": 4}]

GOOD_PODGROUPS: list[Any] = [
    {"minMember": 1},
    {"minMember": 6, "maxScheduleTime": "30s"},
    {"minMember": 2, "maxScheduleTime": "1h30m", "minResources": {"cpu": "500m",
                                                                 "memory": "1Gi",
                                                                 "nvidia.com/gpu": 1}},
    {"minMember": 2, "maxScheduleTime": "0.5s", "minResources": {"cpu": 0}},
    {"minMember": 2, "minResources": {"cpu": "9e196", "memory": "9e199"}},
    {"minMember": 3, "priorityClassName": "high-priority", "queue": "research.team-a"},
    {"minMember": 2, "topology": {"mode": "Preferred", "keys": [_RACK,
                                                                "topology.kubernetes.io/zone"]}},
    {"minMember": 2, "topology": {"keys": ["a" * 253 + "/rack"]}},
    {"minMember": 5, "subGroups": _TWO_ROLES},
    {"minMember": 9, "subGroups": _TWO_ROLES},
    # minGroups 2 of 3 replicas of 2: the smallest two need 4.
    {"minMember": 4, "minGroups": 2, "subGroups": [
        {"name": f"r{i}", "minMember": 2, "topology": {"keys": [_RACK]}} for i in range(3)]},
    # The smallest one subgroup (ps, 1) fits in minMember 1 although worker needs 4.
    {"minMember": 1, "minGroups": 1, "subGroups": _TWO_ROLES},
    {"minMember": 2, "replacementHoldSeconds": 0, "maxReservationSeconds": 0},
    {"minMember": 2, "deviceConstraints": [
        {"matchAttribute": "gpu.example.com/nvlinkClique",
         "deviceClassNames": ["gpu.example.com"]}]},
]

# (spec, the field the API server's refusal names). A field in brackets after a map is the
# key the API server names (spec.minResources[cpu]); the scheduler names the map and key.
BAD_PODGROUPS: list[tuple[Any, str]] = [
    ({}, "spec.minMember"),
    ("not-an-object", "spec"),
    ({"minMember": 0}, "spec.minMember"),
    ({"minMember": -3}, "spec.minMember"),
    ({"minMember": "five"}, "spec.minMember"),
    ({"minMember": 2.5}, "spec.minMember"),
    ({"minMember": 2, "unknownField": 1}, "unknownField"),
    ({"minMember": 2, "maxScheduleTime": "soon"}, "spec.maxScheduleTime"),
    ({"minMember": 2, "maxScheduleTime": 30}, "spec.maxScheduleTime"),
    ({"minMember": 2, "maxScheduleTime": "0s"}, "spec.maxScheduleTime"),
    ({"minMember": 2, "maxScheduleTime": "0h0.0m"}, "spec.maxScheduleTime"),
    ({"minMember": 2, "minResources": {"cpu": "lots"}}, "spec.minResources.cpu"),
    ({"minMember": 2, "minResources": "4 cpus"}, "spec.minResources"),
    ({"minMember": 2, "minResources": {"cpu": -1}}, "spec.minResources[cpu]"),
    ({"minMember": 2, "minResources": {"cpu": "1e197"}}, "spec.minResources"),
    ({"minMember": 2, "minResources": {"memory": "1e200"}}, "spec.minResources"),
    ({"minMember": 2, "priorityClassName": "Not_A_Name"}, "spec.priorityClassName"),
    ({"minMember": 2, "queue": "Not_A_Queue"}, "spec.queue"),
    ({"minMember": 2, "replacementHoldSeconds": 3601}, "spec.replacementHoldSeconds"),
    ({"minMember": 2, "replacementHoldSeconds": -1}, "spec.replacementHoldSeconds"),
    ({"minMember": 2, "maxReservationSeconds": -1}, "spec.maxReservationSeconds"),
    ({"minMember": 2, "topology": "rack"}, "spec.topology"),
    ({"minMember": 2, "topology": {"keys": [_RACK], "zone": "a"}}, "spec.topology.zone"),
    ({"minMember": 2, "topology": {"mode": "Sometimes", "keys": [_RACK]}},
     "spec.topology.mode"),
    ({"minMember": 2, "topology": {"mode": "required", "keys": [_RACK]}},
     "spec.topology.mode"),
    ({"minMember": 2, "topology": {"mode": "Required", "keys": []}}, "spec.topology.keys"),
    ({"minMember": 2, "topology": {"mode": "Required"}}, "spec.topology.keys"),
    ({"minMember": 2, "topology": {"keys": [f"example.com/k{i}" for i in range(9)]}},
     "spec.topology.keys"),
    ({"minMember": 2, "topology": {"keys": [""]}}, "spec.topology.keys[0]"),
    ({"minMember": 2, "topology": {"keys": ["bad key"]}}, "spec.topology.keys[0]"),
    ({"minMember": 2, "topology": {"keys": [_LONG_PREFIX]}}, "spec.topology.keys[0]"),
    ({"minMember": 2, "topology": {"keys": [_RACK, _RACK]}}, "spec.topology.keys[1]"),
    ({"minMember": 2, "deviceConstraints": "a.b/c"}, "spec.deviceConstraints"),
    ({"minMember": 2, "deviceConstraints": [{"matchAttribute": f"a.b/c{i}"}
                                            for i in range(9)]}, "spec.deviceConstraints"),
    ({"minMember": 2, "deviceConstraints": ["a.b/c"]}, "spec.deviceConstraints[0]"),
    ({"minMember": 2, "deviceConstraints": [{"matchAttribute": "a.b/c", "extra": 1}]},
     "spec.deviceConstraints[0].extra"),
    ({"minMember": 2, "deviceConstraints": [{"matchAttribute": "nodomain"}]},
     "spec.deviceConstraints[0].matchAttribute"),
    ({"minMember": 2, "deviceConstraints": [{"matchAttribute": "a.b/c",
                                             "deviceClassNames": ["Not_A_Class"]}]},
     "spec.deviceConstraints[0].deviceClassNames[0]"),
    ({"minMember": 2, "minGroups": 1}, "spec.minGroups"),
    ({"minMember": 2, "minGroups": 3, "subGroups": [{"name": "a", "minMember": 1},
                                                    {"name": "b", "minMember": 1}]},
     "spec.minGroups"),
    ({"minMember": 2, "minGroups": 0, "subGroups": _TWO_ROLES}, "spec.minGroups"),
    ({"minMember": 4, "subGroups": _TWO_ROLES}, "spec.minMember"),
    ({"minMember": 3, "minGroups": 2, "subGroups": [
        {"name": f"r{i}", "minMember": 2} for i in range(3)]}, "spec.minMember"),
    ({"minMember": 2, "subGroups": []}, "spec.subGroups"),
    ({"minMember": 2, "subGroups": [{"name": f"r{i}", "minMember": 1} for i in range(65)]},
     "spec.subGroups"),
    ({"minMember": 2, "subGroups": ["ps"]}, "spec.subGroups[0]"),
    ({"minMember": 2, "subGroups": [{"name": "ps", "minMember": 1, "size": 2}]},
     "spec.subGroups[0].size"),
    ({"minMember": 2, "subGroups": [{"name": "-ps", "minMember": 1}]},
     "spec.subGroups[0].name"),
    ({"minMember": 2, "subGroups": [{"name": "ps", "minMember": 0}]},
     "spec.subGroups[0].minMember"),
    ({"minMember": 2, "subGroups": [{"name": "ps", "minMember": 1},
                                    {"name": "ps", "minMember": 1}]},
     "spec.subGroups[1]"),
    ({"minMember": 2, "subGroups": [{"name": "ps", "minMember": 1,
                                     "topology": {"mode": "Never", "keys": [_RACK]}}]},
     "spec.subGroups[0].topology.mode"),
    ({"minMember": 2, "subGroups": [{"name": "ps", "minMember": 1,
                                     "topology": {"keys": [_LONG_PREFIX]}}]},
     "spec.subGroups[0].topology.keys[0]"),
]

GOOD_QUEUES: list[Any] = [
    None,
    {},
    {"weight": 3, "capability": {"cpu": "64", "memory": "256Gi", "nvidia.com/gpu": 8},
     "reclaimable": False},
    {"capability": {"cpu": 0}},
    {"scaleUpWaitSeconds": 0},
    {"scaleUpWaitSeconds": 90.5},
]

BAD_QUEUES: list[tuple[Any, str]] = [
    ("heavy", "spec"),
    ({"weight": 0}, "spec.weight"),
    ({"weight": 1_000_001}, "spec.weight"),
    ({"weight": "2"}, "spec.weight"),
    ({"capability": {"cpu": "lots"}}, "spec.capability.cpu"),
    ({"capability": {"cpu": -4}}, "spec.capability[cpu]"),
    ({"capability": {"cpu": "1e197"}}, "spec.capability"),
    ({"reclaimable": "yes"}, "spec.reclaimable"),
    ({"scaleUpWaitSeconds": -1}, "spec.scaleUpWaitSeconds"),
    ({"scaleUpWaitSeconds": "2m"}, "spec.scaleUpWaitSeconds"),
]

# Run-time refusals in api/podgroups.py and api/queues.py that the API server cannot make
# first, by (function, the start of the message's text): why. None today. What the scheduler
# also checks about a group but no CRD rule can, so it stays a run-time message: that the
# Queue in spec.queue and the PriorityClass in spec.priorityClassName exist (other objects;
# the gang waits, saying so), and the expected-runtime and max-reservation-seconds
# annotations (a CRD rule sees only metadata.name and generateName; a bad one is a Warning
# event, never a refusal).
NOT_AT_ADMISSION: dict[tuple[str, str], str] = {}


def podgroup(spec: Any, name: str = "g", namespace: str = "default") -> dict[str, Any]:
    """A PodGroup object with ``spec`` (left out when None)."""
    return _object("PodGroup", {"name": name, "namespace": namespace}, spec)


def queue(spec: Any, name: str = "q") -> dict[str, Any]:
    """A Queue object with ``spec`` (left out when None)."""
    return _object("Queue", {"name": name}, spec)


def _object(kind: str, meta: dict[str, str], spec: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {"apiVersion": "batch.scheduler.tencent.com/v1", "kind": kind,
                           "metadata": meta}
    if spec is not None:
        obj["spec"] = spec
    return obj
