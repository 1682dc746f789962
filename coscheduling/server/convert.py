"""Requests to scheduler records and back: pods, nodes, statuses, and errors naming the field.

Everything here runs under the cache lock (it reads the watch cache). A bad request raises
:class:`RequestError`, which the server turns into a gRPC status; nothing else should escape.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import grpc

from coscheduling.api.pods import Pod, parse_pod
from coscheduling.framework.status import Code, Status
from coscheduling.server.gen import scheduling_pb2 as pb

if TYPE_CHECKING:
    from coscheduling.core.scheduler import Scheduler
    from coscheduling.framework.nodeinfo import NodeInfo

# No real Pod is near this: etcd refuses objects over 1.5 MiB by default. A larger pod_json
# is refused here, naming the field, well before the transport's own limit.
MAX_POD_JSON_BYTES = 3 * 1024 * 1024
# How much of a value a caller sent is repeated in an error: enough to recognise it, never
# so much that the status itself goes over the transport's metadata limit.
MAX_ECHO = 100


def shown(value: str) -> str:
    """``value`` as an error repeats it: cut short, saying how long it was."""
    if len(value) <= MAX_ECHO:
        return value
    return f"{value[:MAX_ECHO]}... ({len(value)} characters)"


class RequestError(Exception):
    """A request the server cannot act on; ``field`` is the request field at fault."""

    def __init__(self, code: grpc.StatusCode, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.code = code
        self.field = field


def invalid(field: str, message: str) -> RequestError:
    return RequestError(grpc.StatusCode.INVALID_ARGUMENT, field, message)


def not_found(field: str, message: str) -> RequestError:
    return RequestError(grpc.StatusCode.NOT_FOUND, field, message)


def precondition(field: str, message: str) -> RequestError:
    return RequestError(grpc.StatusCode.FAILED_PRECONDITION, field, message)


# The framework's codes and the API's, by name (the numbers are the same: tests check).
CODES = {code: pb.Code.Value(f"CODE_{code.name}") for code in Code}


def status_pb(status: Status) -> pb.Status:
    return pb.Status(code=CODES[status.code], reasons=list(status.reasons),
                     plugin=status.plugin)


def object_key(message: Any, field: str) -> str:
    """``namespace/name`` from an ObjectKey field of ``message``, both parts required."""
    if not message.HasField(field):
        raise invalid(field, "required")
    key = getattr(message, field)
    if not key.namespace:
        raise invalid(f"{field}.namespace", "required")
    if not key.name:
        raise invalid(f"{field}.name", "required")
    return f"{key.namespace}/{key.name}"


def _object(value: Any, field: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise invalid(field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _name(meta: dict[str, Any], field: str, part: str) -> str:
    value = meta.get(part)
    if not value:
        raise invalid(f"{field}.metadata.{part}", "required")
    if not isinstance(value, str):
        raise invalid(f"{field}.metadata.{part}", f"must be a string, got {type(value).__name__}")
    return value


def pod_from_json(raw: bytes, field: str) -> Pod:
    """Parse a Pod object sent as JSON, or say which field of it is wrong."""
    field = f"{field}.pod_json"
    if not raw:
        raise invalid(field, "empty")
    if len(raw) > MAX_POD_JSON_BYTES:
        raise invalid(field, f"{len(raw)} bytes is more than a Pod can be "
                             f"({MAX_POD_JSON_BYTES} bytes at most)")
    try:
        obj = json.loads(raw)
    except RecursionError:
        raise invalid(field, "nested too deeply to be a Pod") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise invalid(field, f"not valid JSON: {err}") from None
    obj = _object(obj, field)
    kind = obj.get("kind")
    if kind not in (None, "Pod"):
        raise invalid(f"{field}.kind", f"must be Pod, got {kind!r}")
    meta = _object(obj.get("metadata"), f"{field}.metadata")
    _name(meta, field, "namespace")
    _name(meta, field, "name")
    labels = _object(meta.get("labels"), f"{field}.metadata.labels")
    if not all(isinstance(v, str) for v in labels.values()):
        raise invalid(f"{field}.metadata.labels", "values must be strings")
    for part in ("spec", "status"):
        _object(obj.get(part), f"{field}.{part}")
    try:
        pod = parse_pod(obj)
    except RecursionError:
        raise invalid(field, "nested too deeply to be a Pod") from None
    except (AttributeError, KeyError, TypeError, ValueError) as err:
        raise invalid(field, f"malformed Pod: {type(err).__name__}: {err}") from None
    if pod.parse_error:
        raise invalid(f"{field}.{pod.parse_error.split(':', 1)[0]}",
                      pod.parse_error.split(":", 1)[-1].strip())
    return pod


@dataclass(frozen=True)
class PodArg:
    """A PodRef as read from a request: the pod's key, and its record when sent as JSON."""

    field: str
    key: str
    sent: Pod | None

    @property
    def namespace(self) -> str:
        return self.key.partition("/")[0]

    def resolve(self, scheduler: Scheduler, *, watched: bool) -> Pod:
        """The pod the request names (call under the cache lock).

        A JSON pod is used as given unless ``watched``: then the call changes the
        scheduler's state, which counts gang members from the watch cache, so it must be the
        watched pod.
        """
        sent, key = self.sent, self.key
        if sent is not None and not watched:
            return sent
        where = f"{self.field}.pod_json" if sent is not None else f"{self.field}.key"
        pod = scheduler.cache.pod(key)
        if pod is None:
            raise not_found(where, f"pod {shown(key)} is not in the server's watch cache")
        if sent is not None and sent.uid and sent.uid != pod.uid:
            raise not_found(f"{where}.metadata.uid",
                            f"pod {key} with uid {sent.uid} is gone (the watched one has "
                            f"uid {pod.uid})")
        if pod.parse_error:
            raise precondition(where, f"pod {key} is malformed: {pod.parse_error}")
        return pod


def read_pod(message: Any, field: str) -> PodArg:
    """Read the PodRef ``field`` of ``message`` (JSON is parsed here, outside any lock)."""
    if not message.HasField(field):
        raise invalid(field, "required: set pod_json or key")
    ref = getattr(message, field)
    which = ref.WhichOneof("ref")
    if which is None:
        raise invalid(field, "required: set pod_json or key")
    if which == "pod_json":
        pod = pod_from_json(ref.pod_json, field)
        return PodArg(field, pod.key, pod)
    if not ref.key.namespace:
        raise invalid(f"{field}.key.namespace", "required")
    if not ref.key.name:
        raise invalid(f"{field}.key.name", "required")
    return PodArg(field, f"{ref.key.namespace}/{ref.key.name}", None)


def node_name(message: Any, field: str = "node_name") -> str:
    name: str = getattr(message, field)
    if not name:
        raise invalid(field, "required")
    return name


def resolve_node(scheduler: Scheduler, name: str, field: str) -> NodeInfo:
    if not name:
        raise invalid(field, "required")
    info = scheduler.cache.node(name)
    if info is None:
        raise not_found(field, f'node "{shown(name)}" not found')
    return info


def resolve_nodes(scheduler: Scheduler, names: Any, field: str) -> list[NodeInfo]:
    """The named nodes in order, or every node when none is named."""
    if not names:
        return list(scheduler.cache.nodes())
    seen: set[str] = set()
    nodes = []
    for index, name in enumerate(names):
        if name in seen:
            raise invalid(f"{field}[{index}]", f'node "{shown(name)}" is named twice')
        seen.add(name)
        nodes.append(resolve_node(scheduler, name, f"{field}[{index}]"))
    return nodes
