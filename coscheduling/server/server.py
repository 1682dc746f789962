"""The gRPC server: the Scheduling service, health, optional reflection, TLS, and shutdown.

Safe defaults: it listens on 127.0.0.1 only, and anywhere else only with mutual TLS and
per-RPC authorization (or a loudly named override); it refuses to share its port
(SO_REUSEPORT off, so a second server fails instead of silently taking half the
connections), caps messages at 16 MiB both ways, releases reservations whose caller went
quiet, and reports SERVING on the standard health service only once the scheduler's caches
have synced (an answer from a half-listed cache would be wrong).

It is grpcio's thread-pool server: a call that waits for the cache lock (the scheduling loop
holds it for a cycle) holds one worker, not every call; grpcio's asyncio server served these
calls no faster here and with more CPU per call (bench/grpc_latency.py, bench/RESULTS.md).
grpc polls inline (polling.py).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

import grpc
from google.protobuf.message import DecodeError
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from coscheduling.config.identities import identity_forms
from coscheduling.server.auth import (
    LEADER_ONLY_RPCS,
    UNIX_PREFIX,
    Authorizer,
    is_local,
)
from coscheduling.server.convert import RequestError, invalid, shown
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.servicer import SERVICE_NAME, SchedulingServicer

if TYPE_CHECKING:
    from coscheduling.core.scheduler import Scheduler

log = logging.getLogger(__name__)

DEFAULT_ADDRESS = "127.0.0.1:50051"
DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
INSECURE_FLAG = "--insecure-expose-grpc-without-mtls"
DEFAULT_SIMULATES_PER_MINUTE = 30
MAX_STATUS = 1024  # characters of an error message sent back (the metadata limit is 8 KiB)


@dataclass(frozen=True)
class GrpcSettings:
    """How the plugin server listens. TLS is on when a certificate is given; mutual TLS
    (clients must present a certificate signed by ``client_ca``) when a client CA is."""

    address: str = DEFAULT_ADDRESS
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    tls_cert: str = ""  # PEM file paths
    tls_key: str = ""
    client_ca: str = ""
    reflection: bool = False
    # Threads answering calls. Each open WatchDecisions stream holds one for as long as it
    # is open, so at most ``max_streams`` may be open (more are refused), leaving the rest
    # to the other calls.
    max_workers: int = 32
    max_streams: int = 16
    max_concurrent_rpcs: int = 256
    sync_poll_seconds: float = 0.05
    # Certificate identities allowed to call (configuration: grpc.readOnlyClients and
    # grpc.mutatingClients), checked on every call under mutual TLS.
    read_only_clients: tuple[str, ...] = ()
    mutating_clients: tuple[str, ...] = ()
    # Identity -> the namespaces it may act in (configuration: grpc.clientNamespaces); an
    # identity not named here acts in every namespace.
    client_namespaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    # What-if calls one caller may make per minute (configuration: grpc.simulatesPerMinute).
    simulates_per_minute: int = DEFAULT_SIMULATES_PER_MINUTE
    # A reservation no call has touched for this long is released (configuration:
    # grpc.reservationTimeout); a pod waiting at Permit is under its gang's timeout instead.
    reservation_timeout: float = 60.0
    # Serve off loopback without mutual TLS: anyone who reaches the port may hold and
    # release any gang's room. Only for networks where nobody else can.
    insecure_remote: bool = False

    @property
    def mutual_tls(self) -> bool:
        return bool(self.tls_cert and self.client_ca)

    def authorizer(self) -> Authorizer:
        return Authorizer.of(self.read_only_clients, self.mutating_clients,
                             enforced=self.mutual_tls, namespaces=self.client_namespaces)

    def validate(self) -> None:
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ValueError("TLS needs both a certificate and its key (--tls-cert, --tls-key)")
        if self.client_ca and not self.tls_cert:
            raise ValueError("mutual TLS (--client-ca) needs the server's own certificate "
                             "(--tls-cert, --tls-key)")
        if not is_local(self.address) and not self.mutual_tls and not self.insecure_remote:
            raise ValueError(
                f"--address {self.address} is reachable from other machines: serving gRPC "
                "there needs mutual TLS (--tls-cert, --tls-key, --client-ca), or "
                f"{INSECURE_FLAG} to let anyone who reaches the port hold and release gangs")
        if self.mutual_tls and not (self.read_only_clients or self.mutating_clients):
            raise ValueError("mutual TLS is on but no client may call: list certificate "
                             "identities in the configuration's grpc.readOnlyClients or "
                             "grpc.mutatingClients ('*': any certificate the client CA signed)")
        if (self.read_only_clients or self.mutating_clients) and not self.mutual_tls:
            raise ValueError("grpc.readOnlyClients and grpc.mutatingClients name client "
                             "certificates: they need mutual TLS (--tls-cert, --tls-key, "
                             "--client-ca)")
        for name in (*self.read_only_clients, *self.mutating_clients, *self.client_namespaces):
            identity_forms(name)  # ValueError naming a type that never authorizes
        strangers = set(self.client_namespaces) - {*self.read_only_clients,
                                                   *self.mutating_clients}
        if strangers:
            raise ValueError(f"grpc.clientNamespaces names {', '.join(sorted(strangers))}, "
                             "not in grpc.readOnlyClients or grpc.mutatingClients")
        if self.simulates_per_minute <= 0:
            raise ValueError("simulates_per_minute must be positive")
        if self.reservation_timeout <= 0:
            raise ValueError("reservation_timeout must be positive")
        if self.max_message_bytes <= 0:
            raise ValueError("max_message_bytes must be positive")
        if not 0 < self.max_streams < self.max_workers:
            raise ValueError("max_streams must be positive and less than max_workers")


class Leadership(Protocol):
    """Whether this replica acts (holds the leader lease), and who does."""

    def leading(self) -> bool: ...

    def leader(self) -> str:
        """The identity last seen holding the lease ("" when none is known)."""


class AlwaysLeading:
    """A scheduler without leader election: the only replica acts."""

    def leading(self) -> bool:
        return True

    def leader(self) -> str:
        return ""


def not_the_leader(leadership: Leadership) -> RequestError:
    return RequestError(grpc.StatusCode.UNAVAILABLE, "request",
                        f"not the leader; the leader is {leadership.leader() or 'unknown'}: "
                        "call it (this replica answers read-only calls only; Simulate needs the "
                        "leader's claims)")


@dataclass(frozen=True)
class _Undecodable:
    """A request whose bytes are not the method's message (the handler says so)."""

    error: str


