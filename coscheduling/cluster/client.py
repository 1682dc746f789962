"""A raw-JSON client: HTTP requests to the API server, on kept-alive connections of its own
(``wire``) for plain requests, on a urllib3 pool for watches and through proxies.

Answers are plain dicts, not model classes (slow to build); every request has a
client-side timeout, so a dead connection cannot hang a thread. Where the server is and how
we authenticate comes from ``kubeconfig``. Lists and watches of the built-in kinds that
``protobuf.kind_of`` names may be read as protobuf (``list_page``, ``watch`` with
``binary``), into the same dict shapes; the server answers JSON instead for what it does not
serve as protobuf, and that answer is read as JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, urlencode, urlsplit

import urllib3
from google.protobuf.message import Message

from coscheduling import __version__
from coscheduling.cluster import deepjson, protobuf
from coscheduling.cluster.http_wire import Wire, WireError
from coscheduling.cluster.kubeconfig import KEEPALIVE, CredentialsError, Endpoint, load_endpoint
from coscheduling.cluster.ratelimit import TokenBucket

CONNECT_TIMEOUT = 5.0
USER_AGENT = f"coscheduling/{__version__}"
IDLE_WATCH = "idle watch"
REQUEST_TIMEOUT = 30.0
JSON = "application/json"
# Offered for the built-in kinds (as client-go offers them): protobuf when served, else JSON.
PROTOBUF_OR_JSON = f"{protobuf.PROTOBUF}, {JSON}"
WATCH_PROTOBUF_OR_JSON = f"{protobuf.WATCH_STREAM}, {JSON}"
Decode = Callable[[bytes], dict[str, Any]]


class ApiError(Exception):
    """A request the API server refused, or could not be reached for."""

    def __init__(self, status: int, reason: str, body: Mapping[str, Any] | None = None) -> None:
        super().__init__(f"HTTP {status}: {reason}" if status else reason)
        self.status = status
        self.reason = reason
        self.body = dict(body or {})

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def idle(self) -> bool:
        """A watch that sent nothing for its read timeout: reconnect, nothing is wrong."""
        return self.reason.startswith(IDLE_WATCH)

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def conflict(self) -> bool:
        return self.status == 409


@dataclass(frozen=True)
class ClientSettings:
    kubeconfig: str = ""
    context: str = ""
    qps: float = 200.0
    burst: int = 400
    connection_pool: int = 32
    # A bearer token that replaces the kubeconfig's credential (e.g. a ServiceAccount's).
    token: str = ""


def endpoint_for(settings: ClientSettings) -> Endpoint:
    """The API server endpoint the settings name: a kubeconfig, or the in-cluster service
    account."""
    try:
        return load_endpoint(settings.kubeconfig, settings.context)
    except CredentialsError as err:
        source = settings.kubeconfig or "in-cluster service account"
        raise ApiError(0, f"cannot load credentials from {source}: {err}") from err


class KubeClient:
    def __init__(self, settings: ClientSettings, endpoint: Endpoint | None = None) -> None:
        self.settings = settings
        self.endpoint = endpoint or endpoint_for(settings)
        if settings.token:  # an explicit token replaces the configured credential
            self.endpoint = self.endpoint.with_token(settings.token)
        self._pool = self.endpoint.pool(settings.connection_pool)
        # Without a proxy, requests go straight to the server's connection pool: PoolManager
        # would parse the URL and look the pool up again on every request (about an eighth
        # of a request's client CPU). Through a proxy, the manager builds each request.
        self._server: urllib3.HTTPConnectionPool | None = None if self.endpoint.proxy \
            else self._pool.connection_from_url(self.endpoint.host)
        # Plain requests to a server reached directly skip urllib3 (see wire); watches and
        # proxied servers keep it.
        self._wire: Wire | None = None if self.endpoint.proxy else Wire(
            self.endpoint.host, self.endpoint.ssl_context, self.endpoint.server_hostname,
            settings.connection_pool, KEEPALIVE)
        # A server URL may carry a path (a proxy in front of several clusters).
        self._prefix = urlsplit(self.endpoint.host).path.rstrip("/")
        self._limiter = TokenBucket(settings.qps, settings.burst)

    @property
    def host(self) -> str:
        return self.endpoint.host

    def close(self) -> None:
        self._pool.clear()
        if self._wire is not None:
            self._wire.close()

    def _prepare(self, path: str, query: Mapping[str, Any] | None, content_type: str,
                 accept: str = JSON) -> tuple[str, dict[str, str]]:
        """Wait for the rate limiter; the request's path with its query, and its headers."""
        self._limiter.acquire()
        try:
            credentials = self.endpoint.credentials()
        except CredentialsError as err:
            raise ApiError(0, f"cannot authenticate to {self.host}: {err}") from err
        headers = {"Accept": accept, "Content-Type": content_type,
                   "User-Agent": USER_AGENT, **credentials}
        if query:
            path += "?" + urlencode({k: _query_value(v) for k, v in query.items()})
        return path, headers

    def _call(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
              body: Any = None, content_type: str = "application/json",
              timeout: float | tuple[float, float] = REQUEST_TIMEOUT,
              stream: bool = False, accept: str = JSON) -> urllib3.BaseHTTPResponse:
        """One HTTP request on the shared urllib3 connection pool."""
        path, headers = self._prepare(path, query, content_type, accept)
        connect, read = timeout if isinstance(timeout, tuple) else (CONNECT_TIMEOUT, timeout)
        options: dict[str, Any] = {
            "body": None if body is None else json.dumps(body), "headers": headers,
            "timeout": urllib3.Timeout(connect=connect, read=read), "preload_content": False,
        }
        try:
            if self._server is not None:
                response = self._server.urlopen(method, self._prefix + path, **options)
            else:
                response = self._pool.urlopen(method, self.host + path, **options)
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise self._unreachable(err) from err
        if not stream and response.status >= 300:
            try:
                data = response.data
            finally:
                response.release_conn()
            raise _refused(response.status, response.reason, data)
        return response

    def _unreachable(self, err: Exception) -> ApiError:
        return ApiError(0, f"cannot reach the API server at {self.host}: {err}")

    def request(self, method: str, path: str, *, query: Mapping[str, Any] | None = None,
                body: Any = None, content_type: str = "application/json",
                timeout: float = REQUEST_TIMEOUT, answer: bool = True,
                accept: str = JSON, decode: Decode | None = None) -> dict[str, Any]:
        """One request; the decoded JSON answer (``{}`` when the body is empty, or when
        ``answer`` is False: a success's body is then not decoded). ``decode`` reads a
        success's body instead (a protobuf list page)."""
        decode = decode or _json_or_empty
        if self._wire is not None:
            return self._exchange(self._wire, method, path, query, body, content_type,
                                  timeout, (accept, decode) if answer else None)
        response = self._call(method, path, query=query, body=body,
                              content_type=content_type, timeout=timeout, accept=accept)
        try:
            return decode(response.data) if answer else {}
        finally:
            response.release_conn()

    def _exchange(self, wire: Wire, method: str, path: str, query: Mapping[str, Any] | None,
                  body: Any, content_type: str, timeout: float,
                  answer: tuple[str, Decode] | None) -> dict[str, Any]:
        path, headers = self._prepare(path, query, content_type,
                                      answer[0] if answer is not None else JSON)
        payload = None if body is None else json.dumps(body).encode()
        try:
            reply = wire.exchange(method, self._prefix + path, headers, payload,
                                  CONNECT_TIMEOUT, timeout)
        except WireError as err:
            raise self._unreachable(err) from err
        if reply.status >= 300:
            raise _refused(reply.status, reply.reason, reply.body)
        return answer[1](reply.body) if answer is not None else {}

    def get(self, path: str, **query: Any) -> dict[str, Any]:
        return self.request("GET", path, query=query)

    def list_page(self, path: str, query: Mapping[str, Any],
                  binary: protobuf.Binary | None) -> dict[str, Any]:
        """One page of a list; with ``binary``, offered as protobuf (read by
        ``protobuf.decode_list``) or JSON, whichever the server sends."""
        if binary is None:
            return self.request("GET", path, query=query)
        item, items = binary

        def decode(body: bytes) -> dict[str, Any]:
            if body.startswith(protobuf.MAGIC):
                try:
                    return protobuf.decode_list(body, item, items)
                except protobuf.ProtobufError as err:
                    raise ApiError(0, f"list of {path}: {err}") from err
            return _json_or_empty(body)

        return self.request("GET", path, query=query, accept=PROTOBUF_OR_JSON, decode=decode)

    def create(self, path: str, body: Mapping[str, Any], *,
               answer: bool = True) -> dict[str, Any]:
        """POST ``body``; the created object (``{}`` without ``answer``: a caller that only
        writes, such as the event reporter, skips decoding it)."""
        return self.request("POST", path, body=body, answer=answer)

    def delete(self, path: str, **query: Any) -> dict[str, Any]:
        return self.request("DELETE", path, query=query)

    def patch(self, path: str, body: Any, *, kind: str = "merge",
              answer: bool = True) -> dict[str, Any]:
        content_type = {
            "merge": "application/merge-patch+json",
            "strategic": "application/strategic-merge-patch+json",
            "json": "application/json-patch+json",
        }[kind]
        return self.request("PATCH", path, body=body, content_type=content_type,
                            answer=answer)

    def watch(self, path: str, query: Mapping[str, Any], read_timeout: float,
              binary: protobuf.Binary | None = None) -> Iterator[dict[str, Any]]:
        """Watch events as dicts (``deepjson``: an event too deep for the C decoder is a
        ``deepjson.Decoded`` with the values it left out); with ``binary``, offered as a
        protobuf stream, read as whichever the server sends. Raises ApiError on HTTP errors
        and dead connections."""
        response = self._call("GET", path, query={**query, "watch": "true"},
                              timeout=(CONNECT_TIMEOUT, read_timeout), stream=True,
                              accept=JSON if binary is None else WATCH_PROTOBUF_OR_JSON)
        try:
            if response.status >= 300:
                answer = _json_or_empty(response.data)
                raise ApiError(response.status, answer.get("message") or "", answer)
            chunks = response.stream(64 * 1024, decode_content=True)
            if binary is not None and str(response.headers.get("Content-Type") or ""
                                          ).startswith(protobuf.PROTOBUF):
                yield from _protobuf_events(chunks, binary[0], path)
            else:
                yield from _json_events(chunks)
        except protobuf.ProtobufError as err:
            raise ApiError(0, f"watch of {path} broke: {err}") from err
        except urllib3.exceptions.ReadTimeoutError as err:
            raise ApiError(0, f"{IDLE_WATCH}: nothing from {path} for {read_timeout:g}s") \
                from err
        except (urllib3.exceptions.HTTPError, OSError) as err:
            raise ApiError(0, f"watch of {path} broke: {err}") from err
        finally:
            response.release_conn()

    def bind(self, namespace: str, name: str, uid: str, node_name: str) -> None:
        """POST a Binding. The answer to a success (a Status) is not decoded; a refusal's
        is, for its message."""
        self.request("POST", binding_path(namespace, name),
                     body=binding_body(namespace, name, uid, node_name), answer=False)


