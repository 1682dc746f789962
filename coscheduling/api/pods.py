"""Pod records: the fields scheduling needs, parsed once from the watch's raw JSON."""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.membership import NO_GROUP, Membership, membership
from coscheduling.api.podaffinity import (
    PodAffinity,
    SpreadConstraint,
    parse_pod_affinity,
    parse_spread_constraints,
)
from coscheduling.api.quantity import (
    CPU,
    MEMORY,
    QuantityError,
    parse_resource_list,
    to_units,
)
from coscheduling.api.runtimes import bounded_runtime, declared_runtime
from coscheduling.api.selectors import (
    NodeSelectorTerm,
    Toleration,
    parse_affinity_terms,
    parse_preferred_terms,
)
from coscheduling.api.times import parse_rfc3339

# Requests assumed for scoring when a container asks for nothing, as kube-scheduler does,
# so that best-effort pods still spread instead of all landing on one node.
DEFAULT_MILLI_CPU = 100
DEFAULT_MEMORY = 200 * 1024 * 1024

TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})

# Volume sources that decide where a pod may run in kube-scheduler (claims to bind, zones,
# conflicts between pods on one node, attach limits): see ``Pod.placement_volumes``.
PLACEMENT_VOLUME_SOURCES = (
    "persistentVolumeClaim", "ephemeral", "awsElasticBlockStore", "azureDisk", "azureFile",
    "cinder", "gcePersistentDisk", "iscsi", "portworxVolume", "rbd", "vsphereVolume",
)
# Spec fields that change where or how a pod is placed and that nothing here reads: the
# v1.35 Workload API's pod field (gone since v1.36; spec.schedulingGroup is read, see
# coscheduling.groups).
PLACEMENT_FIELDS = ("workloadRef",)


@dataclass(slots=True, eq=False)
class Pod:
    """A pod as the scheduler sees it. ``key`` is ``namespace/name``."""

    namespace: str
    name: str
    uid: str
    resource_version: str = ""
    scheduler_name: str = "default-scheduler"
    node_name: str = ""
    phase: str = "Pending"
    deleting: bool = False
    priority: int = 0
    # "Never": the pod waits for room instead of evicting lower-priority pods.
    preemption_policy: str = "PreemptLowerPriority"
    created: float = 0.0
    labels: dict[str, str] = field(default_factory=dict)
    requests: dict[str, int] = field(default_factory=dict)
    # cpu (milli) and memory with the scoring defaults applied per container.
    nonzero_cpu: int = DEFAULT_MILLI_CPU
    nonzero_memory: int = DEFAULT_MEMORY
    node_selector: dict[str, str] = field(default_factory=dict)
    affinity_terms: tuple[NodeSelectorTerm, ...] = ()
    tolerations: tuple[Toleration, ...] = ()
    spec_node_name: str = ""
    # The controlling owner as "Kind/name/uid" ("" for a bare pod), and its apiVersion
    # (a derived group's walk tells a batch/v1 Job from another API's Job by it).
    owner: str = ""
    owner_api_version: str = ""
    gated: bool = False
    host_ports: tuple[tuple[str, str, int], ...] = ()
    # (weight, term) of preferred node affinity.
    preferred_terms: tuple[tuple[int, NodeSelectorTerm], ...] = ()
    # Images of init containers, containers and image volumes, named as nodes report them.
    images: tuple[str, ...] = ()
    # (index in spec.volumes, source field, claim name or "") for PLACEMENT_VOLUME_SOURCES.
    placement_volumes: tuple[tuple[int, str, str], ...] = ()
    # Names of spec.resourceClaims (dynamic resource allocation).
    resource_claims: tuple[str, ...] = ()
    # spec.resourceClaims as (name, resourceClaimName, resourceClaimTemplateName), and
    # status.resourceClaimStatuses as (name, the claim made from the template or "").
    claim_sources: tuple[tuple[str, str, str], ...] = ()
    claim_statuses: tuple[tuple[str, str], ...] = ()
    # A claim from a template is not made yet (the resource-claim controller makes it): the
    # pod is held back like a gated one until its status names the claim.
    awaiting_claims: bool = False
    # The PLACEMENT_FIELDS the spec sets, as "spec.<field>".
    placement_fields: tuple[str, ...] = ()
    # Pod (anti-)affinity (None without any term) and topology spread constraints.
    pod_affinity: PodAffinity | None = None
    spread_constraints: tuple[SpreadConstraint, ...] = ()
    parse_error: str = ""
    # How long the pod will run at most (api.runtimes: activeDeadlineSeconds or the declared
    # expected runtime; None: unknown), why a declared runtime was unreadable, and when the
    # pod started (status.startTime; 0: not seen).
    runtime: float | None = None
    runtime_error: str = ""
    started: float = 0.0
    # Which gang the pod belongs to, from whichever producer's marker it carries.
    membership: Membership = NO_GROUP

    # ``namespace/name``, computed once: it is read on every hot path.
    key: str = field(init=False, default="", repr=False)

    def __post_init__(self) -> None:
        self.key = f"{self.namespace}/{self.name}"

    @property
    def group_key(self) -> str:
        """The gang this pod belongs to (coscheduling.groups), or ``""``."""
        return self.membership.key

    @property
    def gang_owner(self) -> str:
        """The controller that owns the pod as its gang sees it (a derived group's workload,
        else the pod's controller): one owner's pods may not join another's group."""
        return self.membership.owner or self.owner

    @property
    def terminal(self) -> bool:
        return self.phase in TERMINAL_PHASES

    @property
    def assigned(self) -> bool:
        return bool(self.node_name)


