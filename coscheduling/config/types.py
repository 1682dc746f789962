"""The scheduler's configuration, after defaults and validation."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from coscheduling import DEFAULT_SCHEDULER_NAME

API_VERSION = "config.batch.scheduler.tencent.com/v1"
KIND = "SchedulerConfiguration"
PROTOBUF = "application/vnd.kubernetes.protobuf"
ACCEPT_CONTENT_TYPES = ("application/json", f"{PROTOBUF},application/json", PROTOBUF)

EXTENSION_POINTS = (
    "queueSort", "preFilter", "filter", "postFilter", "score", "reserve", "permit", "preBind",
    "bind", "postBind",
)


@dataclass(frozen=True)
class ClientConnection:
    kubeconfig: str = ""
    qps: float = 200.0
    burst: int = 400
    # What watches and lists of built-in kinds ask for, as kube-scheduler's
    # acceptContentTypes: protobuf first reads them as protobuf (cluster.protobuf), JSON
    # for the rest; JSON alone (the default: in Python, converting protobuf to the records'
    # input costs more than the C JSON decoder, README "Reading the API").
    accept_content_types: str = "application/json"

    @property
    def protobuf(self) -> bool:
        return self.accept_content_types.startswith(PROTOBUF)


@dataclass(frozen=True)
class LeaderElection:
    leader_elect: bool = False
    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    resource_namespace: str = "kube-system"
    resource_name: str = DEFAULT_SCHEDULER_NAME


@dataclass(frozen=True)
class GrpcPolicy:
    """Who may call the gRPC plugin server (client certificate identities, under mutual
    TLS), and how long a reservation made through it lives without a call about it."""

    read_only_clients: tuple[str, ...] = ()
    mutating_clients: tuple[str, ...] = ()
    reservation_timeout: float = 60.0
    # Identity -> the namespaces it may act in; an identity not named acts in every one.
    client_namespaces: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    simulates_per_minute: int = 30  # what-if calls per caller and minute


@dataclass(frozen=True)
class Plugins:
    """Plugin names per extension point, in run order; score maps names to weights."""

    queue_sort: str = "Coscheduling"
    pre_filter: tuple[str, ...] = ()
    filter: tuple[str, ...] = ()
    post_filter: tuple[str, ...] = ()
    score: Mapping[str, int] = field(default_factory=dict)
    reserve: tuple[str, ...] = ()
    permit: tuple[str, ...] = ()
    pre_bind: tuple[str, ...] = ()
    bind: tuple[str, ...] = ()
    post_bind: tuple[str, ...] = ()

    def all_names(self) -> set[str]:
        names = {self.queue_sort, *self.pre_filter, *self.filter, *self.post_filter,
                 *self.score, *self.reserve, *self.permit, *self.pre_bind, *self.bind,
                 *self.post_bind}
        return names


@dataclass(frozen=True)
class SchedulerConfig:
    scheduler_name: str = DEFAULT_SCHEDULER_NAME
    # Further names pods may ask for (schedulerNames after the first): other schedulers'
    # names, so that operators creating pods for them work unchanged.
    additional_scheduler_names: tuple[str, ...] = ()
    client_connection: ClientConnection = field(default_factory=ClientConnection)
    leader_election: LeaderElection = field(default_factory=LeaderElection)
    percentage_of_nodes_to_score: int = 0
    # Pod signatures whose per-node Filter/Score results are kept (see coscheduling.core.placement);
    # 0: every pod is filtered and scored from scratch on a sample of nodes.
    signature_cache_size: int = 64
    pod_initial_backoff_seconds: float = 1.0
    pod_max_backoff_seconds: float = 10.0
    pod_max_unschedulable_seconds: float = 300.0
    # Binds (and PreBind writes) in flight at once: each waits on the API server, so under
    # load it is latency that caps throughput (W2 at scale 0.5: gang p99 2.5x shorter at 64
    # than at 16, see bench/RESULTS.md); kube-scheduler binds every pod in a goroutine.
    binding_parallelism: int = 64
    # Where /metrics, /healthz and /readyz are served; "" turns the endpoint off.
    metrics_bind_address: str = "127.0.0.1:10251"
    plugins: Plugins = field(default_factory=Plugins)
    grpc: GrpcPolicy = field(default_factory=GrpcPolicy)
    plugin_args: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    @property
    def scheduler_names(self) -> tuple[str, ...]:
        """Every schedulerName this scheduler takes pods for; the first is its own."""
        return (self.scheduler_name, *self.additional_scheduler_names)
