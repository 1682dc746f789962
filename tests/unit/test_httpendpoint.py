"""The metrics and health endpoint holds idle and slow connections without threads: at most
MAX_CONNECTIONS of them, each closed after REQUEST_TIMEOUT, and it still answers."""

from __future__ import annotations

import contextlib
import socket
import threading
import urllib.request
from collections.abc import Iterator

import pytest

from coscheduling.framework.metrics import SchedulerMetrics
from coscheduling.ops import httpendpoint
from coscheduling.ops.httpendpoint import HttpEndpoint


@pytest.fixture
def endpoint() -> Iterator[HttpEndpoint]:
    served = HttpEndpoint("127.0.0.1:0", SchedulerMetrics(), ready=lambda: True,
                          alive=lambda: True)
    served.start()
    yield served
    served.stop()


def _get(endpoint: HttpEndpoint, path: str) -> int:
    with urllib.request.urlopen(f"http://127.0.0.1:{endpoint.port}{path}", timeout=10) as r:
        return int(r.status)


def _closed_by_server(sock: socket.socket) -> bool:
    sock.setblocking(False)
    try:
        return sock.recv(1) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_many_idle_connections_hold_no_thread_and_the_endpoint_still_answers(
        endpoint: HttpEndpoint) -> None:
    """300 idle connections once held 300 threads."""
    before = threading.active_count()
    idle = [socket.create_connection(("127.0.0.1", endpoint.port), timeout=5)
            for _ in range(300)]
    try:
        assert _get(endpoint, "/healthz") == 200
        assert _get(endpoint, "/metrics") == 200
        assert threading.active_count() - before <= httpendpoint.WORKERS
        assert endpoint.server.open_connections() <= httpendpoint.MAX_CONNECTIONS
        still_open = [s for s in idle if not _closed_by_server(s)]
        assert len(still_open) <= httpendpoint.MAX_CONNECTIONS
    finally:
        for sock in idle:
            sock.close()


REQUESTS = [  # (what a client sends, then waits; the answer's first line, b"": closed)
    (b"", b""),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n", b""),  # the head never ends
    (b"X" * (httpendpoint.MAX_REQUEST_HEAD + 10), b""),
    (b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.0 200 OK"),
    (b"GET /readyz HTTP/1.0\n\n", b"HTTP/1.0 200 OK"),
    (b"GET /nowhere HTTP/1.0\r\n\r\n", b"HTTP/1.0 404 Not Found"),
    (b"POST /metrics HTTP/1.0\r\nContent-Length: 0\r\n\r\n", b"HTTP/1.0 501"),
]


@pytest.mark.parametrize(("sent", "first_line"), REQUESTS, ids=[r[0][:30].decode() or "idle"
                                                               for r in REQUESTS])
def test_a_connection_is_answered_once_its_head_is_whole_or_closed_after_the_timeout(
        monkeypatch: pytest.MonkeyPatch, endpoint: HttpEndpoint, sent: bytes,
        first_line: bytes) -> None:
    monkeypatch.setattr(httpendpoint, "REQUEST_TIMEOUT", 0.3)
    with socket.create_connection(("127.0.0.1", endpoint.port), timeout=10) as sock:
        with contextlib.suppress(OSError):  # the server may close a head too long early
            sock.sendall(sent)
        received = b""
        with contextlib.suppress(ConnectionResetError):
            while chunk := sock.recv(65536):  # ends when the server closes it
                received += chunk
    assert received.split(b"\r\n", 1)[0].startswith(first_line), received[:200]
    if not first_line:
        assert received == b""


def test_a_busy_port_is_a_listen_error() -> None:
    with socket.create_server(("127.0.0.1", 0)) as busy, \
            pytest.raises(httpendpoint.ListenError, match="cannot serve /metrics"):
        HttpEndpoint(f"127.0.0.1:{busy.getsockname()[1]}", SchedulerMetrics(),
                     ready=lambda: True, alive=lambda: True)