def _decoder(message_class: Any) -> Callable[[bytes], Any]:
    """grpc answers INTERNAL to a request its deserializer cannot read; this one lets the
    handler answer INVALID_ARGUMENT instead."""

    def decode(data: bytes) -> Any:
        try:
            return message_class.FromString(data)
        except DecodeError as err:
            return _Undecodable(str(err))

    return decode


def failure(method: str, err: Exception) -> tuple[grpc.StatusCode, str]:
    """The status a call that raised ``err`` ends with: the request's fault as the
    RequestError says (logged at debug), anything else INTERNAL (logged with its trace)."""
    if isinstance(err, RequestError):
        log.debug("%s: %s: %s", method, err.code.name, shown(str(err)))
        message = str(err)  # whatever a message echoes, the status stays small
        return err.code, (message if len(message) <= MAX_STATUS else
                          f"{message[:MAX_STATUS]}... (cut short)")
    log.error("%s failed", method, exc_info=err)
    return grpc.StatusCode.INTERNAL, f"{method}: internal error: {type(err).__name__}: {err}"


def _abort(context: Any, method: str, err: Exception) -> NoReturn:
    """End the call with the status ``err`` calls for (context.abort raises)."""
    context.abort(*failure(method, err))
    raise AssertionError("grpc's context.abort returned")


@dataclass(frozen=True)
class Rpc:
    """One RPC of the service as any server runs it: the servicer's method, the checks
    every call passes first, and its codecs."""

    method: Any  # its MethodDescriptor
    behavior: Callable[..., Any]
    check: Callable[[Any, Any], None]
    decode: Callable[[bytes], Any]
    encode: Callable[[Any], bytes]


def _checks(method: Any, authorizer: Authorizer,
            leadership: Leadership) -> Callable[[Any, Any], None]:
    """The caller's right to the call first, then that this replica may act (a call that
    changes state goes to the leader only), then that the request could be read."""
    name = method.name
    request_name = method.input_type.full_name
    leader_only = name in LEADER_ONLY_RPCS

    def check(request: Any, context: Any) -> None:
        authorizer.check(name, context)
        if leader_only and not leadership.leading():
            raise not_the_leader(leadership)
        if isinstance(request, _Undecodable):
            raise invalid("request", f"not a valid {request_name} message: {request.error}")

    return check


def service_rpcs(servicer: SchedulingServicer, authorizer: Authorizer,
                 leadership: Leadership) -> list[Rpc]:
    """Every RPC in the service descriptor (a method the servicer lacks fails here)."""
    return [Rpc(method, getattr(servicer, method.name),
                _checks(method, authorizer, leadership),
                _decoder(getattr(pb, method.input_type.name)),
                getattr(pb, method.output_type.name).SerializeToString)
            for method in pb.DESCRIPTOR.services_by_name["Scheduling"].methods]


