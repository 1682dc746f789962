"""The API server's protobuf answers, read into the JSON shapes the record builders read.

kube-scheduler reads built-in kinds as ``application/vnd.kubernetes.protobuf``; so can this
scheduler (``clientConnection.acceptContentTypes``), the message parsed in C by protobuf's
upb backend. An answer is the 4 bytes ``k8s\\0`` then a ``runtime.Unknown`` (apiVersion, kind,
the object's message bytes); a watch in protobuf (``;stream=watch``) is a stream of frames,
each a 4-byte big-endian length then a ``meta/v1 WatchEvent`` whose object is such an
answer again.

The records in ``coscheduling.api`` are built from JSON-shaped dicts; ``to_json`` gives
them that shape from a message, so there is one record builder per kind, fed by either
wire format. The Kubernetes .proto files name each field as its JSON does, so a message's
set fields become the dict's keys (those of embedded Go structs, ``INLINE``, written into
their parent as JSON writes them); the few types JSON writes differently are converted
as the API server writes them (Quantity and IntOrString as their string or number, Time
as RFC 3339, RawExtension as its JSON, bytes as base64). Go fields that are not pointers
are always sent, zero values included, where JSON leaves the empty ones out: builders read
them with defaults (``get(...) or ...``), which reads both alike. Fields no builder reads
and that are large (``SKIPPED``: managed fields, container statuses, probes, ...) are not
converted at all; a builder that starts reading one must take it off that list (the
equality test, which puts them in random objects, then tells).

The conversion runs in Python, about 1 us per message: a W1 pod's watch event costs about
twice what the C JSON decoder takes for it, which is why JSON stays the default.
"""

from __future__ import annotations

import base64
import functools
import json
import time
from collections.abc import Callable, Iterator
from typing import Any

from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import Descriptor, FieldDescriptor
from google.protobuf.message import DecodeError, Message

from coscheduling.api.pods import PLACEMENT_VOLUME_SOURCES
from coscheduling.cluster import deepjson

# The generated messages register themselves in the default descriptor pool on import.
from coscheduling.cluster.kubeproto import (  # noqa: F401
    api_core_v1_pb2,
    api_policy_v1_pb2,
    api_resource_v1_pb2,
    api_scheduling_v1_pb2,
    api_storage_v1_pb2,
    apimachinery_pkg_apis_meta_v1_pb2,
    apimachinery_pkg_runtime_pb2,
)
from coscheduling.cluster.kubeproto.inline import INLINE

MAGIC = b"k8s\x00"
PROTOBUF = "application/vnd.kubernetes.protobuf"
WATCH_STREAM = f"{PROTOBUF};stream=watch"
FRAME_LENGTH = 4
# A watch frame holds one object (etcd stores at most 1.5 MiB by default); a length beyond
# this is a broken or hostile stream, refused before it is buffered.
MAX_FRAME = 64 * 1024 * 1024

_META = "k8s.io.apimachinery.pkg.apis.meta.v1"
_PACKAGES = {  # group/version -> the package of its messages
    "v1": "k8s.io.api.core.v1",
    "policy/v1": "k8s.io.api.policy.v1",
    "scheduling.k8s.io/v1": "k8s.io.api.scheduling.v1",
    "storage.k8s.io/v1": "k8s.io.api.storage.v1",
    "resource.k8s.io/v1": "k8s.io.api.resource.v1",
}
_KINDS = {  # resource -> kind, for the resources the scheduler reads as protobuf
    "pods": "Pod", "nodes": "Node", "namespaces": "Namespace",
    "persistentvolumeclaims": "PersistentVolumeClaim", "persistentvolumes": "PersistentVolume",
    "priorityclasses": "PriorityClass", "poddisruptionbudgets": "PodDisruptionBudget",
    "storageclasses": "StorageClass", "csinodes": "CSINode", "deviceclasses": "DeviceClass",
    "resourceslices": "ResourceSlice", "resourceclaims": "ResourceClaim",
}

