"""Dynamic resource allocation records (``resource.k8s.io/v1``): DeviceClasses,
ResourceSlices and ResourceClaims as the scheduler reads them, and the store their watches
fill.

Parsing never drops what it does not implement: a field the allocator cannot honour is
recorded as ``unsupported`` (its path), so the plugin refuses the claim naming it, or keeps
the device out of every allocation, instead of placing a pod as if it were not there.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from coscheduling.api.quantity import QuantityError, parse_quantity, scaled_units
from coscheduling.api.selectors import NodeSelectorTerm, parse_affinity_terms

GROUP_VERSION = "resource.k8s.io/v1"
API_PATH = f"/apis/{GROUP_VERSION}"
FINALIZER = "resource.kubernetes.io/delete-protection"
POD_CLAIM_NAME = "resource.kubernetes.io/pod-claim-name"
EXACT_COUNT, ALL = "ExactCount", "All"
RESERVED_FOR_MAX = 256
RESULTS_MAX = 32
# Tags of the CEL values the CEL standard lacks (see plugins.dynamicresources.cel).
QUANTITY, SEMVER = "__quantity__", "__semver__"

DeviceId = tuple[str, str, str]
"""(driver, pool, device name): a device, unique in the cluster."""


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValueError(f"{where}: must be a list")
    return value


def quantity_value(amount: Decimal) -> dict[str, Any]:
    """A quantity as CEL sees it: milli-units, rounded up (QuantityError beyond
    quantity.MAX_DIGITS)."""
    return {QUANTITY: scaled_units(amount, 1000)}


_SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
                     r"(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


def semver_value(text: str) -> dict[str, Any] | None:
    """A semantic version as CEL sees it, or None when ``text`` is not one."""
    match = _SEMVER.match(text)
    if match is None:
        return None
    return {SEMVER: [int(match[1]), int(match[2]), int(match[3])], "pre": match[4] or ""}


# -- DeviceClass ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    selectors: tuple[str, ...] = ()
    config: tuple[dict[str, Any], ...] = ()
    parse_error: str = ""


def _selectors(raw: object, where: str) -> tuple[str, ...]:
    found = []
    for index, selector in enumerate(_list(raw, where)):
        expression = _mapping(_mapping(selector).get("cel")).get("expression")
        if not isinstance(expression, str) or not expression:
            raise ValueError(f"{where}[{index}].cel.expression: must be a non-empty string")
        found.append(expression)
    return tuple(found)


def _opaque_configs(raw: object, where: str) -> tuple[dict[str, Any], ...]:
    configs = []
    for index, entry in enumerate(_list(raw, where)):
        entry = _mapping(entry)
        if "opaque" not in entry:
            raise ValueError(f"{where}[{index}]: only opaque configuration is known")
        configs.append(entry)
    return tuple(configs)


def parse_device_class(obj: dict[str, Any]) -> DeviceClass:
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    name = str(meta.get("name") or "")
    try:
        selectors = _selectors(spec.get("selectors"), "spec.selectors")
        config = _opaque_configs(spec.get("config"), "spec.config")
    except ValueError as err:
        return DeviceClass(name, parse_error=str(err))
    return DeviceClass(name, selectors, config)


# -- ResourceSlice ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Device:
    """A device of a slice; ``attributes`` and ``capacity`` map domain -> name -> value
    (an int, bool, str or tagged semver; capacity a tagged quantity). ``unusable`` names
    the field that keeps it out of every allocation (taints, counters, ...)."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    capacity: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    unusable: str = ""
    cel_cache: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    id: DeviceId = field(init=False, compare=False, repr=False)  # read in every search step

    def __post_init__(self) -> None:
        object.__setattr__(self, "id", (self.driver, self.pool, self.name))

    def attribute(self, qualified: str) -> Any:
        """The value of a fully qualified attribute ("domain/name"), or None."""
        domain, _, name = qualified.rpartition("/")
        return self.attributes.get(domain, {}).get(name)