def _container_requests(container: dict[str, Any]) -> dict[str, int]:
    resources = container.get("resources") or {}
    return parse_resource_list(resources.get("requests"))


def _max_into(total: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        if amount > total.get(name, 0):
            total[name] = amount


def _sum_into(total: dict[str, int], other: dict[str, int]) -> None:
    for name, amount in other.items():
        total[name] = total.get(name, 0) + amount


def effective_requests(spec: dict[str, Any]) -> dict[str, int]:
    """What a pod reserves on its node: containers, init containers, sidecars and overhead.

    App containers and restartable init containers (sidecars) run together, so they add up;
    each ordinary init container runs alone beside the sidecars started before it, so the pod
    needs the largest of those moments; pod-level requests replace that for the resources
    they name; the RuntimeClass overhead comes on top.
    """
    running = _containers_total(spec)
    if spec.get("resources"):
        running.update(pod_level_requests(spec, running))
    _sum_into(running, parse_resource_list(spec.get("overhead")))
    return {name: amount for name, amount in running.items() if amount}


def _containers_total(spec: dict[str, Any]) -> dict[str, int]:
    running: dict[str, int] = {}
    for container in spec.get("containers") or ():
        _sum_into(running, _container_requests(container))
    sidecars: dict[str, int] = {}
    init_peak: dict[str, int] = {}
    for container in spec.get("initContainers") or ():
        requests = _container_requests(container)
        if container.get("restartPolicy") == "Always":
            _sum_into(sidecars, requests)
            moment = dict(sidecars)
        else:
            moment = dict(sidecars)
            _sum_into(moment, requests)
        _max_into(init_peak, moment)
    _sum_into(running, sidecars)
    _max_into(running, init_peak)
    return running


def _pod_level(name: str) -> bool:
    return name in (CPU, MEMORY) or name.startswith("hugepages-")


def pod_level_requests(spec: dict[str, Any], containers: dict[str, int]) -> dict[str, int]:
    """``spec.resources`` (pod-level resources): its requests of cpu, memory and hugepages
    replace what the containers add up to. A resource with only a pod-level limit requests
    that limit when no container requests it, as the API server's defaulting fills in
    (``containers``: the containers' requests, for pods that were not defaulted)."""
    resources = _mapping(spec.get("resources"))
    if not resources:
        return {}
    requests = parse_resource_list(resources.get("requests"))
    for name, limit in parse_resource_list(resources.get("limits")).items():
        if name not in requests and not containers.get(name):
            requests[name] = limit
    return {name: amount for name, amount in requests.items() if _pod_level(name)}


def _nonzero(spec: dict[str, Any], resource: str, default: int, pod_level: dict[str, int]
             ) -> int:
    if resource in pod_level:
        return pod_level[resource]
    total = 0
    for container in spec.get("containers") or ():
        amount = _container_requests(container).get(resource, 0)
        total += amount if amount else default
    return total


def _host_ports(spec: dict[str, Any]) -> tuple[tuple[str, str, int], ...]:
    """Host ports of the containers and of the sidecars (restartable init containers), which
    hold theirs as long as the pod runs; kube-scheduler checks both. On the host network a
    container port is a host port (the API server fills hostPort in; pods handed over gRPC
    may come without that default)."""
    ports = []
    host_network = bool(spec.get("hostNetwork"))
    sidecars = [c for c in spec.get("initContainers") or () if c.get("restartPolicy") == "Always"]
    for container in [*(spec.get("containers") or ()), *sidecars]:
        for port in container.get("ports") or ():
            host_port = port.get("hostPort") or (port.get("containerPort") if host_network
                                                 else 0)
            if host_port:
                ports.append((port.get("hostIP") or "0.0.0.0", port.get("protocol") or "TCP",
                              int(host_port)))
    return tuple(ports)


def normalized_image(name: str) -> str:
    """An image as nodes list it: kube-scheduler adds ``:latest`` when no tag is given."""
    return name + ":latest" if name.rfind(":") <= name.rfind("/") else name


@functools.lru_cache(maxsize=4096)
def _image_name(name: str) -> str:
    # Interned: the pods of one template share the string.
    return sys.intern(normalized_image(name))


def _images(spec: dict[str, Any]) -> tuple[str, ...]:
    names = [c.get("image") for c in spec.get("initContainers") or ()]
    names += [c.get("image") for c in spec.get("containers") or ()]
    volumes = spec.get("volumes")
    if volumes:
        names += [_mapping(v.get("image")).get("reference") for v in volumes]
    return tuple([_image_name(str(n)) for n in names if n])


def _placement_volumes(pod_name: str, spec: dict[str, Any]) -> tuple[tuple[int, str, str], ...]:
    found = []
    for index, volume in enumerate(spec.get("volumes") or ()):
        for source in PLACEMENT_VOLUME_SOURCES:
            if volume.get(source) is None:
                continue
            claim = ""
            if source == "persistentVolumeClaim":
                claim = str(volume[source].get("claimName") or "")
            elif source == "ephemeral":  # the claim the ephemeral controller creates
                claim = f"{pod_name}-{volume.get('name', '')}"
            found.append((index, source, claim))
    return tuple(found)


def _controller(meta: dict[str, Any]) -> str:
    for ref in meta.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref.get('kind', '')}/{ref.get('name', '')}/{ref.get('uid', '')}"
    return ""


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