SKIPPED: dict[str, frozenset[str]] = {
    f"{_META}.ObjectMeta": frozenset({"managedFields"}),
    "k8s.io.api.core.v1.PodStatus": frozenset({
        "conditions", "containerStatuses", "initContainerStatuses",
        "ephemeralContainerStatuses", "podIPs", "hostIPs"}),
    "k8s.io.api.core.v1.Container": frozenset({
        "command", "args", "env", "envFrom", "volumeMounts", "volumeDevices", "livenessProbe",
        "readinessProbe", "startupProbe", "lifecycle", "securityContext"}),
    "k8s.io.api.core.v1.NodeStatus": frozenset({
        "conditions", "addresses", "daemonEndpoints", "nodeInfo", "volumesInUse",
        "volumesAttached", "config", "runtimeHandlers", "features"}),
    # A pod's volumes are read for the sources that decide placement (and image volumes'
    # references); the others, the service account token's projected volume in every pod
    # among them, are many small messages that cost more to convert than the rest of a pod.
    "k8s.io.api.core.v1.VolumeSource": frozenset(
        field.name for field in descriptor_pool.Default().FindMessageTypeByName(
            "k8s.io.api.core.v1.VolumeSource").fields
        if field.name not in (*PLACEMENT_VOLUME_SOURCES, "image")),
}
"""Per message type, fields no record builder reads (see the module)."""


class FromProtobuf(deepjson.Decoded):
    """A dict read from protobuf (``left_out``: objects that could not be converted)."""


class ProtobufError(ValueError):
    """An answer that is not the protobuf it claims to be."""


class FieldError(ProtobufError):
    """A field of one object that has no JSON form (``path``: where, from the object)."""

    def __init__(self, path: deepjson.Path, why: str) -> None:
        super().__init__(why)
        self.path = path


def message_class(full_name: str) -> type[Message]:
    """The generated class of a message, by its full name (``k8s.io.api.core.v1.Pod``)."""
    cls: type[Message] = message_factory.GetMessageClass(
        descriptor_pool.Default().FindMessageTypeByName(full_name))
    return cls


_UNKNOWN = message_class("k8s.io.apimachinery.pkg.runtime.Unknown")
_WATCH_EVENT = message_class(f"{_META}.WatchEvent")
_STATUS = message_class(f"{_META}.Status")


Binary = tuple[type[Message], type[Message]]
"""A kind read as protobuf: its object's message class and its list's."""


def kind_of(path: str) -> Binary | None:
    """(object message, list message) of the resource a list path names
    (``/api/v1/pods``, ``/apis/storage.k8s.io/v1/csinodes``), or None when it is not read
    as protobuf (custom resources, kinds whose records keep raw JSON)."""
    parts = path.strip("/").split("/")
    if parts[0] == "api" and len(parts) == 3:
        group_version = parts[1]
    elif parts[0] == "apis" and len(parts) == 4:
        group_version = f"{parts[1]}/{parts[2]}"
    else:
        return None
    package, kind = _PACKAGES.get(group_version), _KINDS.get(parts[-1])
    if package is None or kind is None:
        return None
    return message_class(f"{package}.{kind}"), message_class(f"{package}.{kind}List")


def unwrap(data: bytes) -> tuple[str, str, bytes]:
    """(apiVersion, kind, message bytes) of a magic-prefixed answer."""
    if not data.startswith(MAGIC):
        raise ProtobufError("an answer without the protobuf prefix k8s\\0")
    try:
        unknown = _UNKNOWN.FromString(data[len(MAGIC):])
    except DecodeError as err:
        raise ProtobufError(f"runtime.Unknown: {err}") from err
    meta = unknown.typeMeta
    return str(meta.apiVersion), str(meta.kind), bytes(unknown.raw)


def decode_object(data: bytes, kinds: dict[str, type[Message]]) -> FromProtobuf:
    """One magic-prefixed object (a watch event's, or an error's Status) as its JSON
    shape, apiVersion and kind included; ``kinds``: kind -> message class."""
    api_version, kind, raw = unwrap(data)
    cls = kinds.get(kind)
    if cls is None:
        raise ProtobufError(f"an object of kind {kind!r} ({api_version}) where "
                            f"{', '.join(sorted(kinds))} was expected")
    decoded = _read(cls, raw, ("object",))
    decoded["apiVersion"], decoded["kind"] = api_version, kind
    return decoded