def _qualified(key: str, driver: str) -> tuple[str, str]:
    domain, _, name = key.rpartition("/")
    return (domain or driver), name


def _attribute(raw: object, where: str) -> Any:
    value = _mapping(raw)
    for kind in ("int", "bool", "string"):
        if kind in value:
            return value[kind]
    if "version" in value:
        parsed = semver_value(str(value["version"]))
        if parsed is None:
            raise ValueError(f"{where}.version: {value['version']!r} is not a semantic version")
        return parsed
    raise ValueError(f"{where}: needs one of int, bool, string, version")


_UNUSABLE_FIELDS = ("taints", "consumesCounters", "bindingConditions", "bindsToNode",
                    "allowMultipleAllocations", "nodeName", "nodeSelector", "allNodes")


def _device(raw: object, driver: str, pool: str, where: str) -> Device:
    spec = _mapping(raw)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: must be a non-empty string")
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in _mapping(spec.get("attributes")).items():
        domain, short = _qualified(str(key), driver)
        attributes.setdefault(domain, {})[short] = _attribute(value, f"{where}.attributes[{key}]")
    capacity: dict[str, dict[str, Any]] = {}
    for key, value in _mapping(spec.get("capacity")).items():
        domain, short = _qualified(str(key), driver)
        try:
            amount = quantity_value(parse_quantity(_mapping(value).get("value")))
        except QuantityError as err:
            raise ValueError(f"{where}.capacity[{key}].value: {err}") from None
        capacity.setdefault(domain, {})[short] = amount
    unusable = next((f"{where}.{f}" for f in _UNUSABLE_FIELDS if spec.get(f)), "")
    return Device(driver, pool, name, attributes, capacity, unusable)


@dataclass(frozen=True, slots=True)
class ResourceSlice:
    """A slice of a pool; it offers its devices to one node (``node_name``), to the nodes
    ``node_terms`` select, or to every node (``all_nodes``)."""

    name: str
    driver: str = ""
    pool: str = ""
    generation: int = 0
    slice_count: int = 1
    node_name: str = ""
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    all_nodes: bool = False
    devices: tuple[Device, ...] = ()
    unsupported: str = ""
    parse_error: str = ""
    selector_json: Any = field(default=None, compare=False, repr=False)

    def offers(self, labels: Mapping[str, str], node_name: str) -> bool:
        if self.node_name:
            return self.node_name == node_name
        if self.node_terms is not None:
            return any(t.matches(labels, node_name) for t in self.node_terms)
        return self.all_nodes


