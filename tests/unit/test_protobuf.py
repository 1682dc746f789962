"""The protobuf reader's parts that need no API server: the upb backend, framing, the types
JSON writes differently, and an object that cannot be converted set aside alone."""

from __future__ import annotations

from typing import Any

import pytest
from google.protobuf.internal import api_implementation

from coscheduling.cluster import protobuf
from coscheduling.cluster.protobuf import FieldError, Frames, ProtobufError, message_class

Pod = message_class("k8s.io.api.core.v1.Pod")
PodList = message_class("k8s.io.api.core.v1.PodList")
Unknown = message_class("k8s.io.apimachinery.pkg.runtime.Unknown")
WatchEvent = message_class("k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent")
DeviceClass = message_class("k8s.io.api.resource.v1.DeviceClass")


def test_messages_are_decoded_by_the_upb_backend() -> None:
    assert api_implementation.Type() == "upb"


def _wrapped(api_version: str, kind: str, message: Any) -> bytes:
    unknown = Unknown()
    unknown.typeMeta.apiVersion, unknown.typeMeta.kind = api_version, kind
    unknown.raw = message.SerializeToString()
    return protobuf.MAGIC + unknown.SerializeToString()


def _framed(*payloads: bytes) -> bytes:
    return b"".join(len(p).to_bytes(4, "big") + p for p in payloads)


@pytest.mark.parametrize("cut", [1, 3, 4, 5, 9, 1000])
def test_frames_split_a_stream_wherever_its_chunks_end(cut: int) -> None:
    stream = _framed(b"first", b"", b"x" * 300)
    frames = Frames()
    found = [f for start in range(0, len(stream), cut) for f in
             frames.feed(stream[start:start + cut])]
    assert found == [b"first", b"", b"x" * 300] and frames.pending == 0


def test_a_frame_longer_than_an_object_may_be_is_refused_unread() -> None:
    with pytest.raises(ProtobufError, match="watch frame of 4294967295 bytes"):
        Frames().feed(b"\xff\xff\xff\xff")


def test_a_cut_off_frame_is_pending() -> None:
    frames = Frames()
    assert frames.feed(_framed(b"whole") + b"\x00\x00\x00\x09part") == [b"whole"]
    assert frames.pending == 8


def _pod() -> Any:
    pod = Pod()
    pod.metadata.name, pod.metadata.namespace = "p", "ns"
    pod.metadata.creationTimestamp.seconds = 1795835539
    pod.metadata.creationTimestamp.nanos = 0
    volume = pod.spec.volumes.add()
    volume.name = "data"
    volume.volumeSource.persistentVolumeClaim.claimName = "claim"
    container = pod.spec.containers.add()
    container.name = "c"
    container.resources.requests["cpu"].string = "500m"
    container.env.add().name = "SKIPPED"
    return pod


@pytest.mark.parametrize(("path", "expected"), [
    (("metadata", "creationTimestamp"), "2026-11-28T03:12:19Z"),
    # volumeSource is an embedded struct: its fields are the volume's (INLINE)
    (("spec", "volumes", 0), {"name": "data", "persistentVolumeClaim": {"claimName": "claim"}}),
    (("spec", "containers", 0, "resources"), {"requests": {"cpu": "500m"}}),
    (("spec", "containers", 0, "env"), None),  # protobuf.SKIPPED
])
def test_fields_are_written_as_the_api_servers_json(path: tuple[Any, ...], expected: Any
                                                    ) -> None:
    value: Any = protobuf.to_json(_pod())
    for step in path[:-1]:
        value = value[step]
    assert (value.get(path[-1]) if isinstance(value, dict) else value[path[-1]]) == expected


def test_zero_times_and_int_or_strings() -> None:
    pod = Pod()
    pod.metadata.creationTimestamp.seconds = 0  # present, zero: Go's zero time, JSON null
    budget = message_class("k8s.io.api.policy.v1.PodDisruptionBudget")()
    budget.spec.minAvailable.type, budget.spec.minAvailable.strVal = 1, "50%"
    budget.spec.maxUnavailable.type, budget.spec.maxUnavailable.intVal = 0, 2
    assert protobuf.to_json(pod)["metadata"]["creationTimestamp"] is None
    assert protobuf.to_json(budget)["spec"] == {"minAvailable": "50%", "maxUnavailable": 2}


