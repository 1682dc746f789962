"""HTTP/1.1 requests to the API server on kept-alive connections, without urllib3's layers.

A scheduler writes a Binding and an Event per pod, and a status patch per gang change: on
two cores, the client's own work per request decided how fast events landed (profiles put
about 40% of the scheduler's GIL samples in urllib3 and ``http.client``, a quarter of it in
``email``'s header parser). The API server's answers are simple (a status line, a few headers,
a body of known length or chunks), so this module writes a request in one ``sendall`` and
reads the answer with a buffered reader's ``readline`` and ``read``.

Used for plain requests to a server reached directly; watches (streams) and servers behind
a proxy stay on urllib3. TLS is the endpoint's own context (certificate and host name
checked by ``ssl``, as urllib3 has them checked). Retries are urllib3's defaults: a failed
connect is tried again up to 3 times, and an idempotent request answered 413, 429 or 503
with a ``Retry-After`` in seconds is sent again after that wait, up to 3 times. A kept
connection the server closed while it was idle is found before it is used; one that breaks
after a request went out is retried only for an idempotent request (a POST the server may
have acted on is never sent twice).
"""

from __future__ import annotations

import contextlib
import io
import select
import socket
import ssl
import threading
import time
from collections.abc import Mapping, Sequence
from urllib.parse import urlsplit

MAX_HEADER_LINES = 100
MAX_LINE = 65536
RETRIES = 3
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})
RETRY_AFTER_STATUSES = frozenset({413, 429, 503})


class WireError(Exception):
    """The server could not be reached, or its answer was not HTTP/1.1 as expected."""


class Answer:
    __slots__ = ("body", "reason", "retry_after", "status")

    def __init__(self, status: int, reason: str, body: bytes, retry_after: str = "") -> None:
        self.status = status
        self.reason = reason
        self.body = body
        self.retry_after = retry_after

    def wait_before_retry(self, method: str) -> float | None:
        """Seconds to wait before sending the request again (urllib3's default), or None."""
        if method not in IDEMPOTENT or self.status not in RETRY_AFTER_STATUSES:
            return None
        try:
            seconds = float(self.retry_after)
        except ValueError:
            return None  # absent, or an HTTP date: not retried
        return seconds if seconds >= 0 else None


