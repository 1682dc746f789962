"""Reading, defaulting and validating a configuration file.

Every error says which field is wrong and why (``ConfigError.path``); unknown fields are
errors too, so a misspelt option never silently falls back to its default.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from coscheduling.api.times import parse_duration
from coscheduling.config.errors import (
    ConfigError,
    as_bool,
    as_float,
    as_int,
    as_list,
    as_mapping,
    as_str,
    reject_unknown,
)
from coscheduling.config.identities import identity_forms
from coscheduling.config.types import (
    ACCEPT_CONTENT_TYPES,
    API_VERSION,
    EXTENSION_POINTS,
    KIND,
    ClientConnection,
    GrpcPolicy,
    LeaderElection,
    Plugins,
    SchedulerConfig,
)
from coscheduling.framework.registry import Registry
from coscheduling.ops.httpendpoint import parse_address

DEFAULT_PLUGINS: dict[str, list[tuple[str, int]]] = {
    "queueSort": [("Coscheduling", 0)],
    "preFilter": [("UnsupportedFields", 0), ("Proportion", 0), ("Coscheduling", 0),
                  ("DRF", 0), ("NodeAffinity", 0),
                  ("NodePorts", 0), ("NodeResourcesFit", 0), ("VolumeRestrictions", 0),
                  ("NodeVolumeLimits", 0), ("VolumeBinding", 0), ("VolumeZone", 0),
                  ("PodTopologySpread", 0), ("InterPodAffinity", 0), ("DynamicResources", 0)],
    "filter": [("Coscheduling", 0), ("NodeUnschedulable", 0), ("NodeName", 0),
               ("TaintToleration", 0),
               ("NodeAffinity", 0), ("NodePorts", 0), ("NodeResourcesFit", 0),
               ("VolumeRestrictions", 0), ("NodeVolumeLimits", 0), ("VolumeBinding", 0),
               ("VolumeZone", 0), ("PodTopologySpread", 0), ("InterPodAffinity", 0),
               ("DynamicResources", 0)],
    "postFilter": [("Coscheduling", 0), ("DefaultPreemption", 0)],
    # kube-scheduler's default weights.
    "score": [("TaintToleration", 3), ("NodeAffinity", 2), ("NodeResourcesFit", 1),
              ("NodeResourcesBalancedAllocation", 1), ("ImageLocality", 1),
              ("InterPodAffinity", 2), ("PodTopologySpread", 2)],
    "reserve": [("Coscheduling", 0), ("VolumeBinding", 0), ("DynamicResources", 0)],
    "permit": [("Coscheduling", 0)],
    "preBind": [("VolumeBinding", 0), ("DynamicResources", 0)],
    "bind": [("DefaultBinder", 0)],
    "postBind": [],
}

_TOP_LEVEL = {
    "apiVersion", "kind", "schedulerName", "schedulerNames", "clientConnection", "leaderElection",
    "percentageOfNodesToScore", "signatureCacheSize", "podInitialBackoffSeconds",
    "podMaxBackoffSeconds", "podMaxInUnschedulablePodsSeconds", "bindingParallelism",
    "plugins", "pluginConfig", "metricsBindAddress", "grpc",
}


def load_file(path: str | Path, registry: Registry) -> SchedulerConfig:
    """Read a YAML configuration file; raises ConfigError for unreadable or invalid files."""
    try:
        text = Path(path).read_text()
    except OSError as err:
        raise ConfigError("", f"cannot read configuration file {path}: {err.strerror}") from err
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError("", f"{path} is not valid YAML: {err}") from err
    return parse_config(raw, registry)


def parse_config(raw: object, registry: Registry) -> SchedulerConfig:
    """Defaults and validation for an already-decoded configuration (None: all defaults)."""
    doc = as_mapping(raw, "(document)")
    if doc:
        reject_unknown(doc, _TOP_LEVEL, "")
        if doc.get("apiVersion") != API_VERSION:
            raise ConfigError("apiVersion", f"must be {API_VERSION}, got {doc.get('apiVersion')!r}")
        if doc.get("kind") != KIND:
            raise ConfigError("kind", f"must be {KIND}, got {doc.get('kind')!r}")
    defaults = SchedulerConfig()
    name, *others = _scheduler_names(doc, defaults.scheduler_name)
    initial = as_float(doc.get("podInitialBackoffSeconds", defaults.pod_initial_backoff_seconds),
                       "podInitialBackoffSeconds", exclusive_minimum=0)
    maximum = as_float(doc.get("podMaxBackoffSeconds", defaults.pod_max_backoff_seconds),
                       "podMaxBackoffSeconds", exclusive_minimum=0)
    if maximum < initial:
        raise ConfigError("podMaxBackoffSeconds",
                          f"must be >= podInitialBackoffSeconds ({initial:g}), got {maximum:g}")
    plugins = _plugins(doc.get("plugins"), registry)
    return SchedulerConfig(
        scheduler_name=name,
        additional_scheduler_names=tuple(others),
        client_connection=_client(doc.get("clientConnection")),
        leader_election=_leader_election(doc.get("leaderElection"), name),
        percentage_of_nodes_to_score=as_int(
            doc.get("percentageOfNodesToScore", 0), "percentageOfNodesToScore",
            minimum=0, maximum=100),
        signature_cache_size=as_int(
            doc.get("signatureCacheSize", defaults.signature_cache_size), "signatureCacheSize",
            minimum=0, maximum=100_000),
        pod_initial_backoff_seconds=initial,
        pod_max_backoff_seconds=maximum,
        pod_max_unschedulable_seconds=as_float(
            doc.get("podMaxInUnschedulablePodsSeconds", defaults.pod_max_unschedulable_seconds),
            "podMaxInUnschedulablePodsSeconds", exclusive_minimum=0),
        binding_parallelism=as_int(doc.get("bindingParallelism", defaults.binding_parallelism),
                                   "bindingParallelism", minimum=1, maximum=1024),
        metrics_bind_address=_address(doc.get("metricsBindAddress",
                                               defaults.metrics_bind_address),
                                      "metricsBindAddress"),
        plugins=plugins,
        grpc=_grpc(doc.get("grpc")),
        plugin_args=_plugin_args(doc.get("pluginConfig"), plugins, registry),
    )


def _address(value: object, path: str) -> str:
    address = as_str(value, path)
    if address:
        try:
            parse_address(address)
        except ValueError as err:
            raise ConfigError(path, f"{err} (e.g. 127.0.0.1:10251, or \"\" to turn it off)")\
                from err
    return address


def _client(raw: object) -> ClientConnection:
    section = as_mapping(raw, "clientConnection")
    reject_unknown(section, {"kubeconfig", "qps", "burst", "acceptContentTypes"},
                   "clientConnection")
    defaults = ClientConnection()
    qps = as_float(section.get("qps", defaults.qps), "clientConnection.qps", exclusive_minimum=0)
    burst = as_int(section.get("burst", defaults.burst), "clientConnection.burst", minimum=1)
    kubeconfig = as_str(section.get("kubeconfig", ""), "clientConnection.kubeconfig")
    accept = as_str(section.get("acceptContentTypes", defaults.accept_content_types),
                    "clientConnection.acceptContentTypes").replace(" ", "")
    if accept not in ACCEPT_CONTENT_TYPES:
        raise ConfigError("clientConnection.acceptContentTypes",
                          f"must be one of {', '.join(ACCEPT_CONTENT_TYPES)}, got {accept!r}")
    return ClientConnection(kubeconfig, qps, burst, accept)


def _grpc(raw: object) -> GrpcPolicy:
    section = as_mapping(raw, "grpc")
    reject_unknown(section, {"readOnlyClients", "mutatingClients", "reservationTimeout",
                             "clientNamespaces", "simulatesPerMinute"}, "grpc")
    lists = {key: _identities(section.get(key), f"grpc.{key}")
             for key in ("readOnlyClients", "mutatingClients")}
    reach = as_mapping(section.get("clientNamespaces"), "grpc.clientNamespaces")
    namespaces = {}
    for identity, spaces in reach.items():
        path = f"grpc.clientNamespaces[{identity}]"
        if identity not in (*lists["readOnlyClients"], *lists["mutatingClients"]):
            raise ConfigError(path, "not in grpc.readOnlyClients or grpc.mutatingClients")
        namespaces[identity] = tuple(as_str(ns, f"{path}[{i}]")
                                     for i, ns in enumerate(as_list(spaces, path)))
        if not namespaces[identity] or not all(n.strip() for n in namespaces[identity]):
            raise ConfigError(path, "list the namespaces it may act in (leave the identity "
                                    "out to let it act in every namespace)")
    timeout = _seconds(section.get("reservationTimeout", "60s"), "grpc.reservationTimeout")
    rate = as_int(section.get("simulatesPerMinute", GrpcPolicy().simulates_per_minute),
                  "grpc.simulatesPerMinute", minimum=1)
    return GrpcPolicy(lists["readOnlyClients"], lists["mutatingClients"], timeout, namespaces,
                      rate)


def _identities(raw: object, path: str) -> tuple[str, ...]:
    """A list of client identities, each typed or refused naming why (config/identities)."""
    names = tuple(as_str(item, f"{path}[{index}]")
                  for index, item in enumerate(as_list(raw, path)))
    for index, name in enumerate(names):
        if not name.strip():
            raise ConfigError(f"{path}[{index}]", "must be a certificate identity "
                              "(DNS:<name>, URI:<uri>, CN:<name>), or '*'")
        try:
            identity_forms(name)
        except ValueError as err:
            raise ConfigError(f"{path}[{index}]", str(err)) from None
    return names


def _seconds(value: object, path: str) -> float:
    if isinstance(value, str):
        try:
            seconds = parse_duration(value)
        except ValueError as err:
            raise ConfigError(path, str(err)) from err
    else:
        seconds = as_float(value, path)
    if seconds <= 0:
        raise ConfigError(path, f"must be longer than zero, got {value!r}")
    return seconds


def _scheduler_names(doc: Mapping[str, Any], default: str) -> list[str]:
    """``schedulerName`` (one name) or ``schedulerNames`` (several, so that pods written for
    other schedulers, e.g. ``volcano``, are scheduled here unchanged); the first is primary."""
    if "schedulerName" in doc and "schedulerNames" in doc:
        raise ConfigError("schedulerNames", "give either schedulerName or schedulerNames, "
                                            "not both")
    if "schedulerNames" in doc:
        names = as_list(doc["schedulerNames"], "schedulerNames")
        if not names:
            raise ConfigError("schedulerNames", "must list at least one name")
        path = "schedulerNames[{}]"
    else:
        names, path = [doc.get("schedulerName", default)], "schedulerName"
    checked: list[str] = []
    for index, raw in enumerate(names):
        where = path.format(index)
        name = as_str(raw, where)
        if not name or len(name) > 253:
            raise ConfigError(where, "must be a non-empty name of at most 253 characters")
        if name in checked:
            raise ConfigError(where, f"{name!r} is listed twice")
        checked.append(name)
    return checked


def _leader_election(raw: object, scheduler_name: str) -> LeaderElection:
    path = "leaderElection"
    section = as_mapping(raw, path)
    reject_unknown(section, {"leaderElect", "leaseDuration", "renewDeadline", "retryPeriod",
                             "resourceNamespace", "resourceName"}, path)
    defaults = LeaderElection()
    lease = _seconds(section.get("leaseDuration", "15s"), f"{path}.leaseDuration")
    renew = _seconds(section.get("renewDeadline", "10s"), f"{path}.renewDeadline")
    retry = _seconds(section.get("retryPeriod", "2s"), f"{path}.retryPeriod")
    if renew >= lease:
        raise ConfigError(f"{path}.renewDeadline", "must be shorter than leaseDuration")
    if retry >= renew:
        raise ConfigError(f"{path}.retryPeriod", "must be shorter than renewDeadline")
    return LeaderElection(
        leader_elect=as_bool(section.get("leaderElect", False), f"{path}.leaderElect"),
        lease_duration=lease, renew_deadline=renew, retry_period=retry,
        resource_namespace=as_str(section.get("resourceNamespace", defaults.resource_namespace),
                                  f"{path}.resourceNamespace"),
        resource_name=as_str(section.get("resourceName", scheduler_name),
                             f"{path}.resourceName"),
    )


def _plugin_entries(raw: object, path: str, registry: Registry,
                    weighted: bool) -> list[tuple[str, int]]:
    entries = []
    for index, item in enumerate(as_list(raw, path)):
        where = f"{path}[{index}]"
        entry = as_mapping(item, where)
        reject_unknown(entry, {"name", "weight"} if weighted else {"name"}, where)
        name = as_str(entry.get("name"), f"{where}.name")
        if name != "*" and name not in registry:
            raise ConfigError(f"{where}.name", f"unknown plugin {name!r} "
                              f"(known: {', '.join(registry.names())})")
        weight = 0
        if weighted:
            weight = as_int(entry.get("weight", 1), f"{where}.weight", minimum=1, maximum=100)
        entries.append((name, weight))
    return entries


def _plugins(raw: object, registry: Registry) -> Plugins:
    section = as_mapping(raw, "plugins")
    reject_unknown(section, set(EXTENSION_POINTS), "plugins")
    chosen: dict[str, list[tuple[str, int]]] = {}
    for point in EXTENSION_POINTS:
        path = f"plugins.{point}"
        point_raw = as_mapping(section.get(point), path)
        reject_unknown(point_raw, {"enabled", "disabled"}, path)
        weighted = point == "score"
        disabled = {n for n, _ in _plugin_entries(point_raw.get("disabled"), f"{path}.disabled",
                                                  registry, False)}
        enabled = _plugin_entries(point_raw.get("enabled"), f"{path}.enabled", registry,
                                  weighted)
        if "*" in {n for n, _ in enabled}:
            raise ConfigError(f"{path}.enabled", "'*' is only allowed in disabled")
        names = [(n, w) for n, w in DEFAULT_PLUGINS[point]
                 if "*" not in disabled and n not in disabled]
        overridden = {n for n, _ in enabled}
        names = [(n, w) for n, w in names if n not in overridden] + enabled
        chosen[point] = names
    queue_sort = chosen["queueSort"]
    if len(queue_sort) != 1:
        raise ConfigError("plugins.queueSort",
                          f"exactly one QueueSort plugin must be enabled, got {len(queue_sort)}")
    if not chosen["bind"]:
        raise ConfigError("plugins.bind", "at least one Bind plugin must be enabled")
    gang_points = {p for p in ("preFilter", "filter")
                   if any(n == "Coscheduling" for n, _ in chosen[p])}
    if gang_points == {"preFilter"}:
        raise ConfigError("plugins.filter", "Coscheduling must be enabled at filter while it is "
                          "enabled at preFilter: its Filter keeps a gang inside the topology "
                          "domain it was admitted into")
    return Plugins(
        queue_sort=queue_sort[0][0],
        pre_filter=tuple(n for n, _ in chosen["preFilter"]),
        filter=tuple(n for n, _ in chosen["filter"]),
        post_filter=tuple(n for n, _ in chosen["postFilter"]),
        score={n: w for n, w in chosen["score"]},
        reserve=tuple(n for n, _ in chosen["reserve"]),
        permit=tuple(n for n, _ in chosen["permit"]),
        pre_bind=tuple(n for n, _ in chosen["preBind"]),
        bind=tuple(n for n, _ in chosen["bind"]),
        post_bind=tuple(n for n, _ in chosen["postBind"]),
    )


def _plugin_args(raw: object, plugins: Plugins,
                 registry: Registry) -> dict[str, Mapping[str, Any]]:
    given: dict[str, Mapping[str, Any]] = {}
    for index, item in enumerate(as_list(raw, "pluginConfig")):
        where = f"pluginConfig[{index}]"
        entry = as_mapping(item, where)
        reject_unknown(entry, {"name", "args"}, where)
        name = as_str(entry.get("name"), f"{where}.name")
        if name not in registry:
            raise ConfigError(f"{where}.name", f"unknown plugin {name!r}")
        if name in given:
            raise ConfigError(f"{where}.name", f"args for {name} given twice")
        given[name] = as_mapping(entry.get("args"), f"{where}.args")
    out: dict[str, Mapping[str, Any]] = {}
    for name in sorted(plugins.all_names() | set(given)):
        index = list(given).index(name) if name in given else -1
        path = f"pluginConfig[{index}].args" if index >= 0 else f"(defaults of {name})"
        out[name] = registry.validate_args(name, given.get(name, {}), path)
    return out


def dump_defaults() -> dict[str, Any]:
    """The default configuration as a document, for ``coscheduling config defaults``."""
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "schedulerName": SchedulerConfig().scheduler_name,
        "clientConnection": {"kubeconfig": "", "qps": 200, "burst": 400,
                             "acceptContentTypes": ClientConnection().accept_content_types},
        "percentageOfNodesToScore": 0,
        "signatureCacheSize": SchedulerConfig().signature_cache_size,
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 10,
        "bindingParallelism": SchedulerConfig().binding_parallelism,
        "metricsBindAddress": "127.0.0.1:10251",
        "leaderElection": {"leaderElect": False, "leaseDuration": "15s",
                           "renewDeadline": "10s", "retryPeriod": "2s",
                           "resourceNamespace": "kube-system"},
        "grpc": {"readOnlyClients": [], "mutatingClients": [], "reservationTimeout": "60s",
                 "clientNamespaces": {}, "simulatesPerMinute": GrpcPolicy().simulates_per_minute},
        "plugins": {point: {"enabled": [{"name": n, **({"weight": w} if point == "score" else {})}
                                        for n, w in DEFAULT_PLUGINS[point]]}
                    for point in EXTENSION_POINTS},
    }