def _device_class(parameters: bytes) -> Any:
    device_class = DeviceClass()
    device_class.metadata.name = "gpu"
    device_class.spec.config.add().deviceConfiguration.opaque.parameters.raw = parameters
    return device_class


def test_opaque_parameters_are_their_json() -> None:
    converted = protobuf.to_json(_device_class(b'{"a": [1, {"b": null}]}'))
    assert converted["spec"]["config"][0]["opaque"]["parameters"] == {"a": [1, {"b": None}]}


def test_parameters_too_deep_set_aside_only_their_object() -> None:
    deep = b"[" * 3000 + b"]" * 3000  # deeper than the C decoder goes (deepjson)
    with pytest.raises(FieldError) as raised:
        protobuf.to_json(_device_class(deep))
    assert raised.value.path == ("spec", "config", 0, "opaque", "parameters")
    listing = message_class("k8s.io.api.resource.v1.DeviceClassList")()
    listing.items.append(_device_class(b"{}"))
    listing.items.append(_device_class(deep))
    listing.items[1].metadata.name = "deep"
    decoded = protobuf.decode_list(_wrapped("resource.k8s.io/v1", "DeviceClassList", listing),
                                   DeviceClass, type(listing))
    assert [item["metadata"]["name"] for item in decoded["items"]] == ["gpu", "deep"]
    assert decoded["items"][1] == {"metadata": {"name": "deep"}}  # its key, to set it aside
    assert decoded.left_out == [(("items", 1, "spec", "config", 0, "opaque", "parameters"),
                                 "protobuf: nested deeper than the JSON decoder goes")]


def test_watch_events_carry_the_object_kind_and_errors_their_status() -> None:
    status = message_class("k8s.io.apimachinery.pkg.apis.meta.v1.Status")()
    status.code, status.message = 410, "too old resource version"
    events = []
    for kind, message in (("Pod", _pod()), ("Status", status)):
        event = WatchEvent()
        event.type = "ADDED" if kind == "Pod" else "ERROR"
        event.object.raw = _wrapped("v1", kind, message)
        events.append(event.SerializeToString())
    added, error = protobuf.watch_events(iter(events), Pod)
    assert (added["type"], added["object"]["kind"], added["object"]["apiVersion"]) == \
        ("ADDED", "Pod", "v1")
    assert added["object"]["metadata"]["name"] == "p"
    assert (error["type"], error["object"]["code"], error["object"]["message"]) == \
        ("ERROR", 410, "too old resource version")


@pytest.mark.parametrize(("data", "message"), [
    (b'{"kind": "PodList"}', "without the protobuf prefix"),
    (protobuf.MAGIC + b"\xff\xff", "runtime.Unknown"),
])
def test_answers_that_are_not_protobuf_are_refused(data: bytes, message: str) -> None:
    with pytest.raises(ProtobufError, match=message):
        protobuf.decode_list(data, Pod, PodList)


def test_a_list_of_another_kind_is_refused() -> None:
    with pytest.raises(ProtobufError, match="a list of kind 'NodeList' where PodList"):
        protobuf.decode_list(_wrapped("v1", "NodeList", PodList()), Pod, PodList)


@pytest.mark.parametrize(("path", "kind"), [
    ("/api/v1/pods", "Pod"),
    ("/api/v1/nodes", "Node"),
    ("/apis/resource.k8s.io/v1/resourceclaims", "ResourceClaim"),
    ("/apis/storage.k8s.io/v1/csinodes", "CSINode"),
    ("/apis/batch.scheduler.tencent.com/v1/podgroups", None),  # a custom resource
    ("/apis/batch/v1/jobs", None),  # its record keeps the JSON's spec: read as JSON
    ("/api/v1/namespaces/a/pods", None),
])
def test_kinds_read_as_protobuf(path: str, kind: str | None) -> None:
    found = protobuf.kind_of(path)
    assert (found[0].DESCRIPTOR.name if found else None) == kind