Json = dict[str, Any]


def _read_metadata(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.deleting = bool(meta.get("deletionTimestamp"))
    pod.created = parse_rfc3339(meta.get("creationTimestamp"))


def _read_labels(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.labels = {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()}


def _read_owner(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.owner = _controller(meta)
    pod.owner_api_version = next((str(ref.get("apiVersion") or "")
                                  for ref in meta.get("ownerReferences") or ()
                                  if ref.get("controller")), "")


def _read_phase(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.phase = str(status.get("phase") or "Pending")


def _read_scheduler_name(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.scheduler_name = str(spec.get("schedulerName") or "default-scheduler")


def _read_node_name(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.node_name = pod.spec_node_name = str(spec.get("nodeName") or "")


def _read_priority(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    priority = spec.get("priority") or 0
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"must be an integer, got {priority!r}")
    pod.priority = priority


def _read_preemption_policy(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    policy = spec.get("preemptionPolicy") or "PreemptLowerPriority"
    if policy not in ("PreemptLowerPriority", "Never"):
        raise ValueError(f"must be PreemptLowerPriority or Never, got {policy!r}")
    pod.preemption_policy = str(policy)


def _read_node_selector(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.node_selector = {str(k): str(v) for k, v in _mapping(spec.get("nodeSelector")).items()}


def _read_tolerations(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.tolerations = tuple(Toleration.parse(t) for t in spec.get("tolerations") or ())


def _read_gates(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.gated = bool(spec.get("schedulingGates"))


def _read_ports(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.host_ports = _host_ports(spec)


class FieldError(ValueError):
    """A malformed part of a pod whose exact path is known (``path``)."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path


def _resource_lists(spec: Json) -> Iterator[tuple[str, object]]:
    """Every ResourceList of a pod spec that adds to what it asks of a node, by path."""
    yield "spec.overhead", spec.get("overhead")
    pod_level = _mapping(spec.get("resources"))
    yield "spec.resources.requests", pod_level.get("requests")
    yield "spec.resources.limits", pod_level.get("limits")
    for kind in ("containers", "initContainers"):
        for index, container in enumerate(spec.get(kind) or ()):
            resources = _mapping(_mapping(container).get("resources"))
            yield f"spec.{kind}[{index}].resources.requests", resources.get("requests")
            yield f"spec.{kind}[{index}].resources.limits", resources.get("limits")


def _check_amounts(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    """Requests, limits and overheads are quantities of at least 0. The API server refuses
    others for new pods, but a pod sent over gRPC (or an object stored before that check)
    could carry one: a negative request would make room on a node out of nothing."""
    for where, raw in _resource_lists(spec):
        for name, value in _mapping(raw).items():
            try:
                to_units(str(name), value)
            except QuantityError as err:
                raise FieldError(f"{where}.{name}", str(err)) from None


def _read_requests(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.requests = effective_requests(spec)
    pod_level = (pod_level_requests(spec, _containers_total(spec))
                 if spec.get("resources") else {})
    pod.nonzero_cpu = _nonzero(spec, CPU, DEFAULT_MILLI_CPU, pod_level)
    pod.nonzero_memory = _nonzero(spec, MEMORY, DEFAULT_MEMORY, pod_level)


def _read_affinity(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    affinity = spec.get("affinity")
    pod.affinity_terms = parse_affinity_terms(affinity)
    pod.preferred_terms = parse_preferred_terms(affinity)
    pod.pod_affinity = parse_pod_affinity(affinity, pod.namespace, pod.labels)


def _read_spread(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.spread_constraints = parse_spread_constraints(
        spec.get("topologySpreadConstraints"), pod.labels)


def _read_images(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.images = _images(spec)


def _read_volumes(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    pod.placement_volumes = _placement_volumes(pod.name, spec)


def _read_claims_and_fields(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    claims = spec.get("resourceClaims")
    if claims:
        sources = [_mapping(c) for c in claims]
        pod.resource_claims = tuple([str(c.get("name") or "") for c in sources])
        pod.claim_sources = tuple(
            (str(c.get("name") or ""), str(c.get("resourceClaimName") or ""),
             str(c.get("resourceClaimTemplateName") or "")) for c in sources)
        pod.claim_statuses = tuple(
            (str(_mapping(c).get("name") or ""), str(_mapping(c).get("resourceClaimName") or ""))
            for c in status.get("resourceClaimStatuses") or ())
        # Like kube-scheduler's DRA PreEnqueue: a pod whose template's claim is not made yet
        # waits outside the queue (and outside its gang), as a gated pod does.
        named = {entry for entry, _ in pod.claim_statuses}
        pod.awaiting_claims = any(template and entry not in named
                                  for entry, _, template in pod.claim_sources)
        pod.gated = pod.gated or pod.awaiting_claims
    fields = [f"spec.{name}" for name in PLACEMENT_FIELDS if spec.get(name)]
    if fields:
        pod.placement_fields = tuple(fields)


def _read_runtime(pod: Pod, meta: Json, spec: Json, status: Json) -> None:
    """A malformed declared runtime is not a malformed pod: it counts as unknown."""
    declared, pod.runtime_error = declared_runtime(_mapping(meta.get("annotations")))
    deadline = spec.get("activeDeadlineSeconds")
    if deadline is not None and (isinstance(deadline, bool) or not isinstance(deadline, int)
                                 or deadline <= 0):
        raise ValueError(f"must be a positive integer, got {deadline!r}")
    pod.runtime = bounded_runtime(declared, float(deadline) if deadline else None)
    pod.started = parse_rfc3339(status.get("startTime"))


# Each part of a pod, read in this order, with the field an error in it is reported under.
_READERS: tuple[tuple[str, Callable[[Pod, Json, Json, Json], None]], ...] = (
    ("metadata", _read_metadata),
    ("metadata.labels", _read_labels),
    ("metadata.ownerReferences", _read_owner),
    ("status.phase", _read_phase),
    ("spec.schedulerName", _read_scheduler_name),
    ("spec.nodeName", _read_node_name),
    ("spec.priority", _read_priority),
    ("spec.preemptionPolicy", _read_preemption_policy),
    ("spec.nodeSelector", _read_node_selector),
    ("spec.tolerations", _read_tolerations),
    ("spec.schedulingGates", _read_gates),
    ("spec.containers[].ports", _read_ports),
    ("spec.containers[].resources", _check_amounts),
    ("spec.containers[].resources", _read_requests),
    ("spec.affinity", _read_affinity),
    ("spec.topologySpreadConstraints", _read_spread),
    ("spec.containers[].image", _read_images),
    ("spec.volumes", _read_volumes),
    ("spec.resourceClaims", _read_claims_and_fields),
    ("spec.activeDeadlineSeconds", _read_runtime),
)


def parse_pod(obj: dict[str, Any]) -> Pod:
    """Build a Pod record from the API's JSON. Malformed fields are kept as ``parse_error``.

    The record is still returned so the scheduler can report the error on the pod instead of
    losing it; any shape of input gives a record (gRPC callers send pods too).
    """
    meta, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    pod = Pod(
        namespace=str(meta.get("namespace") or ""),
        name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""),
        resource_version=str(meta.get("resourceVersion") or ""),
    )
    for path, read in _READERS:
        try:
            read(pod, meta, spec, status)
        except (QuantityError, ValueError, TypeError, AttributeError, KeyError) as err:
            pod.parse_error = f"{getattr(err, 'path', path)}: {err}"
            break
    # Last, so that a malformed marker costs nothing else of the pod (a bound pod's requests
    # still count on its node); the pod is refused with the marker's error.
    pod.membership = membership(pod.namespace, pod.labels, _mapping(meta.get("annotations")),
                                spec)
    if pod.membership.error and not pod.parse_error:
        pod.parse_error = pod.membership.error
    return pod


def unreadable_error(pod: Pod) -> str:
    """The parse error that leaves a placed pod's room or constraints unknown ("" when
    none). A malformed group marker alone does not: it decides only the pod's gang, and the
    rest of the pod is read (a tenant's annotation must not close a node)."""
    error = pod.parse_error
    return "" if not error or error == pod.membership.error else error
