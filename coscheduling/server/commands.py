"""`coscheduling serve` (the plugin server with its watches, no scheduling loop) and
`coscheduling call RPC ...` (a small client that prints the answer as JSON)."""

from __future__ import annotations

import argparse
import faulthandler
import json
import logging
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
from google.protobuf.json_format import MessageToDict
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.server import (
    DEFAULT_ADDRESS,
    DEFAULT_MAX_MESSAGE_BYTES,
    INSECURE_FLAG,
    GrpcSettings,
    PluginServer,
    build_server,
)
from coscheduling.server.servicer import SUBSCRIBED_METADATA

if TYPE_CHECKING:
    from coscheduling.cluster.leaderelection import LeaderElector
    from coscheduling.config.types import GrpcPolicy, SchedulerConfig
    from coscheduling.service.wiring import SchedulerService

log = logging.getLogger(__name__)

# What `call` accepts (any case, dashes ignored) -> the RPC.
RPC_NAMES = {
    "less": "Less", "prefilter": "PreFilter", "filter": "Filter", "score": "Score",
    "reserve": "Reserve", "unreserve": "Unreserve", "permit": "Permit",
    "postbind": "PostBind", "watch": "WatchDecisions", "watchdecisions": "WatchDecisions",
    "podgroup": "GetPodGroup", "getpodgroup": "GetPodGroup", "health": "Health",
    "simulate": "Simulate", "whatif": "Simulate", "schedule": "Schedule",
}


class _Elected:
    """The Leadership of a replica that elects a leader: it acts while it holds the lease."""

    def __init__(self, elector: LeaderElector) -> None:
        self._elector = elector

    def leading(self) -> bool:
        return self._elector.holds_lease()

    def leader(self) -> str:
        return self._elector.holder()


def start_grpc_for(service: SchedulerService, settings: GrpcSettings) -> PluginServer:
    """Start the plugin server on a service's scheduler (health says SERVING once the
    service's caches have synced, and only on the leader when replicas elect one, so it may
    be started before ``service.start``)."""
    elector = service.elector
    server = build_server(service.scheduler, lambda: service.synced, settings,
                          _Elected(elector) if elector is not None else None)
    server.start()
    return server


def add_parser(sub: Any) -> None:
    """Register `serve` and `call` on the top-level CLI."""
    serve = sub.add_parser("serve", help="serve the scheduling extension points over gRPC, "
                                         "without a scheduling loop (the caller binds)")
    serve.add_argument("--kubeconfig", help="kubeconfig file (default: the config file's, "
                                            "else $KUBECONFIG, ~/.kube/config, then the "
                                            "in-cluster service account)")
    serve.add_argument("--config", help="SchedulerConfiguration YAML file (default: built-in)")
    add_server_flags(serve)
    serve.add_argument("--grace", type=float, default=10.0,
                       help="seconds in-flight calls get to finish at shutdown (default 10)")
    serve.add_argument("-v", type=int, default=0, help="log verbosity (0 info, 1+ debug)")
    serve.add_argument("--log-format", choices=("text", "json"), default="text")
    serve.set_defaults(func=_serve)

    call = sub.add_parser("call", help="call the gRPC plugin server and print the answer",
                          description="RPC is one of: " + ", ".join(sorted(set(
                              RPC_NAMES.values()))) + " (any case; also watch, podgroup)")
    call.add_argument("rpc", type=_rpc_name, metavar="RPC")
    call.add_argument("--address", default=DEFAULT_ADDRESS,
                      help=f"server address (default {DEFAULT_ADDRESS})")
    call.add_argument("--ca", help="CA certificate (PEM) that signed the server's: use TLS")
    call.add_argument("--cert", help="client certificate (PEM), for mutual TLS")
    call.add_argument("--key", help="client key (PEM), for mutual TLS")
    call.add_argument("--pod", dest="pods", action="append", type=_pod_key, default=[],
                      metavar="NS/NAME", help="a pod in the server's watch cache (Less: twice)")
    call.add_argument("--pod-file", dest="pods", action="append", type=_pod_file,
                      metavar="FILE", help="a Pod object as JSON ('-': standard input)")
    call.add_argument("--node", default="", help="Reserve, Unreserve, Permit, PostBind")
    call.add_argument("--nodes", default="", help="Filter, Score: comma-separated node "
                                                  "names (default: all)")
    call.add_argument("--group", default="", metavar="NS/NAME",
                      help="GetPodGroup; WatchDecisions: only this group's decisions")
    call.add_argument("--manifest", metavar="FILE", help="Simulate: the objects (YAML or "
                      "JSON; '-': standard input)")
    call.add_argument("--namespace", default="", help="Simulate: for objects naming none")
    call.add_argument("--count", type=int, default=0,
                      help="WatchDecisions: stop after this many (default: until stopped)")
    call.add_argument("--timeout", type=float, default=None,
                      help="seconds to wait for the answer (WatchDecisions: to watch)")
    call.set_defaults(func=_call)


