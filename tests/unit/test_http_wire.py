"""The API client's own HTTP/1.1 exchange (coscheduling.cluster.http_wire) against a scripted
server on loopback: the answer shapes the API server sends, kept connections, and servers
that close them."""

from __future__ import annotations

import contextlib
import email.utils
import json
import socket
import ssl
import subprocess
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from coscheduling.cluster import http_wire as wire_module
from coscheduling.cluster.http_wire import Wire, WireError
from coscheduling.cluster.kubeconfig import load_endpoint

Script = Callable[[socket.socket, int], None]
"""Handles one accepted connection (its index): reads requests, writes raw answers."""


def _read_request(conn: socket.socket) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = conn.recv(65536)
        if not chunk:
            return b""
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value)
    while len(body) < length:
        body += conn.recv(65536)
    return head + b"\r\n\r\n" + body


@dataclass
class Server:
    port: int
    connections: list[int]


@pytest.fixture
def serve() -> Iterator[Callable[[Script], Server]]:
    listeners: list[socket.socket] = []

    def start(script: Script) -> Server:
        listener = socket.create_server(("127.0.0.1", 0))
        listeners.append(listener)
        server = Server(listener.getsockname()[1], [])

        def accept() -> None:
            index = 0
            while True:
                try:
                    conn, _ = listener.accept()
                except OSError:
                    return
                server.connections.append(index)
                threading.Thread(target=script, args=(conn, index), daemon=True).start()
                index += 1

        threading.Thread(target=accept, daemon=True).start()
        return server

    yield start
    for listener in listeners:
        listener.close()


def answering(*answers: bytes, close_after: bool = False) -> Script:
    """Each request on a connection gets the next answer; with ``close_after``, the server
    closes the connection once they are all sent."""
    def script(conn: socket.socket, _: int) -> None:
        with conn:
            for answer in answers:
                if not _read_request(conn):
                    return
                conn.sendall(answer)
            if not close_after:
                _read_request(conn)
    return script


OK_JSON = b'{"kind":"Status","status":"Success"}'