def node_terms(raw: object, where: str) -> tuple[NodeSelectorTerm, ...]:
    try:
        return parse_affinity_terms(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": raw}})
    except (ValueError, TypeError, AttributeError) as err:
        raise ValueError(f"{where}: {err}") from None


def _slice_spec(name: str, spec: dict[str, Any]) -> ResourceSlice:
    driver = str(spec.get("driver") or "")
    pool = _mapping(spec.get("pool"))
    pool_name = str(pool.get("name") or "")
    terms = (node_terms(spec["nodeSelector"], "spec.nodeSelector")
             if spec.get("nodeSelector") else None)
    devices = tuple(_device(d, driver, pool_name, f"spec.devices[{i}]")
                    for i, d in enumerate(_list(spec.get("devices"), "spec.devices")))
    unsupported = next((f"spec.{f}" for f in ("perDeviceNodeSelection", "sharedCounters")
                        if spec.get(f)), "")
    return ResourceSlice(
        name, driver, pool_name, int(pool.get("generation") or 0),
        int(pool.get("resourceSliceCount") or 1), str(spec.get("nodeName") or ""), terms,
        bool(spec.get("allNodes")), devices, unsupported, selector_json=spec.get("nodeSelector"))


def parse_resource_slice(obj: dict[str, Any]) -> ResourceSlice:
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    name = str(meta.get("name") or "")
    try:
        return _slice_spec(name, spec)
    except (ValueError, TypeError) as err:
        return ResourceSlice(name, str(spec.get("driver") or ""), parse_error=str(err))


# -- ResourceClaim ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Subrequest:
    """One way to satisfy a request: ``name`` is what the allocation result names
    ("gpu", or "gpu/big" for a firstAvailable alternative)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1


@dataclass(frozen=True, slots=True)
class Request:
    """A request with its alternatives in order (one for ``exactly``)."""

    name: str
    alternatives: tuple[Subrequest, ...]


@dataclass(frozen=True, slots=True)
class Constraint:
    """All devices of ``requests`` (every request when empty) share ``attribute``'s value,
    or, when ``distinct``, have pairwise different values."""

    requests: tuple[str, ...]
    attribute: str
    distinct: bool = False

    def applies(self, result_request: str) -> bool:
        parent = result_request.split("/", 1)[0]
        return not self.requests or result_request in self.requests or parent in self.requests


@dataclass(frozen=True, slots=True)
class Result:
    request: str
    driver: str
    pool: str
    device: str

    @property
    def device_id(self) -> DeviceId:
        return (self.driver, self.pool, self.device)


@dataclass(frozen=True, slots=True)
class Allocation:
    """``status.allocation``: the devices, and the nodes they can be used from (None: any
    node)."""

    results: tuple[Result, ...]
    node_terms: tuple[NodeSelectorTerm, ...] | None = None
    node_name: str = ""  # the node it was made for, when this scheduler made it
    # What PreBind writes (status.allocation), when this scheduler made it.
    json: Any = field(default=None, compare=False, repr=False)

    def usable_on(self, labels: Mapping[str, str], node_name: str) -> bool:
        return self.node_terms is None or any(t.matches(labels, node_name)
                                              for t in self.node_terms)


@dataclass(frozen=True, slots=True)
class ResourceClaim:
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = field(default="", compare=False)
    deleting: bool = False
    owner_uid: str = ""
    owner_name: str = ""  # the Pod a template's claim was made for
    requests: tuple[Request, ...] = ()
    constraints: tuple[Constraint, ...] = ()
    config: tuple[dict[str, Any], ...] = ()
    allocation: Allocation | None = None
    reserved_for: tuple[tuple[str, str], ...] = ()  # (pod name, pod uid)
    unsupported: str = ""
    parse_error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def reserved_for_pod(self, uid: str) -> bool:
        return any(u == uid for _, u in self.reserved_for)


_UNSUPPORTED_REQUEST = ("adminAccess", "tolerations", "capacity")


def _subrequest(raw: dict[str, Any], name: str, where: str) -> tuple[Subrequest, str]:
    """The subrequest and the path of a field it sets that is not implemented ("")."""
    device_class = raw.get("deviceClassName")
    if not isinstance(device_class, str) or not device_class:
        raise ValueError(f"{where}.deviceClassName: must be a non-empty string")
    mode = str(raw.get("allocationMode") or EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        raise ValueError(f"{where}.allocationMode: {mode!r} is neither ExactCount nor All")
    count = raw.get("count", 1) if mode == EXACT_COUNT else 0
    if not isinstance(count, int) or isinstance(count, bool) or (
            count < 1 and mode == EXACT_COUNT):
        raise ValueError(f"{where}.count: must be an integer >= 1")
    unsupported = next((f"{where}.{f}" for f in _UNSUPPORTED_REQUEST if raw.get(f)), "")
    selectors = _selectors(raw.get("selectors"), f"{where}.selectors")
    return Subrequest(name, device_class, selectors, mode, count), unsupported


def _request(raw: object, where: str) -> tuple[Request, str]:
    spec = _mapping(raw)
    name = spec.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}.name: must be a non-empty string")
    if spec.get("exactly") is not None:
        sub, unsupported = _subrequest(_mapping(spec["exactly"]), name, f"{where}.exactly")
        return Request(name, (sub,)), unsupported
    alternatives, unsupported = [], ""
    for index, alt in enumerate(_list(spec.get("firstAvailable"), f"{where}.firstAvailable")):
        alt = _mapping(alt)
        alt_where = f"{where}.firstAvailable[{index}]"
        sub, why = _subrequest(alt, f"{name}/{alt.get('name') or ''}", alt_where)
        alternatives.append(sub)
        unsupported = unsupported or why
    if not alternatives:
        raise ValueError(f"{where}: needs exactly or firstAvailable")
    return Request(name, tuple(alternatives)), unsupported


def _constraints(raw: object, where: str) -> tuple[Constraint, ...]:
    found = []
    for index, entry in enumerate(_list(raw, where)):
        entry = _mapping(entry)
        match, distinct = entry.get("matchAttribute"), entry.get("distinctAttribute")
        if not (match or distinct):
            raise ValueError(f"{where}[{index}]: needs matchAttribute or distinctAttribute")
        requests = tuple(str(r) for r in _list(entry.get("requests"),
                                               f"{where}[{index}].requests"))
        found.append(Constraint(requests, str(match or distinct), distinct=not match))
    return tuple(found)


def _allocation(raw: object) -> Allocation | None:
    status = _mapping(raw)
    if not status:
        return None
    results = tuple(
        Result(str(r.get("request") or ""), str(r.get("driver") or ""),
               str(r.get("pool") or ""), str(r.get("device") or ""))
        for r in (_mapping(x) for x in _list(_mapping(status.get("devices")).get("results"),
                                             "status.allocation.devices.results")))
    selector = status.get("nodeSelector")
    terms = node_terms(selector, "status.allocation.nodeSelector") if selector else None
    return Allocation(results, terms)


def _claim_spec(spec: dict[str, Any]) -> tuple[dict[str, Any], str]:
    devices = _mapping(spec.get("devices"))
    requests, unsupported = [], ""
    for index, raw in enumerate(_list(devices.get("requests"), "spec.devices.requests")):
        request, why = _request(raw, f"spec.devices.requests[{index}]")
        requests.append(request)
        unsupported = unsupported or why
    return {
        "requests": tuple(requests),
        "constraints": _constraints(devices.get("constraints"), "spec.devices.constraints"),
        "config": _opaque_configs(devices.get("config"), "spec.devices.config"),
    }, unsupported


def parse_resource_claim(obj: dict[str, Any]) -> ResourceClaim:
    meta, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    owner = next((_mapping(r) for r in meta.get("ownerReferences") or ()
                  if _mapping(r).get("controller")), {})
    base: dict[str, Any] = {
        "uid": str(meta.get("uid") or ""),
        "resource_version": str(meta.get("resourceVersion") or ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        "owner_uid": str(owner.get("uid") or "") if owner.get("kind") == "Pod" else "",
        "owner_name": str(owner.get("name") or "") if owner.get("kind") == "Pod" else "",
        "reserved_for": tuple((str(_mapping(r).get("name") or ""), str(_mapping(r).get("uid")))
                              for r in status.get("reservedFor") or ()),
    }
    try:
        where = "spec.devices"
        fields, base["unsupported"] = _claim_spec(spec)
        base.update(fields)
        where = "status.allocation"
        base["allocation"] = _allocation(status.get("allocation"))
    except (ValueError, TypeError) as err:
        message = str(err)
        base["parse_error"] = message if message.startswith(("spec.", "status.")) else (
            f"{where}: {message}")
    return ResourceClaim(str(meta.get("namespace") or ""), str(meta.get("name") or ""), **base)


# -- the store --------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Assumed:
    """An allocation Reserve made for ``pod`` that the API server does not show yet."""

    pod: str
    allocation: Allocation


class DeviceStore:
    """DeviceClasses, ResourceSlices and ResourceClaims from their watches, plus the
    allocations this scheduler made and has not seen come back yet (read and written under
    the cache lock). A claim whose allocation arrives from the watch drops its assumption.

    Which claim holds a device is indexed as claims change, so a cycle asks about the few
    devices of a node instead of walking every claim; ``inventory`` changes only with
    classes and slices, so what is derived from them (the node index, selector outcomes)
    outlives the constant churn of claims."""

    def __init__(self) -> None:
        self.classes: dict[str, DeviceClass] = {}
        self.slices: dict[str, ResourceSlice] = {}
        self.claims: dict[str, ResourceClaim] = {}
        self.assumed: dict[str, Assumed] = {}
        self.changed = threading.Condition()
        self.version = 0  # bumped on every change: readers cache what they derive
        self.inventory = 0  # bumped when a class or a slice changes
        self._allocated: dict[str, tuple[DeviceId, ...]] = {}  # claim key -> its devices
        self.holders: dict[DeviceId, str] = {}  # device -> the claim allocated it
        self.assumed_holders: dict[DeviceId, str] = {}  # device -> the claim assumed it
        # Told which devices were taken or given back, and None when the inventory changed
        # (the scheduler marks their nodes changed, for answers it keeps per node).
        self.on_change: Callable[[Iterable[DeviceId] | None], None] = lambda _: None
        self._homes: dict[DeviceId, str] = {}  # device -> its node ("" on shared slices)
        self._homes_inventory = -1

    def update(self, apply: Callable[[], object], claim_key: str = "") -> None:
        """Apply a watch change: to the claim ``claim_key``, or else to the inventory."""
        with self.changed:
            apply()
            self.version += 1
            if claim_key:
                self._index_claim(claim_key)
            else:
                self.inventory += 1
                self.on_change(None)
            self.changed.notify_all()

    def _index_claim(self, key: str) -> None:
        before = self._allocated.pop(key, ())
        for device in before:
            if self.holders.get(device) == key:
                del self.holders[device]
        claim = self.claims.get(key)
        devices = (tuple(r.device_id for r in claim.allocation.results)
                   if claim is not None and claim.allocation is not None else ())
        if devices:
            self._allocated[key] = devices
        for device in devices:
            self.holders[device] = key
        if set(before) != set(devices):
            self.on_change((*before, *devices))

    def nodes_of(self, devices: Iterable[DeviceId]) -> set[str] | None:
        """The nodes ``devices`` are local to; None when one is not local to a node (a
        slice shared by several nodes, or a device no slice publishes now)."""
        if self._homes_inventory != self.inventory:
            self._homes = {d.id: piece.node_name for piece in self.slices.values()
                           for d in piece.devices}
            self._homes_inventory = self.inventory
        nodes = {self._homes.get(device, "") for device in devices}
        return None if "" in nodes else nodes

    def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(done, timeout)

    def allocation(self, claim: ResourceClaim) -> Allocation | None:
        """The claim's allocation: the API server's, else the one this scheduler assumed."""
        if claim.allocation is not None:
            return claim.allocation
        assumed = self.assumed.get(claim.key)
        return assumed.allocation if assumed is not None else None

    def assume(self, claim_key: str, pod_key: str, allocation: Allocation) -> None:
        self._drop_assumed(claim_key)
        self.assumed[claim_key] = Assumed(pod_key, allocation)
        for result in allocation.results:
            self.assumed_holders[result.device_id] = claim_key
        self.version += 1
        self.on_change(r.device_id for r in allocation.results)

    def forget(self, claim_key: str, pod_key: str) -> None:
        assumed = self.assumed.get(claim_key)
        if assumed is not None and assumed.pod == pod_key:
            self._drop_assumed(claim_key)
            self.version += 1

    def settle(self, claim: ResourceClaim) -> None:
        """A claim record arrived from the watch: an assumption it now shows (or that a
        deleted claim makes moot) is dropped."""
        if claim.allocation is not None or claim.deleting:
            self._drop_assumed(claim.key)

    def _drop_assumed(self, claim_key: str) -> None:
        assumed = self.assumed.pop(claim_key, None)
        if assumed is None:
            return
        for result in assumed.allocation.results:
            if self.assumed_holders.get(result.device_id) == claim_key:
                del self.assumed_holders[result.device_id]
        self.on_change(r.device_id for r in assumed.allocation.results)