def add_server_flags(parser: argparse.ArgumentParser) -> None:
    """The server's flags, for `serve` (and for `run`, should it start the server too)."""
    parser.add_argument("--address", default=DEFAULT_ADDRESS,
                        help=f"host:port to listen on (default {DEFAULT_ADDRESS}: "
                             "this machine only; any other address needs mutual TLS)")
    parser.add_argument("--tls-cert", default="", help="server certificate (PEM): serve TLS")
    parser.add_argument("--tls-key", default="", help="the server certificate's key (PEM)")
    parser.add_argument("--client-ca", default="",
                        help="CA (PEM) that signs client certificates: require mutual TLS")
    parser.add_argument("--reflection", action="store_true",
                        help="serve gRPC reflection (off by default)")
    parser.add_argument("--max-message-bytes", type=int, default=DEFAULT_MAX_MESSAGE_BYTES,
                        help="largest message received or sent (default 16 MiB)")
    parser.add_argument(INSECURE_FLAG, dest="insecure_remote", action="store_true",
                        help="DANGEROUS: serve a non-loopback --address without mutual TLS, "
                             "so anyone who reaches the port can hold and release any gang")


def settings_from(args: argparse.Namespace, policy: GrpcPolicy) -> GrpcSettings:
    """The server's settings: the flags, and the configuration's ``grpc`` section."""
    settings = GrpcSettings(address=args.address, max_message_bytes=args.max_message_bytes,
                            tls_cert=args.tls_cert, tls_key=args.tls_key,
                            client_ca=args.client_ca, reflection=args.reflection,
                            read_only_clients=policy.read_only_clients,
                            mutating_clients=policy.mutating_clients,
                            client_namespaces=policy.client_namespaces,
                            simulates_per_minute=policy.simulates_per_minute,
                            reservation_timeout=policy.reservation_timeout,
                            insecure_remote=args.insecure_remote)
    settings.validate()
    return settings


# -- run and serve ------------------------------------------------------------------------
def run_service(args: argparse.Namespace, *, command: str, loop: bool) -> int:
    """``coscheduling run`` (``loop``: the scheduling loop binds; gRPC beside it unless
    --no-grpc) and ``coscheduling serve`` (no loop: gRPC callers bind) are one procedure:
    configure, start, wait for a signal (or a lost lease), stop."""
    from coscheduling.ops import logs
    from coscheduling.ops.faults import FaultError
    from coscheduling.ops.httpendpoint import ListenError
    from coscheduling.service.process import limit_malloc_arenas, load_config
    from coscheduling.service.startup import StartupClock
    from coscheduling.service.wiring import SchedulerService

    startup = StartupClock()
    limit_malloc_arenas()
    logs.setup(args.v, args.log_format)
    config = load_config(args.config)
    startup.mark("configuration")
    try:
        settings = None if getattr(args, "no_grpc", False) else settings_from(args, config.grpc)
        service = SchedulerService(config, kubeconfig=_kubeconfig(args, config),
                                   startup=startup)
        startup.mark("wiring")
    except (ValueError, ListenError, FaultError) as err:
        print(f"coscheduling {command}: {err}", file=sys.stderr)
        return 2
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())
    signal.signal(signal.SIGINT, lambda signum, frame: stop.set())
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # kill -USR1: dump every stack
    try:
        server = start_grpc_for(service, settings) if settings is not None else None
        startup.mark("gRPC server")
    except (OSError, RuntimeError) as err:
        hint = " (choose another --address, or --no-grpc)" if loop else ""
        print(f"coscheduling {command}: cannot serve gRPC: {err}{hint}", file=sys.stderr)
        service.stop()
        return 2
    code = 1
    if service.start(sync_timeout=None, schedule=loop, stop=stop):
        _announce(service, server, loop)
        code = _wait(service, stop, loop)
    elif stop.is_set():  # told to stop before the caches synced: not a failure
        print(f"coscheduling {command}: stopped before the caches synced", file=sys.stderr)
        code = 0
    if server is not None:
        server.stop(getattr(args, "grace", 5.0)).wait()  # in-flight calls finish first
    service.stop()
    return code