def decode_list(data: bytes, item: type[Message], items: type[Message]) -> FromProtobuf:
    """A list page in its JSON shape; an item that cannot be converted is left out
    (``left_out``, as deepjson marks values it could not decode) with only its metadata,
    so the informer sets aside that one object and reads the rest."""
    api_version, kind, raw = unwrap(data)
    expected = items.DESCRIPTOR.name
    if kind != expected:
        raise ProtobufError(f"a list of kind {kind!r} where {expected} was expected")
    try:
        page = items.FromString(raw)
    except DecodeError as err:
        raise ProtobufError(f"{expected}: {err}") from err
    decoded = FromProtobuf(apiVersion=api_version, kind=kind, metadata=to_json(page.metadata))
    decoded.left_out = []
    converted = []
    for index, obj in enumerate(page.items):
        try:
            converted.append(to_json(obj))
        except FieldError as err:
            converted.append({"metadata": _metadata(obj)})
            decoded.left_out.append((("items", index, *err.path), f"protobuf: {err}"[:300]))
    decoded["items"] = converted
    return decoded


def decode_status(raw: bytes, api_version: str = "v1") -> FromProtobuf:
    """A meta/v1 Status (an error's answer) as its JSON shape."""
    decoded = _read(_STATUS, raw, ())
    decoded["apiVersion"], decoded["kind"] = api_version, "Status"
    return decoded


def _read(cls: type[Message], raw: bytes, where: deepjson.Path) -> FromProtobuf:
    try:
        message = cls.FromString(raw)
    except DecodeError as err:
        raise ProtobufError(f"{cls.DESCRIPTOR.name}: {err}") from err
    decoded = FromProtobuf()
    decoded.left_out = []
    try:
        decoded.update(to_json(message))
    except FieldError as err:
        decoded["metadata"] = _metadata(message)
        decoded.left_out.append(((*where, *err.path), f"protobuf: {err}"[:300]))
    return decoded


def _metadata(message: Message) -> dict[str, Any]:
    """The metadata of an object that cannot be converted whole (its key, its name)."""
    if "metadata" not in message.DESCRIPTOR.fields_by_name:
        return {}
    return to_json(message.metadata)


def watch_events(frames: Iterator[bytes], item: type[Message]) -> Iterator[dict[str, Any]]:
    """Watch events in their JSON shape (``type``, ``object``) from protobuf frames; an
    event's object is the watched kind, or a Status (ERROR events)."""
    kinds = {item.DESCRIPTOR.name: item, "Status": _STATUS}
    for frame in frames:
        try:
            event = _WATCH_EVENT.FromString(frame)
        except DecodeError as err:
            raise ProtobufError(f"WatchEvent: {err}") from err
        obj = decode_object(bytes(event.object.raw), kinds)
        answer = FromProtobuf(type=str(event.type), object=obj)
        answer.left_out = obj.left_out
        yield answer