def _guard(rpc: Rpc) -> Callable[..., Any]:
    """The handler grpc's thread pool runs: checks, then the servicer; every failure of one
    call becomes that call's status; the server never dies of it."""
    name, check, behavior = rpc.method.name, rpc.check, rpc.behavior
    if rpc.method.server_streaming:
        def stream(request: Any, context: Any) -> Iterator[Any]:
            try:
                check(request, context)
                yield from behavior(request, context)
            except Exception as err:
                _abort(context, name, err)
        return stream

    def unary(request: Any, context: Any) -> Any:
        try:
            check(request, context)
            return behavior(request, context)
        except Exception as err:
            _abort(context, name, err)
    return unary


def _method_handlers(servicer: SchedulingServicer, authorizer: Authorizer,
                     leadership: Leadership) -> dict[str, Any]:
    """One handler per RPC."""
    handlers = {}
    for rpc in service_rpcs(servicer, authorizer, leadership):
        make = (grpc.unary_stream_rpc_method_handler if rpc.method.server_streaming
                else grpc.unary_unary_rpc_method_handler)
        handlers[rpc.method.name] = make(_guard(rpc), request_deserializer=rpc.decode,
                                         response_serializer=rpc.encode)
    return handlers


def _credentials(settings: GrpcSettings) -> Any:
    key = Path(settings.tls_key).read_bytes()
    cert = Path(settings.tls_cert).read_bytes()
    client_ca = Path(settings.client_ca).read_bytes() if settings.client_ca else None
    return grpc.ssl_server_credentials([(key, cert)], root_certificates=client_ca,
                                       require_client_auth=client_ca is not None)


class PluginServer(grpc.Server):  # type: ignore[misc]  # grpc ships no type hints
    """A grpc.Server whose ``stop`` is graceful in the right order: health says
    NOT_SERVING first, decision streams end, in-flight calls finish within ``grace``, and
    cycles callers left open are undone once the last server of the scheduler is gone."""

    def __init__(self, server: Any, servicer: SchedulingServicer,
                 health_servicer: health.HealthServicer, synced: Callable[[], bool],
                 settings: GrpcSettings, leadership: Leadership) -> None:
        self._server = server
        self._leadership = leadership
        self._servicer = servicer
        self._health = health_servicer
        self._synced = synced
        self._settings = settings
        self._stopping = threading.Event()
        self._stopped: threading.Event | None = None
        self._stop_lock = threading.Lock()
        self._started = False
        self.port = 0
        self.address = settings.address

    # -- grpc.Server ----------------------------------------------------------------------
    def add_generic_rpc_handlers(self, generic_rpc_handlers: Iterable[Any]) -> None:
        self._server.add_generic_rpc_handlers(generic_rpc_handlers)

    def add_registered_method_handlers(self, service_name: str, handlers: Any) -> None:
        self._server.add_registered_method_handlers(service_name, handlers)

    def add_insecure_port(self, address: str) -> int:
        return int(self._server.add_insecure_port(address))

    def add_secure_port(self, address: str, server_credentials: Any) -> int:
        return int(self._server.add_secure_port(address, server_credentials))

    def start(self) -> None:
        self._servicer.attach()
        self._server.start()
        self._started = True
        threading.Thread(target=self._report_ready, name="grpc-ready", daemon=True).start()
        threading.Thread(target=self._expire_reservations, name="grpc-expiry",
                         daemon=True).start()
        log.info("gRPC plugin server listening on %s (%s)", self.address,
                 "mutual TLS" if self._settings.client_ca else
                 "TLS" if self._settings.tls_cert else "plaintext")
        if not is_local(self.address) and not self._settings.mutual_tls:
            log.warning("gRPC on %s WITHOUT mutual TLS (%s): anyone who reaches this port "
                        "can hold and release any gang's room", self.address, INSECURE_FLAG)

    def stop(self, grace: float | None) -> threading.Event:
        with self._stop_lock:
            self._stopping.set()
            self._health.enter_graceful_shutdown()  # NOT_SERVING, and it stays so
            self._servicer.close()
            done = self._server.stop(grace)
            if self._stopped is None:
                self._stopped = threading.Event()
                threading.Thread(target=self._after_stop, args=(done, self._stopped),
                                 name="grpc-stop", daemon=True).start()
            return self._stopped

    def wait_for_termination(self, timeout: float | None = None) -> bool:
        return bool(self._server.wait_for_termination(timeout))

    # -- internals ------------------------------------------------------------------------
    def _after_stop(self, done: threading.Event, stopped: threading.Event) -> None:
        done.wait()
        if self._started:
            self._servicer.detach()
        stopped.set()

    def _expire_reservations(self) -> None:
        """Release the reservations of callers that went quiet (see SchedulingServicer)."""
        interval = min(1.0, self._settings.reservation_timeout / 4)
        while not self._stopping.wait(interval):
            try:
                self._servicer.expire_reservations()
            except Exception:
                log.exception("expiring gRPC reservations failed")

    def _report_ready(self) -> None:
        """SERVING while the caches have synced (the service may still be listing) and this
        replica leads: a standby answers NOT_SERVING, so health-checking clients and
        load balancers go to the leader."""
        serving = False
        while not self._stopping.wait(self._settings.sync_poll_seconds):
            now = self._synced() and self._leadership.leading()
            if now == serving:
                continue
            serving = now
            state = health_pb2.HealthCheckResponse.SERVING if now else \
                health_pb2.HealthCheckResponse.NOT_SERVING
            with self._stop_lock:
                if self._stopping.is_set():
                    return  # shutdown said NOT_SERVING for good
                for service in ("", SERVICE_NAME):
                    self._health.set(service, state)