def binding_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{q(namespace)}/pods/{q(name)}/binding"


def binding_body(namespace: str, name: str, uid: str, node_name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node_name},
    }


def _query_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def q(segment: str) -> str:
    """Quote one path segment."""
    return quote(segment, safe="")


def _refused(status: int, reason: str | None, body: bytes | None) -> ApiError:
    """The error for an answer of ``status`` >= 300: the server's message, else its reason."""
    decoded = _json_or_empty(body)
    return ApiError(status, decoded.get("message") or reason or "", decoded)


def _json_events(chunks: Iterator[bytes]) -> Iterator[dict[str, Any]]:
    """A JSON watch stream's events: one object a line."""
    buffer = b""
    for chunk in chunks:
        lines = (buffer + chunk).split(b"\n")
        buffer = lines.pop()  # an unfinished line, or b""
        for line in lines:
            if line.strip():
                yield deepjson.loads(line)


def _protobuf_events(chunks: Iterator[bytes], item: type[Message], path: str
                     ) -> Iterator[dict[str, Any]]:
    """A protobuf watch stream's events (``protobuf.watch_events``), frame by frame."""
    frames = protobuf.Frames()
    for chunk in chunks:
        yield from protobuf.watch_events(iter(frames.feed(chunk)), item)
    if frames.pending:
        raise ApiError(0, f"watch of {path} broke: the stream ended inside a frame")


def _json_or_empty(data: bytes | str | None) -> dict[str, Any]:
    """A JSON answer as a dict; an error's answer in protobuf (a Status, when protobuf was
    offered) is read too."""
    if not data:
        return {}
    if isinstance(data, bytes) and data.startswith(protobuf.MAGIC):
        try:
            _, kind, raw = protobuf.unwrap(data)
            if kind == "Status":
                return protobuf.decode_status(raw)
        except protobuf.ProtobufError:
            pass
        return {"message": f"an answer in protobuf, of {len(data)} bytes"}
    try:
        decoded = deepjson.loads(data)
    except (ValueError, TypeError):
        text = data.decode(errors="replace") if isinstance(data, bytes) else str(data)
        return {"message": text[:500]}
    return decoded if isinstance(decoded, dict) else {"items": decoded}