def _kubeconfig(args: argparse.Namespace, config: SchedulerConfig) -> str:
    """--kubeconfig, else the configuration's clientConnection.kubeconfig, else kubectl's
    order ($KUBECONFIG, ~/.kube/config), else "" (the in-cluster service account)."""
    from coscheduling.cluster.kubeconfig import kubectl_kubeconfig

    if args.kubeconfig or config.client_connection.kubeconfig:
        return str(args.kubeconfig or "")
    return kubectl_kubeconfig("")


def _announce(service: SchedulerService, server: PluginServer | None, loop: bool) -> None:
    if not loop:
        assert server is not None
        print(f"coscheduling: serving gRPC on {server.address} for schedulerName="
              f"{service.config.scheduler_name} (no scheduling loop: callers bind)",
              file=sys.stderr, flush=True)
        return
    if server is not None:
        print(f"coscheduling: gRPC plugin server on {server.address}", file=sys.stderr,
              flush=True)
    names = " or ".join(service.config.scheduler_names)
    print(f"coscheduling: scheduling pods with schedulerName {names}"
          + (" once it holds the leader lease" if service.elector else ""),
          file=sys.stderr, flush=True)


def _wait(service: SchedulerService, stop: threading.Event, loop: bool) -> int:
    """Until a signal (0), or until the lease is lost (1: a restart rejoins as a follower).
    Without the loop, its housekeeping (gang deadlines, thawing, metrics) runs here."""
    while not stop.wait(0.5 if loop else 1.0):
        if service.lost_leadership.is_set():
            print("coscheduling: lost the leader lease; exiting so a restart rejoins as a "
                  "follower", file=sys.stderr, flush=True)
            return 1
        if not loop:
            try:
                service.scheduler.housekeeping()
            except Exception:
                log.exception("housekeeping failed")
    return 0


def _serve(args: argparse.Namespace) -> int:
    return run_service(args, command="serve", loop=False)


# -- call -------------------------------------------------------------------------------
def _rpc_name(value: str) -> str:
    name = RPC_NAMES.get(value.replace("-", "").lower())
    if name is None:
        raise argparse.ArgumentTypeError(
            f"unknown RPC {value!r}; one of {', '.join(sorted(set(RPC_NAMES.values())))}")
    return name


def _object_key(value: str) -> pb.ObjectKey:
    namespace, sep, name = value.partition("/")
    if not sep or not namespace or not name or "/" in name:
        raise argparse.ArgumentTypeError(f"{value!r}: give NAMESPACE/NAME")
    return pb.ObjectKey(namespace=namespace, name=name)


def _pod_key(value: str) -> pb.PodRef:
    return pb.PodRef(key=_object_key(value))


def _pod_file(value: str) -> pb.PodRef:
    try:
        data = sys.stdin.buffer.read() if value == "-" else Path(value).read_bytes()
    except OSError as err:
        raise argparse.ArgumentTypeError(f"{value}: {err.strerror}") from None
    return pb.PodRef(pod_json=data)


class UsageError(Exception):
    pass


def _one_pod(args: argparse.Namespace) -> pb.PodRef:
    if len(args.pods) != 1:
        raise UsageError(f"{args.rpc} needs one pod: --pod NS/NAME or --pod-file FILE")
    pod: pb.PodRef = args.pods[0]
    return pod


def _node(args: argparse.Namespace) -> str:
    if not args.node:
        raise UsageError(f"{args.rpc} needs --node NAME")
    node: str = args.node
    return node


def _nodes(args: argparse.Namespace) -> list[str]:
    return [n.strip() for n in args.nodes.split(",") if n.strip()]


def _group(args: argparse.Namespace, required: bool) -> pb.ObjectKey | None:
    if not args.group:
        if required:
            raise UsageError(f"{args.rpc} needs --group NS/NAME")
        return None
    try:
        return _object_key(args.group)
    except argparse.ArgumentTypeError as err:
        raise UsageError(f"--group: {err}") from None


def _less(args: argparse.Namespace) -> pb.LessRequest:
    if len(args.pods) != 2:
        raise UsageError("Less needs two pods (--pod or --pod-file, twice)")
    return pb.LessRequest(a=args.pods[0], b=args.pods[1])


def _watch(args: argparse.Namespace) -> pb.WatchDecisionsRequest:
    group = _group(args, required=False)
    return pb.WatchDecisionsRequest(group=group) if group else pb.WatchDecisionsRequest()


