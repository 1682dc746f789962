"""The HTTP endpoint: Prometheus /metrics, /healthz (alive) and /readyz (caches synced).

A connection holds no thread while it sends its request: one gate thread collects request
heads for every open connection, and a small pool answers those that are complete. So idle
or slow connections cost a descriptor each, at most ``MAX_CONNECTIONS`` of them (the oldest
waiting one is closed to let a new one in, so a probe still gets through), each closed after
``REQUEST_TIMEOUT``; only ``WORKERS`` threads ever answer, and an answer the client does not
read is given up after ``REQUEST_TIMEOUT``.
"""

from __future__ import annotations

import contextlib
import io
import selectors
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

from coscheduling.framework.metrics import SchedulerMetrics

MAX_CONNECTIONS = 64
WORKERS = 4
REQUEST_TIMEOUT = 5.0  # to send a whole request head, and to take the whole answer
MAX_REQUEST_HEAD = 16 * 1024
_HEAD_END = (b"\r\n\r\n", b"\n\n")


class ListenError(Exception):
    """The endpoint's address cannot be listened on (taken, or not this machine's)."""


def parse_address(address: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port`` (or ``:port``, meaning the default host) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not host:port")
    return (host.strip("[]") or default_host), int(port)


class _Waiting:
    """A connection whose request head has not arrived whole."""

    __slots__ = ("address", "head", "since")

    def __init__(self, address: Any) -> None:
        self.address = address
        self.head = b""
        self.since = time.monotonic()


class GatedServer(HTTPServer):
    """An HTTPServer whose connections wait in a selector, without a thread, until their
    request head is complete; a pool of WORKERS threads then answers each."""

    request_queue_size = 128  # connections the kernel holds before they are accepted

    def __init__(self, address: tuple[str, int],
                 handler: type[BaseHTTPRequestHandler]) -> None:
        # Set before binding: a failed bind calls server_close.
        self._selector = selectors.DefaultSelector()
        self._waiting: dict[socket.socket, _Waiting] = {}  # oldest first
        self._answering = 0
        self._heads: dict[socket.socket, bytes] = {}
        self._lock = threading.Lock()
        self._wake_read, self._wake = socket.socketpair()
        self._selector.register(self._wake_read, selectors.EVENT_READ)
        self._pool = ThreadPoolExecutor(WORKERS, thread_name_prefix="http")
        self._closed = False
        self._gate = threading.Thread(target=self._gather, name="http-gate", daemon=True)
        super().__init__(address, handler)
        self._gate.start()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Called by serve_forever for each accepted connection: it waits at the gate."""
        with self._lock:
            if len(self._waiting) + self._answering >= MAX_CONNECTIONS:
                if not self._waiting:  # every slot is being answered: no room
                    self.shutdown_request(request)
                    return
                self._drop(next(iter(self._waiting)))  # the oldest waiting one makes room
            request.setblocking(False)
            self._waiting[request] = _Waiting(client_address)
            self._selector.register(request, selectors.EVENT_READ)
        self._wake.send(b"\0")

    def open_connections(self) -> int:
        with self._lock:
            return len(self._waiting) + self._answering

    def _gather(self) -> None:
        while not self._closed:
            for key, _ in self._selector.select(timeout=0.25):
                if key.fileobj is self._wake_read:
                    with contextlib.suppress(OSError):
                        self._wake_read.recv(4096)
                else:
                    self._read_head(key.fileobj)  # type: ignore[arg-type]
            self._drop_expired()

    def _read_head(self, sock: socket.socket) -> None:
        with self._lock:
            waiting = self._waiting.get(sock)
            if waiting is None:
                return
            try:
                data = sock.recv(MAX_REQUEST_HEAD)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                data = b""
            waiting.head += data
            if not data or len(waiting.head) > MAX_REQUEST_HEAD:
                self._drop(sock)  # closed by the client, or a head too long
            elif any(end in waiting.head for end in _HEAD_END):
                self._selector.unregister(sock)
                del self._waiting[sock]
                self._answering += 1
                self._heads[sock] = waiting.head
                self._pool.submit(self._answer, sock, waiting.address)

    def _answer(self, sock: socket.socket, address: Any) -> None:
        try:
            self.finish_request(sock, address)
        except Exception:
            self.handle_error(sock, address)
        finally:
            self.shutdown_request(sock)
            with self._lock:
                self._answering -= 1
                self._heads.pop(sock, None)

    def take_head(self, sock: socket.socket) -> bytes:
        with self._lock:
            return self._heads.pop(sock, b"")

    def _drop_expired(self) -> None:
        deadline = time.monotonic() - REQUEST_TIMEOUT
        with self._lock:
            for sock in [s for s, w in self._waiting.items() if w.since < deadline]:
                self._drop(sock)

    def _drop(self, sock: socket.socket) -> None:
        """Close a waiting connection (the lock held)."""
        del self._waiting[sock]
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        self.shutdown_request(sock)

    def server_close(self) -> None:
        super().server_close()
        self._closed = True
        self._wake.send(b"\0")
        if self._gate.is_alive():
            self._gate.join(timeout=2)
        with self._lock:
            for sock in list(self._waiting):
                self._drop(sock)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self._selector.close()
        self._wake_read.close()
        self._wake.close()


class HttpEndpoint:
    def __init__(self, address: str, metrics: SchedulerMetrics, ready: Callable[[], bool],
                 alive: Callable[[], bool]) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            timeout = REQUEST_TIMEOUT  # the socket's, while the answer is written

            def setup(self) -> None:
                super().setup()
                assert isinstance(self.server, GatedServer)
                self.rfile.close()  # the head was read at the gate: the request is that
                self.rfile = io.BytesIO(self.server.take_head(self.connection))

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    endpoint._answer(self, 200, metrics.exposition(),
                                     "text/plain; version=0.0.4; charset=utf-8")
                elif path == "/healthz":
                    ok = alive()
                    endpoint._answer(self, 200 if ok else 500, "ok\n" if ok else "stalled\n")
                elif path == "/readyz":
                    ok = ready()
                    endpoint._answer(self, 200 if ok else 503,
                                     "ok\n" if ok else "caches not synced\n")
                else:
                    endpoint._answer(self, 404, "not found\n")

            def log_message(self, format: str, *args: object) -> None:
                return  # scrapes every few seconds would flood the log

        host, port = parse_address(address)
        try:
            self.server = GatedServer((host, port), Handler)
        except OSError as err:
            raise ListenError(
                f"cannot serve /metrics, /healthz and /readyz on {address}: "
                f"{err.strerror or err} (is another process using the port? change "
                "metricsBindAddress, or set it to \"\" to turn the endpoint off)") from None
        self.port = self.server.server_address[1]
        self._thread = threading.Thread(target=self.server.serve_forever, name="http",
                                        daemon=True)

    @staticmethod
    def _answer(handler: BaseHTTPRequestHandler, code: int, body: str,
                content_type: str = "text/plain; charset=utf-8") -> None:
        data = body.encode()
        handler.send_response(code)
        handler.send_header("Content-Type", content_type)
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        # shutdown() waits for serve_forever to end: it would wait forever if never started
        # (e.g. `run` giving up because the gRPC port is taken).
        if self._thread.is_alive():
            self.server.shutdown()
        self.server.server_close()
