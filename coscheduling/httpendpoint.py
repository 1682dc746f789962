"""The HTTP endpoint: Prometheus /metrics, /healthz (alive) and /readyz (caches synced)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from coscheduling.framework.metrics import SchedulerMetrics


class ListenError(Exception):
    """The endpoint's address cannot be listened on (taken, or not this machine's)."""


def parse_address(address: str, default_host: str = "127.0.0.1") -> tuple[str, int]:
    """``host:port`` (or ``:port``, meaning the default host) -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{address!r} is not host:port")
    return (host.strip("[]") or default_host), int(port)


class HttpEndpoint:
    def __init__(self, address: str, metrics: SchedulerMetrics, ready: Callable[[], bool],
                 alive: Callable[[], bool]) -> None:
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
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
            self.server = ThreadingHTTPServer((host, port), Handler)
        except OSError as err:
            raise ListenError(
                f"cannot serve /metrics, /healthz and /readyz on {address}: "
                f"{err.strerror or err} (is another process using the port? change "
                "metricsBindAddress, or set it to \"\" to turn the endpoint off)") from None
        self.server.daemon_threads = True
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