CASES = [
    ("content length",
     b"HTTP/1.1 201 Created\r\nContent-Type: application/json\r\nContent-Length: "
     + str(len(OK_JSON)).encode() + b"\r\n\r\n" + OK_JSON, 201, OK_JSON),
    ("chunked, with an extension and a trailer",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"5;ext=1\r\n{\"a\":\r\n3\r\n 1}\r\n0\r\nX-Trailer: t\r\n\r\n", 200, b'{"a": 1}'),
    ("no content", b"HTTP/1.1 204 No Content\r\n\r\n", 204, b""),
    ("an error with its Status body",
     b"HTTP/1.1 409 Conflict\r\nContent-Length: 2\r\n\r\n{}", 409, b"{}"),
    ("no length: the body runs to the connection's end",
     b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it", 200, b"all of it"),
]


@pytest.mark.parametrize(("name", "raw", "status", "body"), CASES, ids=[c[0] for c in CASES])
def test_answers_are_read_whole(serve: Callable[[Script], Server], name: str, raw: bytes,
                                status: int, body: bytes) -> None:
    server = serve(answering(raw, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    answer = wire.exchange("POST", "/api/v1/x", {"Accept": "application/json"}, b"{}", 2, 2)
    assert (answer.status, answer.body) == (status, body)


def test_a_connection_is_kept_and_used_again(serve: Callable[[Script], Server]) -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
    server = serve(answering(ok, ok, ok))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    for _ in range(3):
        assert wire.exchange("GET", "/healthz", {}, None, 2, 2).status == 200
    assert server.connections == [0]


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def test_a_kept_connection_the_server_closed_while_idle_is_not_used(
        serve: Callable[[Script], Server]) -> None:
    """The server closes a kept connection (idle timeout): it is found closed before the
    next request, which goes out on a new connection, once."""
    closed = threading.Event()
    inner = answering(OK, close_after=True)

    def script(conn: socket.socket, index: int) -> None:
        inner(conn, index)
        closed.set()

    server = serve(script)
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert wire.exchange("POST", "/a", {}, b"{}", 2, 2).status == 200
    assert closed.wait(2)
    assert wire.exchange("POST", "/b", {}, b"{}", 2, 2).status == 200
    assert server.connections == [0, 1]


def _hang_up_on_second(requests: list[bytes]) -> Script:
    """Answers a connection's first request; reads its second, then closes without answering
    (a server that died after the request went out)."""
    def script(conn: socket.socket, _: int) -> None:
        with conn:
            requests.append(_read_request(conn))
            conn.sendall(OK)
            requests.append(_read_request(conn))
    return script


@pytest.mark.parametrize(("method", "sent_again"), [("POST", False), ("PATCH", False),
                                                    ("GET", True), ("PUT", True)])
def test_a_request_the_server_may_have_seen_is_sent_again_only_if_idempotent(
        serve: Callable[[Script], Server], method: str, sent_again: bool) -> None:
    requests: list[bytes] = []
    server = serve(_hang_up_on_second(requests))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    wire.exchange(method, "/first", {}, None, 2, 2)
    if sent_again:
        assert wire.exchange(method, "/second", {}, None, 2, 2).status == 200
        assert server.connections == [0, 1]
    else:
        with pytest.raises(WireError, match="closed the connection before answering"):
            wire.exchange(method, "/second", {}, None, 2, 2)
        assert server.connections == [0]
    assert sum(r.startswith(f"{method} /second ".encode()) for r in requests) == (
        2 if sent_again else 1)


@pytest.mark.parametrize(("method", "statuses"), [("GET", [200]), ("DELETE", [200]),
                                                  ("POST", [429])])
def test_retry_after_is_waited_out_for_idempotent_requests(
        serve: Callable[[Script], Server], method: str, statuses: list[int]) -> None:
    busy = b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 0\r\nContent-Length: 2\r\n\r\n{}"
    server = serve(answering(busy, OK, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert [wire.exchange(method, "/x", {}, None, 2, 2).status] == statuses


def test_an_interim_answer_is_skipped(serve: Callable[[Script], Server]) -> None:
    server = serve(answering(b"HTTP/1.1 100 Continue\r\n\r\n" + OK, OK))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert wire.exchange("POST", "/a", {}, b"{}", 2, 2).body == b"{}"
    assert wire.exchange("POST", "/b", {}, b"{}", 2, 2).body == b"{}"
    assert server.connections == [0]


@pytest.mark.parametrize("value", ["Bearer t\r\nX-Evil: 1", "Bearer t\n", "t\0"])
def test_a_header_that_would_split_the_request_is_refused(value: str) -> None:
    wire = Wire("http://127.0.0.1:9", None, None, keep=1)
    with pytest.raises(WireError, match="'Authorization': contains a line break"):
        wire.exchange("GET", "/", {"Authorization": value}, None, 2, 2)


def test_connection_close_is_honoured(serve: Callable[[Script], Server]) -> None:
    closing = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}"
    server = serve(answering(closing, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    wire.exchange("GET", "/a", {}, None, 2, 2)
    wire.exchange("GET", "/b", {}, None, 2, 2)
    assert server.connections == [0, 1]


BROKEN = [
    ("closed before answering, on a new connection", b"", "closed the connection"),
    ("not HTTP", b"SSH-2.0-OpenSSH\r\n", "not an HTTP/1.x answer"),
    ("closed inside the headers", b"HTTP/1.1 200 OK\r\nContent-", "inside an answer's headers"),
    ("closed inside the body", b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}",
     "8 bytes before the answer's end"),
    ("a bad chunk size", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
     "not 1 to 16 hex digits"),
    ("a bad length", b"HTTP/1.1 200 OK\r\nContent-Length: ten\r\n\r\n", "not a number"),
    ("a length in other digits", "HTTP/1.1 200 OK\r\nContent-Length: ²\r\n\r\n".encode(),
     "not a number"),
    ("a negative chunk", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
     "not 1 to 16 hex digits"),
    ("closed inside the trailers",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\nX-T: 1\r\n",
     "inside an answer's trailers"),
]


@pytest.mark.parametrize(("name", "raw", "error"), BROKEN, ids=[c[0] for c in BROKEN])
def test_broken_answers_are_errors_that_say_what_broke(
        serve: Callable[[Script], Server], name: str, raw: bytes, error: str) -> None:
    server = serve(answering(raw, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    with pytest.raises(WireError, match=error):
        wire.exchange("POST", "/a", {}, b"{}", 2, 2)
    assert server.connections == [0]  # a fresh connection's failure is not retried


def test_a_server_that_does_not_answer_times_out(serve: Callable[[Script], Server]) -> None:
    def silent(conn: socket.socket, _: int) -> None:
        _read_request(conn)
        threading.Event().wait(5)
        conn.close()

    server = serve(silent)
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    with pytest.raises(WireError, match="timed out"):
        wire.exchange("POST", "/a", {}, b"{}", 2, 0.2)
    assert server.connections == [0]  # the server may have acted on it: never sent again


def test_nothing_listening_is_an_error() -> None:
    probe = socket.create_server(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    wire = Wire(f"http://127.0.0.1:{port}", None, None, keep=4)
    with pytest.raises(WireError, match="refused"):
        wire.exchange("GET", "/", {}, None, 2, 2)


def test_the_request_carries_host_length_and_headers(
        serve: Callable[[Script], Server]) -> None:
    seen: list[bytes] = []

    def recording(conn: socket.socket, _: int) -> None:
        with conn:
            seen.append(_read_request(conn))
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")

    server = serve(recording)
    wire = Wire(f"http://127.0.0.1:{server.port}/prefix", None, None, keep=4)
    wire.exchange("PATCH", "/prefix/api/v1/p?x=1", {"Authorization": "Bearer t"},
                  b'{"a":1}', 2, 2)
    head, _, body = seen[0].partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    assert lines[0] == b"PATCH /prefix/api/v1/p?x=1 HTTP/1.1"
    assert f"Host: 127.0.0.1:{server.port}".encode() in lines
    assert b"Authorization: Bearer t" in lines and b"Content-Length: 7" in lines
    assert body == b'{"a":1}'


def test_a_url_that_is_not_http_is_refused() -> None:
    with pytest.raises(ValueError, match="not an http"):
        Wire("unix:///var/run/socket", None, None, keep=1)


# -- strict reading: nothing a server sends is taken for another request's answer ----------
SMUGGLED = b'HTTP/1.1 200 OK\r\nContent-Length: 12\r\n\r\n{"smuggled"}'
REAL = b'HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\n{"real"}'


def _extra_after_first(pause: float) -> Script:
    """Connection 0 answers its first request and then sends an answer nobody asked for
    (at once, or after ``pause``); every later request, on any connection, gets REAL."""
    def script(conn: socket.socket, index: int) -> None:
        with conn, contextlib.suppress(OSError):  # the client resets what it drops
            if index == 0 and _read_request(conn):
                if pause:
                    conn.sendall(OK)
                    threading.Event().wait(pause)
                    conn.sendall(SMUGGLED)
                else:
                    conn.sendall(OK + SMUGGLED)
            while _read_request(conn):
                conn.sendall(REAL)
    return script


@pytest.mark.parametrize("pause", [0.0, 0.1], ids=["in the same write", "a moment later"])
def test_bytes_left_after_an_answer_drop_the_connection(
        serve: Callable[[Script], Server], pause: float) -> None:
    server = serve(_extra_after_first(pause))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert wire.exchange("GET", "/first", {}, None, 2, 2).body == b"{}"
    threading.Event().wait(pause * 3)
    assert wire.exchange("GET", "/second", {}, None, 2, 2).body == b'{"real"}'
    assert server.connections == [0, 1]


def _chunked(size_line: bytes, data: bytes) -> bytes:
    return (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + size_line + b"\r\n"
            + data + b"\r\n0\r\n\r\n")


CHUNK_SIZES = [  # (size line, accepted); every chunk holds 31 bytes
    (b"1f", True), (b"1F", True), (b"001f", True), (b"1f;name=value", True),
    (b"1f ;name", True), (b"1f\t;a;b=c", True),
    (b"0x1f", False), (b"1_f", False), (b"+1f", False), (b" 1f", False), (b"1f 1", False),
    (b"", False), (b"0" * 16 + b"1f", False), (b"\xd9\xa1f", False),
]


@pytest.mark.parametrize(("size_line", "accepted"), CHUNK_SIZES,
                         ids=[repr(c[0]) for c in CHUNK_SIZES])
def test_chunk_sizes_are_hex_digits_only(serve: Callable[[Script], Server], size_line: bytes,
                                         accepted: bool) -> None:
    data = b"x" * 31
    server = serve(answering(_chunked(size_line, data), close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    if accepted:
        assert wire.exchange("GET", "/", {}, None, 2, 2).body == data
    else:
        with pytest.raises(WireError, match="chunk's size is not 1 to 16 hex digits"):
            wire.exchange("GET", "/", {}, None, 2, 2)


def test_a_chunk_not_followed_by_crlf_is_an_error(serve: Callable[[Script], Server]) -> None:
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\n{}XX0\r\n\r\n"
    server = serve(answering(raw, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    with pytest.raises(WireError, match="not followed by CRLF"):
        wire.exchange("GET", "/", {}, None, 2, 2)


LENGTHS = [  # (Content-Length header lines, the body read, or the error)
    ([b"2", b"2"], b"{}"), ([b"2, 2"], b"{}"), ([b"2 ,2", b"2"], b"{}"),
    ([b"2", b"5"], "different lengths"), ([b"5", b"2"], "different lengths"),
    ([b"2, 3"], "different lengths"), ([b"2,"], "not a number"),
    ([b"1" + b"0" * 30], "not a number"),
]


@pytest.mark.parametrize(("values", "expected"), LENGTHS,
                         ids=[b" / ".join(c[0]).decode() for c in LENGTHS])
def test_content_lengths_that_disagree_are_an_error(
        serve: Callable[[Script], Server], values: list[bytes], expected: bytes | str) -> None:
    head = b"".join(b"Content-Length: " + value + b"\r\n" for value in values)
    server = serve(answering(b"HTTP/1.1 200 OK\r\n" + head + b"\r\n{}...", close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    if isinstance(expected, bytes):
        assert wire.exchange("GET", "/", {}, None, 2, 2).body == expected
    else:
        with pytest.raises(WireError, match=expected):
            wire.exchange("GET", "/", {}, None, 2, 2)


BODIES = [  # answers of 11 bytes and more, against a cap of 10
    ("a length over the cap", b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n", "more than"),
    ("a length no memory holds",
     b"HTTP/1.1 200 OK\r\nContent-Length: 9223372036854775808\r\n\r\n", "more than"),
    ("one chunk over the cap", _chunked(b"b", b"x" * 11), "chunked answer of more than"),
    ("chunks adding up past the cap",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n6\r\nxxxxxx\r\n6\r\nxxxxxx\r\n"
     b"0\r\n\r\n", "chunked answer of more than"),
    ("the largest chunk size", _chunked(b"f" * 16, b""), "chunked answer of more than"),
    ("no length, running past the cap",
     b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n" + b"x" * 11, "ran past"),
]


@pytest.mark.parametrize(("name", "raw", "error"), BODIES, ids=[c[0] for c in BODIES])
def test_a_body_over_the_cap_is_refused(serve: Callable[[Script], Server],
                                        monkeypatch: pytest.MonkeyPatch, name: str, raw: bytes,
                                        error: str) -> None:
    monkeypatch.setattr(wire_module, "MAX_BODY", 10)
    server = serve(answering(raw, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    with pytest.raises(WireError, match=error):
        wire.exchange("GET", "/", {}, None, 2, 2)


def test_a_body_at_the_cap_is_read(serve: Callable[[Script], Server],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wire_module, "MAX_BODY", 10)
    monkeypatch.setattr(wire_module, "READ_PIECE", 3)  # read in pieces, as a long body is
    server = serve(answering(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789",
                             close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert wire.exchange("GET", "/", {}, None, 2, 2).body == b"0123456789"


def test_the_cap_holds_the_largest_list_page() -> None:
    """An informer's page of 250 objects of etcd's largest (1.5 MiB) fits under the cap."""
    assert wire_module.MAX_BODY >= 250 * 1.5 * 1024 * 1024


@pytest.mark.parametrize("target", ["/a b", "/a\r\nX-Evil: 1", "/a\n", "/a\0", "/a\x7f",
                                    "/a\tb", "a/b", "", "http://elsewhere/"])
def test_a_request_target_with_a_space_or_control_character_is_refused(target: str) -> None:
    wire = Wire("http://127.0.0.1:9", None, None, keep=1)  # nothing is sent: port 9 is shut
    with pytest.raises(WireError, match=r"request target .*must start with /"):
        wire.exchange("GET", target, {}, None, 2, 2)


NOW = 1_800_000_000.0
RETRY_AFTER = [  # (the header's value, seconds waited or None: not retried)
    ("0", 0.0), ("3", 3.0), (" 2\t", 2.0), ("5", 5.0), ("6", 5.0), ("31536000", 5.0),
    ("99999999999999999999999", 5.0), ("1e9", None), ("inf", None), ("nan", None),
    ("-1", None), ("1.5", None), ("", None), ("soon", None), ("+3", None), ("٣", None),
    (email.utils.formatdate(NOW + 2, usegmt=True), 2.0),
    (email.utils.formatdate(NOW - 60, usegmt=True), 0.0),
    (email.utils.formatdate(NOW + 86400 * 365, usegmt=True), 5.0),
    ("Fri, 31 Dec 9999 23:59:59 GMT", 5.0),
    ("1" + "0" * 400, 5.0), ("9" * 5000, 5.0),  # past a float, past int()'s digit limit
]


@pytest.mark.parametrize(("value", "seconds"), RETRY_AFTER, ids=[c[0][:24] for c in RETRY_AFTER])
def test_retry_after_is_read_as_urllib3_reads_it_and_capped(value: str,
                                                            seconds: float | None) -> None:
    assert wire_module.retry_after_seconds(value, now=NOW) == seconds
    assert wire_module.RETRY_AFTER_MAX == 5.0


@pytest.mark.parametrize("value", ["inf", "1e9", "-1"])
def test_a_retry_after_that_is_no_wait_returns_the_answer(
        serve: Callable[[Script], Server], value: str) -> None:
    """``inf`` made the old exchange raise OverflowError from time.sleep; ``1e9`` slept 31
    years: both are now an answer the caller sees at once."""
    busy = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: " + value.encode()
            + b"\r\nContent-Length: 2\r\n\r\n{}")
    server = serve(answering(busy, close_after=True))
    wire = Wire(f"http://127.0.0.1:{server.port}", None, None, keep=4)
    assert wire.exchange("GET", "/", {}, None, 2, 2).status == 503


@pytest.fixture(scope="module")
def tls_pair(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    directory = tmp_path_factory.mktemp("tls")
    cert, key = str(directory / "cert.pem"), str(directory / "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key, "-out", cert,
                    "-days", "1", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost"], check=True, capture_output=True)
    return cert, key


@pytest.mark.parametrize(("script", "connections", "second"), [
    (answering(OK, REAL), [0], b'{"real"}'),  # nothing left over: the connection is kept
    (_extra_after_first(0.0), [0, 1], b'{"real"}'),  # left over, inside TLS: dropped
], ids=["kept", "left over"])
def test_over_tls_a_clean_connection_is_kept_and_one_with_bytes_left_is_not(
        serve: Callable[[Script], Server], tls_pair: tuple[str, str], script: Script,
        connections: list[int], second: bytes) -> None:
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(*tls_pair)

    def tls(conn: socket.socket, index: int) -> None:
        with contextlib.suppress(OSError):
            script(server_context.wrap_socket(conn, server_side=True), index)

    server = serve(tls)
    client_context = ssl.create_default_context(cafile=tls_pair[0])
    wire = Wire(f"https://127.0.0.1:{server.port}", client_context, "localhost", keep=4)
    assert wire.exchange("GET", "/first", {}, None, 2, 2).body == b"{}"
    assert wire.exchange("GET", "/second", {}, None, 2, 2).body == second
    assert server.connections == connections


def test_watches_on_urllib3_cap_retry_after_as_the_exchange_does(
        serve: Callable[[Script], Server], tmp_path: Path) -> None:
    """A watch (urllib3's pool) answered 503 with Retry-After of a day tries again after
    RETRY_AFTER_MAX, not a day later (urllib3's own cap is 6 hours)."""
    busy = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 86400\r\n"
            b"Content-Length: 2\r\n\r\n{}")
    server = serve(answering(busy, OK, close_after=True))
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "x",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{server.port}"}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}]}))
    pool = load_endpoint(str(kubeconfig)).pool(2)
    answers: list[int] = []
    thread = threading.Thread(target=lambda: answers.append(
        pool.request("GET", f"http://127.0.0.1:{server.port}/api/v1/pods?watch=true").status),
        daemon=True)
    thread.start()
    thread.join(timeout=60)  # generous: the cap is 5 s
    assert answers == [200]