def _address_in_use(address: str) -> str:
    """Why ``address`` cannot be listened on ("" if it can, or if this cannot tell), found
    with a plain socket first: grpc's own failure also logs a C-level line of its own."""
    host, _, port = address.rpartition(":")
    if not port.isdigit() or int(port) == 0:
        return ""
    try:
        infos = socket.getaddrinfo(host.strip("[]") or None, int(port),
                                   type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return ""  # grpc says what is wrong with the address
    family, kind, proto, _, where = infos[0]
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as grpc does
        try:
            probe.bind(where)
        except OSError as err:
            return err.strerror or str(err)
    return ""


def server_options(settings: GrpcSettings) -> Sequence[tuple[str, int]]:
    """The channel arguments of the listening side: no port sharing, the message limits."""
    return [
        ("grpc.so_reuseport", 0),
        ("grpc.max_send_message_length", settings.max_message_bytes),
        ("grpc.max_receive_message_length", settings.max_message_bytes),
    ]


def build_server(scheduler: Scheduler, service_synced: Callable[[], bool],
                 settings: GrpcSettings | None = None,
                 leadership: Leadership | None = None) -> PluginServer:
    """A server over ``scheduler``'s own instances, listening but not started.

    Raises RuntimeError when the address cannot be bound (in use: port reuse is off).
    """
    settings = settings or GrpcSettings()
    settings.validate()
    leadership = leadership or AlwaysLeading()
    busy = _address_in_use(settings.address)
    if busy:
        raise RuntimeError(f"cannot listen on {settings.address}: {busy} (is another server "
                           "using the port?)")
    executor = futures.ThreadPoolExecutor(settings.max_workers, thread_name_prefix="grpc")
    # Calls beyond the workers wait in grpc's queue; beyond this many in all they are
    # refused (RESOURCE_EXHAUSTED) instead of piling up without bound.
    server = grpc.server(executor, options=server_options(settings),
                         maximum_concurrent_rpcs=settings.max_concurrent_rpcs)
    authorizer = settings.authorizer()
    servicer = SchedulingServicer(scheduler, settings.max_streams,
                                  reservation_timeout=settings.reservation_timeout,
                                  authorizer=authorizer,
                                  simulates_per_minute=settings.simulates_per_minute)
    handlers = _method_handlers(servicer, authorizer, leadership)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                          handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_servicer = health.HealthServicer()
    for service in ("", SERVICE_NAME):
        health_servicer.set(service, health_pb2.HealthCheckResponse.NOT_SERVING)
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    if settings.reflection:
        reflection.enable_server_reflection(
            (SERVICE_NAME, health.SERVICE_NAME, reflection.SERVICE_NAME), server)
    plugin_server = PluginServer(server, servicer, health_servicer, service_synced, settings,
                                 leadership)
    try:
        port = _listen(server, settings)
    except RuntimeError:
        executor.shutdown(wait=False)
        raise
    if settings.address.startswith(UNIX_PREFIX):
        return plugin_server
    plugin_server.port = port
    host = settings.address.rsplit(":", 1)[0]
    plugin_server.address = f"{host}:{port}"
    return plugin_server


def _listen(server: Any, settings: GrpcSettings) -> int:
    """Bind the address (a Unix socket is then made the scheduler's user's alone); the port,
    or RuntimeError saying why not."""
    try:
        if settings.tls_cert:
            port = int(server.add_secure_port(settings.address, _credentials(settings)))
        else:
            port = int(server.add_insecure_port(settings.address))
    except RuntimeError as err:
        raise RuntimeError(f"cannot listen on {settings.address}: {err} (is another server "
                           "using the port?)") from err
    if not port:
        raise RuntimeError(f"cannot listen on {settings.address} (is another server using "
                           "the port?)")
    if settings.address.startswith(UNIX_PREFIX):
        os.chmod(settings.address[len(UNIX_PREFIX):], 0o600)
    return port