class Frames:
    """Splits a watch stream's bytes, as they arrive, into its length-prefixed frames."""

    def __init__(self) -> None:
        self._buffer = bytearray()

    def feed(self, chunk: bytes) -> list[bytes]:
        self._buffer += chunk
        frames, start, buffer = [], 0, self._buffer
        while len(buffer) - start >= FRAME_LENGTH:
            length = int.from_bytes(buffer[start:start + FRAME_LENGTH], "big")
            if length > MAX_FRAME:
                raise ProtobufError(f"a watch frame of {length} bytes: more than the "
                                    f"{MAX_FRAME} one object may take")
            end = start + FRAME_LENGTH + length
            if len(buffer) < end:
                break
            frames.append(bytes(buffer[start + FRAME_LENGTH:end]))
            start = end
        del buffer[:start]
        return frames

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame (a stream that ends with some was cut off)."""
        return len(self._buffer)


# ---- messages into JSON shapes ----------------------------------------------------------

Convert = Callable[[Any], Any]
# Per message type, per field: (its JSON name, or None for an embedded struct written
# inline; how its value converts, None when it is the value itself), or None when skipped.
Plan = dict[FieldDescriptor, tuple[str | None, Convert | None] | None]
_PLANS: dict[Descriptor, Plan] = {}


def to_json(message: Message) -> dict[str, Any]:
    """A message's set fields (but ``SKIPPED``) as the API server's JSON writes them."""
    plan = _PLANS.get(message.DESCRIPTOR) or _plan(message.DESCRIPTOR)
    out: dict[str, Any] = {}
    for field, value in message.ListFields():
        how = plan[field]
        if how is None:
            continue
        name, convert = how
        if convert is None:
            out[name] = value  # type: ignore[index]
            continue
        try:
            if name is None:
                out.update(convert(value))
            else:
                out[name] = convert(value)
        except (FieldError, ValueError, RecursionError) as err:
            below = err.path if isinstance(err, FieldError) else ()
            raise FieldError(below if name is None else (name, *below), str(err)) from None
    return out


def _plan(descriptor: Descriptor) -> Plan:
    skipped = SKIPPED.get(descriptor.full_name, frozenset())
    plan: Plan = {}
    for field in descriptor.fields:
        convert = _converter(field)
        inline = (descriptor.full_name, field.name) in INLINE
        plan[field] = None if field.name in skipped else (
            None if inline else field.name, None if convert is _identity else convert)
    _PLANS[descriptor] = plan
    return plan


def _identity(value: Any) -> Any:
    return value


def _converter(field: FieldDescriptor) -> Convert:
    """How one field's value becomes JSON: by its shape (map, list, single) and type. Map
    keys are sorted, as Go's JSON writes them (records keep some in that order)."""
    if field.type == FieldDescriptor.TYPE_MESSAGE and field.message_type.GetOptions().map_entry:
        value = _single(field.message_type.fields_by_name["value"])
        if value is _identity:
            return lambda entries: dict(sorted(entries.items()))
        return lambda entries: {key: value(entries[key]) for key in sorted(entries)}
    single = _single(field)
    if not field.is_repeated:
        return single
    if single is _identity:
        return list
    return lambda values: _each(single, values)


def _each(convert: Convert, values: Any) -> list[Any]:
    """The items of a list field converted; a failure names the item's index."""
    try:
        return [convert(value) for value in values]
    except FieldError:
        for index, value in enumerate(values):  # only to find which item failed
            try:
                convert(value)
            except FieldError as err:
                raise FieldError((index, *err.path), str(err)) from None
        raise


def _single(field: FieldDescriptor) -> Convert:
    if field.type == FieldDescriptor.TYPE_BYTES:
        return lambda data: base64.b64encode(data).decode()
    if field.type != FieldDescriptor.TYPE_MESSAGE:
        return _identity
    return _SPECIAL.get(field.message_type.full_name, to_json)


def _time(message: Any) -> str | None:
    """meta/v1 Time: RFC 3339 in UTC, whole seconds (as its JSON); null for the zero time
    (sent as an empty message, as Go reads it)."""
    if not message.seconds and not message.nanos:
        return None
    return _rfc3339(message.seconds)


@functools.lru_cache(maxsize=4096)
def _rfc3339(seconds: int) -> str:
    """Objects made in one burst share their second: the text is made once."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def _micro_time(message: Any) -> str | None:
    """meta/v1 MicroTime: RFC 3339 in UTC with microseconds."""
    if not message.seconds and not message.nanos:
        return None
    seconds = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(message.seconds))
    return f"{seconds}.{message.nanos // 1000:06d}Z"


def _int_or_string(message: Any) -> int | str:
    return str(message.strVal) if message.type == 1 else int(message.intVal)


def _raw_extension(message: Any) -> Any:
    """runtime.RawExtension: the JSON it carries, decoded. JSON too deep for the C decoder
    or with a number Python will not convert makes the object unreadable, as such a value
    does in a JSON answer (``deepjson`` leaves it out there)."""
    raw = bytes(message.raw)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except RecursionError:
        raise FieldError((), "nested deeper than the JSON decoder goes") from None
    except ValueError as err:
        raise FieldError((), f"not JSON that can be read: {err}"[:200]) from None


_SPECIAL: dict[str, Convert] = {
    "k8s.io.apimachinery.pkg.api.resource.Quantity": lambda message: str(message.string),
    f"{_META}.Time": _time,
    f"{_META}.MicroTime": _micro_time,
    "k8s.io.apimachinery.pkg.util.intstr.IntOrString": _int_or_string,
    "k8s.io.apimachinery.pkg.runtime.RawExtension": _raw_extension,
}