def _pod_node(request_class: Any) -> Callable[[argparse.Namespace], Any]:
    return lambda args: request_class(pod=_one_pod(args), node_name=_node(args))


REQUESTS: dict[str, Callable[[argparse.Namespace], Any]] = {
    "Less": _less,
    "PreFilter": lambda a: pb.PreFilterRequest(pod=_one_pod(a)),
    "Filter": lambda a: pb.FilterRequest(pod=_one_pod(a), node_names=_nodes(a)),
    "Score": lambda a: pb.ScoreRequest(pod=_one_pod(a), node_names=_nodes(a)),
    "Reserve": _pod_node(pb.ReserveRequest),
    "Unreserve": _pod_node(pb.UnreserveRequest),
    "Permit": _pod_node(pb.PermitRequest),
    "PostBind": _pod_node(pb.PostBindRequest),
    "Schedule": lambda a: pb.ScheduleRequest(pod=_one_pod(a)),
    "WatchDecisions": _watch,
    "GetPodGroup": lambda a: pb.GetPodGroupRequest(group=_group(a, required=True)),
    "Simulate": lambda a: pb.SimulateRequest(manifest=_manifest(a), namespace=a.namespace),
}


def _manifest(args: argparse.Namespace) -> bytes:
    if not args.manifest:
        raise UsageError("Simulate needs --manifest FILE")
    if args.manifest == "-":
        return sys.stdin.buffer.read()
    return Path(args.manifest).read_bytes()


def _read(path: str | None) -> bytes | None:
    return Path(path).read_bytes() if path else None


def channel_for(address: str, ca: str | None = None, cert: str | None = None,
                key: str | None = None) -> grpc.Channel:
    """A channel to the plugin server: TLS when a CA or a client certificate is given."""
    options = [("grpc.max_receive_message_length", DEFAULT_MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", DEFAULT_MAX_MESSAGE_BYTES)]
    if bool(cert) != bool(key):
        raise UsageError("mutual TLS needs both --cert and --key")
    if not (ca or cert):
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=_read(ca),
                                               private_key=_read(key),
                                               certificate_chain=_read(cert))
    return grpc.secure_channel(address, credentials, options=options)


def _json(message: Any) -> dict[str, Any]:
    result: dict[str, Any] = MessageToDict(message, preserving_proto_field_name=True,
                                           always_print_fields_with_no_presence=True)
    return result


def _call(args: argparse.Namespace) -> int:
    try:
        request = None if args.rpc == "Health" else REQUESTS[args.rpc](args)
        channel = channel_for(args.address, args.ca, args.cert, args.key)
    except (UsageError, OSError) as err:
        print(f"coscheduling call: {err}", file=sys.stderr)
        return 2
    with channel:
        try:
            if args.rpc == "Health":
                health = health_pb2_grpc.HealthStub(channel)
                answer = health.Check(health_pb2.HealthCheckRequest(), timeout=args.timeout)
                print(json.dumps(_json(answer), indent=2))
            elif args.rpc == "WatchDecisions":
                _print_decisions(rpc(channel, args.rpc), request, args)
            else:
                answer = rpc(channel, args.rpc)(request, timeout=args.timeout)
                print(json.dumps(_json(answer), indent=2))
        except grpc.RpcError as err:
            if args.rpc == "WatchDecisions" and err.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
                return 0  # --timeout: watched for as long as asked
            print(f"coscheduling call: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            return 130
    return 0


def rpc(channel: grpc.Channel, name: str) -> Any:
    """A callable for one RPC of the Scheduling service, from its descriptor."""
    method = pb.DESCRIPTOR.services_by_name["Scheduling"].methods_by_name[name]
    make = channel.unary_stream if method.server_streaming else channel.unary_unary
    return make(f"/{method.containing_service.full_name}/{name}",
                request_serializer=lambda request: request.SerializeToString(),
                response_deserializer=getattr(pb, method.output_type.name).FromString)


def _print_decisions(watch: Any, request: Any, args: argparse.Namespace) -> None:
    """One JSON object per line, as decisions come."""
    stream: Iterator[Any] = watch(request, timeout=args.timeout)
    metadata = stream.initial_metadata() or ()  # type: ignore[attr-defined]
    if SUBSCRIBED_METADATA in [tuple(m) for m in metadata]:  # the server subscribed us
        print("coscheduling call: watching decisions", file=sys.stderr, flush=True)
    for seen, decision in enumerate(stream, start=1):
        print(json.dumps(_json(decision)), flush=True)
        if args.count and seen >= args.count:
            stream.cancel()  # type: ignore[attr-defined]
            return
