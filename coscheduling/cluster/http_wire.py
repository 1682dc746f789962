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
with a ``Retry-After`` (whole seconds or an HTTP date, as urllib3 reads it; capped at
``RETRY_AFTER_MAX``) is sent again after that wait, up to 3 times. A kept connection the
server closed while it was idle is found before it is used; one that breaks after a request
went out is retried only for an idempotent request (a POST the server may have acted on is
never sent twice).

An answer is read strictly (RFC 9112), since a misread one would be taken for the next
request's: a connection with bytes left over after an answer is closed, not kept; chunk
sizes are hex digits only; Content-Length values that disagree are an error; a body larger
than ``MAX_BODY`` is refused before it is read; a request target with a space or control
character is refused before it is sent.
"""

from __future__ import annotations

import contextlib
import email.utils
import io
import re
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
# The API server asks for 1 s (priority and fairness); urllib3 caps at 6 hours, which on the
# election thread would outlast the renew deadline many times over (a leader that cannot
# renew must notice it), so a wait is capped far below the default renewDeadline of 10 s.
RETRY_AFTER_MAX = 5.0
# The biggest answer the scheduler reads is an informer's list page: 250 objects
# (informer.page_size), each at most etcd's default request limit of 1.5 MiB, is 375 MiB;
# with the list's envelope and margin, 512 MiB. A bigger body is refused unread.
MAX_BODY = 512 * 1024 * 1024
READ_PIECE = 1024 * 1024  # a long body is read this much at a time, not allocated at once
MAX_CHUNK_DIGITS = 16  # 64 bits of size; more is no chunk a server means
_CHUNK_SIZE = re.compile(rb"[0-9A-Fa-f]{1,%d}" % MAX_CHUNK_DIGITS)
_RETRY_SECONDS = re.compile(r"[0-9]+")
_BAD_TARGET = re.compile(r"[\x00-\x20\x7f]")  # what http.client refuses in a target too


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
        return retry_after_seconds(self.retry_after)


def retry_after_seconds(value: str, now: float | None = None) -> float | None:
    """A ``Retry-After`` value as urllib3 reads it: whole seconds, or an HTTP date (the
    wait until then, at least 0), capped at RETRY_AFTER_MAX; None when absent or anything
    else (``1.5``, ``inf``, ``-1``: not retried)."""
    value = value.strip(" \t")
    if _RETRY_SECONDS.fullmatch(value):
        # A number of many digits is past the cap: converting it could overflow a float or
        # pass Python's limit on the digits of an int.
        return RETRY_AFTER_MAX if len(value) > 9 else min(float(int(value)), RETRY_AFTER_MAX)
    date = email.utils.parsedate_tz(value) if value else None
    if date is None:
        return None
    try:
        seconds = email.utils.mktime_tz(date) - (time.time() if now is None else now)
    except (OverflowError, ValueError):  # a year no clock reaches
        return None
    return min(max(seconds, 0.0), RETRY_AFTER_MAX)


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

    def leftover(self) -> bool:
        """Whether bytes follow the answer just read (in the reader's buffer, TLS's or the
        socket's): read later, they would be taken for the next request's answer. peek
        returns buffered bytes without I/O, else reads once: the socket is made
        non-blocking for it (the next exchange sets its timeout again). Nothing reads an
        idle connection, so ``dropped`` need not look at the buffer again."""
        if isinstance(self.sock, ssl.SSLSocket) and self.sock.pending():
            return True
        try:
            self.sock.settimeout(0.0)
            return bool(self.reader.peek(1))
        except (BlockingIOError, ssl.SSLWantReadError):
            return False
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
        if not target.startswith("/") or _BAD_TARGET.search(target):
            raise WireError(f"request target {target[:80]!r}: must start with / and hold no "
                            "space or control character (quote it)")
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
        if keep and not connection.leftover():
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
        body = _to_end(reader)
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
            length = _content_length(value, length)
        elif name == "retry-after":
            retry_after = value
        elif name == "transfer-encoding":
            chunked = value.lower().endswith("chunked")
        elif name == "connection":
            tokens = {t.strip().lower() for t in value.split(",")}
            keep = "close" not in tokens and (keep or "keep-alive" in tokens)
    raise WireError(f"an answer has more than {MAX_HEADER_LINES} header lines")


def _content_length(value: str, before: int | None) -> int:
    """A Content-Length value (a list of equal ones, or equal to an earlier header's, is
    one length, as RFC 9112 allows); lengths that disagree are an error."""
    lengths = {v.strip() for v in value.split(",")}
    for text in lengths:
        if not text.isdecimal() or not text.isascii() or len(text) > 19:
            raise WireError(f"Content-Length: not a number: {value[:40]!r}")
    found = {int(text) for text in lengths} | ({before} if before is not None else set())
    if len(found) > 1:
        raise WireError(f"Content-Length: the answer gives different lengths: "
                        f"{sorted(found)[:4]}")
    length = found.pop()
    if length > MAX_BODY:
        raise WireError(f"Content-Length: {length} bytes is more than the {MAX_BODY} an "
                        "answer may have")
    return length


def _exactly(reader: io.BufferedReader, length: int) -> bytes:
    """``length`` bytes; a long body is read piece by piece, so a length the server does
    not send costs no memory up front."""
    if length <= READ_PIECE:
        data = reader.read(length)
    else:
        pieces, left = [], length
        while left and (piece := reader.read(min(left, READ_PIECE))):
            pieces.append(piece)
            left -= len(piece)
        data = b"".join(pieces)
    if len(data) != length:
        raise WireError(f"the connection closed {length - len(data)} bytes before the "
                        "answer's end")
    return data


def _to_end(reader: io.BufferedReader) -> bytes:
    """A body without a length: up to the connection's end, at most MAX_BODY bytes."""
    pieces, total = [], 0
    while piece := reader.read1(READ_PIECE):
        total += len(piece)
        if total > MAX_BODY:
            raise WireError(f"an answer without a length ran past {MAX_BODY} bytes")
        pieces.append(piece)
    return b"".join(pieces)


def _chunk_size(line: bytes) -> int:
    """A chunk's size line: hex digits, then optionally extensions after ';' (ignored)."""
    size = line.split(b";", 1)[0].rstrip(b"\r\n \t")
    if not _CHUNK_SIZE.fullmatch(size):
        raise WireError(f"a chunk's size is not 1 to {MAX_CHUNK_DIGITS} hex digits: "
                        f"{size[:40]!r}")
    return int(size, 16)


def _read_chunks(reader: io.BufferedReader) -> bytes:
    parts = []
    total = 0
    while True:
        size = _chunk_size(_line(reader))
        if size == 0:
            break
        total += size
        if total > MAX_BODY:
            raise WireError(f"a chunked answer of more than {MAX_BODY} bytes")
        parts.append(_exactly(reader, size))
        if _exactly(reader, 2) != b"\r\n":
            raise WireError(f"a chunk of {size} bytes is not followed by CRLF")
    while True:  # trailers, ignored
        line = _line(reader)
        if line in (b"\r\n", b"\n"):
            return b"".join(parts)
        if not line:
            raise WireError("the connection closed inside an answer's trailers")