class _Connection:
    """One kept-alive connection; used by one thread at a time."""

    __slots__ = ("reader", "reused", "sock")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reader: io.BufferedReader = sock.makefile("rb")
        self.reused = False

    def close(self) -> None:
        for closing in (self.reader, self.sock):
            with contextlib.suppress(OSError):
                closing.close()

    def dropped(self) -> bool:
        """Whether an idle connection has something to read: the server closed it (or
        sent what nobody asked for); it must not carry a request."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        poller = select.poll()  # poll, not select: no limit on the descriptor's number
        poller.register(self.sock, select.POLLIN)
        try:
            return bool(poller.poll(0))
        except OSError:
            return True


class Wire:
    """Connections to one server (``https://host:port`` or ``http://...``), at most
    ``keep`` of them kept idle; more are opened when more threads ask at once."""

    def __init__(self, url: str, ssl_context: ssl.SSLContext | None, server_hostname: str | None,
                 keep: int, socket_options: Sequence[tuple[int, int, int]] = ()) -> None:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"server: not an http(s) URL: {url!r}")
        self._tls = parts.scheme == "https"
        self._address = (parts.hostname, parts.port or (443 if self._tls else 80))
        self._context = ssl_context if ssl_context is not None else (
            ssl.create_default_context() if self._tls else None)
        self._server_hostname = server_hostname or parts.hostname
        default_port = (parts.port or 0) in (0, 443 if self._tls else 80)
        self._host_header = parts.netloc.rsplit("@", 1)[-1] if not default_port \
            else parts.hostname
        self._options = list(socket_options)
        self._keep = keep
        self._idle: list[_Connection] = []
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    def exchange(self, method: str, target: str, headers: Mapping[str, str],
                 body: bytes | None, connect_timeout: float, read_timeout: float) -> Answer:
        """Send one request and read its answer, retrying as the module says."""
        request = self._encode(method, target, headers, body)
        retries = RETRIES
        while True:
            connection = self._take(connect_timeout)
            try:
                connection.sock.settimeout(read_timeout)
                answer, keep = _read_answer(connection, request, method)
            except _ClosedBeforeAnswer as err:
                connection.close()
                if connection.reused and method in IDEMPOTENT:
                    continue  # a connection that died meanwhile; the pool holds finitely many
                raise WireError(f"the server closed the connection before answering: {err}"
                                ) from err
            except (OSError, WireError) as err:
                connection.close()
                if isinstance(err, WireError):
                    raise
                raise WireError(str(err) or type(err).__name__) from err
            self._give_back(connection, keep)
            wait = answer.wait_before_retry(method)
            if wait is None or retries <= 0:
                return answer
            retries -= 1
            time.sleep(wait)

    def _encode(self, method: str, target: str, headers: Mapping[str, str],
                body: bytes | None) -> bytes:
        lines = [f"{method} {target} HTTP/1.1", f"Host: {self._host_header}"]
        for name, value in headers.items():
            if any(c in name or c in value for c in "\r\n\0"):  # would split the request
                raise WireError(f"header {name.strip()!r}: contains a line break or NUL")
            lines.append(f"{name}: {value}")
        if body is not None or method in ("POST", "PUT", "PATCH"):
            lines.append(f"Content-Length: {len(body or b'')}")
        try:
            head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        except UnicodeEncodeError as err:
            raise WireError(f"a header or the path is not Latin-1: {err.reason}") from None
        return head + body if body else head

    def _take(self, connect_timeout: float) -> _Connection:
        """A kept connection still open, else a new one (a failed connect tried again)."""
        while True:
            with self._lock:
                connection = self._idle.pop() if self._idle else None
            if connection is None:
                break
            if not connection.dropped():
                connection.reused = True
                return connection
            connection.close()
        for attempt in range(RETRIES + 1):
            try:
                return _Connection(self._connect(connect_timeout))
            except ssl.SSLError as err:  # a certificate that does not verify: no retry
                raise WireError(str(err) or type(err).__name__) from err
            except OSError as err:
                if attempt == RETRIES:
                    raise WireError(str(err) or type(err).__name__) from err
        raise AssertionError("unreachable")

    def _connect(self, connect_timeout: float) -> socket.socket:
        sock = socket.create_connection(self._address, timeout=connect_timeout)
        try:
            for option in self._options:
                sock.setsockopt(*option)
            if self._context is not None:
                return self._context.wrap_socket(sock, server_hostname=self._server_hostname)
        except OSError:
            sock.close()
            raise
        return sock

    def _give_back(self, connection: _Connection, keep: bool) -> None:
        if keep:
            with self._lock:
                if len(self._idle) < self._keep:
                    self._idle.append(connection)
                    return
        connection.close()


class _ClosedBeforeAnswer(WireError):
    pass


def _line(reader: io.BufferedReader) -> bytes:
    line = reader.readline(MAX_LINE + 1)
    if len(line) > MAX_LINE:
        raise WireError("an answer's line is longer than 64 KiB")
    return line


def _read_answer(connection: _Connection, request: bytes, method: str) -> tuple[Answer, bool]:
    """Send ``request``; (its answer, whether the connection may be used again)."""
    reader = connection.reader
    try:
        connection.sock.sendall(request)
        status_line = _line(reader)
    except (ConnectionResetError, BrokenPipeError) as err:
        raise _ClosedBeforeAnswer(str(err)) from err
    if not status_line:
        raise _ClosedBeforeAnswer("no answer")
    while True:
        version, status, reason = _status(status_line)
        length, chunked, keep, retry_after = _read_headers(reader, version == "HTTP/1.1")
        if not 100 <= status < 200 or status == 101:
            break
        status_line = _line(reader)  # an interim answer (100 Continue): the real one follows
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        body = b""
    elif chunked:
        body = _read_chunks(reader)
    elif length is not None:
        body = _exactly(reader, length)
    else:  # no length: the body runs to the end of the connection
        body = reader.read()
        keep = False
    return Answer(status, reason, body, retry_after), keep and status != 101


def _status(line: bytes) -> tuple[str, int, str]:
    version, _, rest = line.decode("latin-1").rstrip("\r\n").partition(" ")
    code, _, reason = rest.partition(" ")
    if not version.startswith("HTTP/1.") or len(code) != 3 or not code.isdecimal():
        raise WireError(f"not an HTTP/1.x answer: {line[:80]!r}")
    return version, int(code), reason


def _read_headers(reader: io.BufferedReader,
                  keep: bool) -> tuple[int | None, bool, bool, str]:
    """Content-Length, whether the body is chunked, whether the connection stays open, and
    Retry-After."""
    length: int | None = None
    chunked = False
    retry_after = ""
    for _ in range(MAX_HEADER_LINES):
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            return length, chunked, keep, retry_after
        if not line:
            raise WireError("the connection closed inside an answer's headers")
        name, _, value = line.decode("latin-1").partition(":")
        name, value = name.strip().lower(), value.strip()
        if name == "content-length":
            if not value.isdecimal() or not value.isascii():
                raise WireError(f"Content-Length: not a number: {value[:40]!r}")
            length = int(value)
        elif name == "retry-after":
            retry_after = value
        elif name == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
        elif name == "connection":
            tokens = {t.strip().lower() for t in value.split(",")}
            keep = "close" not in tokens and (keep or "keep-alive" in tokens)
    raise WireError(f"an answer has more than {MAX_HEADER_LINES} header lines")


def _exactly(reader: io.BufferedReader, length: int) -> bytes:
    data = reader.read(length)
    if len(data) != length:
        raise WireError(f"the connection closed {length - len(data)} bytes before the "
                        "answer's end")
    return data


def _read_chunks(reader: io.BufferedReader) -> bytes:
    parts = []
    while True:
        size_line = _line(reader).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise WireError(f"a chunk's size is not hexadecimal: {size_line[:40]!r}") from None
        if size < 0:
            raise WireError(f"a chunk's size is negative: {size_line[:40]!r}")
        if size == 0:
            break
        parts.append(_exactly(reader, size))
        _exactly(reader, 2)  # the CRLF after the chunk
    while True:  # trailers, ignored
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if not line:
            raise WireError("the connection closed inside an answer's trailers")
