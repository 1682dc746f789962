"""DynamicResources: devices from ResourceSlices allocated to a pod's ResourceClaims
(PreFilter, Filter, Reserve/Unreserve, PreBind), as kube-scheduler 1.37 does it.

A claim already allocated pins its pods to the nodes its allocation names. The others are
allocated on the node being filtered, together with the claims of every pod that holds a
gang's claim on that node (their devices are not chosen yet, only promised), so no device
is ever given twice and a gang's members get devices that fit all of them. Reserve assumes
the allocation in the device store; PreBind writes it to the claim with the pod in
``reservedFor``; Unreserve takes back both.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Hashable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coscheduling.api.dra import ALL, Device, DeviceId, ResourceClaim, Result, Subrequest
from coscheduling.api.objectref import ObjectRef
from coscheduling.framework.interfaces import (
    FilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    ReservePlugin,
)
from coscheduling.framework.status import SKIP, SUCCESS, Status
from coscheduling.plugins.dynamicresources import devices as dev
from coscheduling.plugins.dynamicresources.allocator import Allocator, BudgetExhausted, Matcher
from coscheduling.plugins.dynamicresources.cel import CelRuntimeError, compile_selector
from coscheduling.plugins.dynamicresources.claims import PodClaims, pod_claims
from coscheduling.plugins.dynamicresources.gang import (
    GangDevices,
    covered_count,
    fix_values,
    hashable_value,
)
from coscheduling.plugins.dynamicresources.prebind import reserve_claim, unreserve_claim

if TYPE_CHECKING:
    from coscheduling.api.podgroups import DeviceConstraint
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "DynamicResources"
STATE_KEY = "DynamicResources/claims"
CANNOT_ALLOCATE = "cannot allocate all claims"
NOT_AVAILABLE = "resourceclaim not available on the node"
MAX_OUTCOMES = 1_000_000


@dataclass
class CycleData:
    """What PreFilter found, for Filter, Reserve and PreBind of the same cycle."""

    claims: PodClaims
    in_use: Container[DeviceId]
    pinned: dict[str, str]  # pending claim -> the node a gang mate holds it on
    reserved: list[str] = field(default_factory=list)  # claims Reserve assumed
    written: list[str] = field(default_factory=list)  # claims PreBind allocated
    booked: list[ResourceClaim] = field(default_factory=list)  # claims PreBind reserved
    gang: GangDevices | None = None  # the gang's device constraints, when it has some


class DynamicResources(PreFilterPlugin, FilterPlugin, ReservePlugin, PreBindPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        if handle is None:
            raise ValueError(f"{NAME} needs the scheduler handle (it reads the device store)")
        self.handle = handle
        self.store = handle.devices
        self._index = dev.NodeIndex()
        # (selectors, device) -> whether the device passes them, or why evaluating failed;
        # valid while the inventory is (a device's attributes come with its slice).
        self._outcomes: dict[tuple[tuple[str, ...], DeviceId], bool | str] = {}
        self._reported: set[tuple[str, str]] = set()

    def sign(self, pod: Pod) -> Hashable | None:
        """What a node's answer depends on besides the node: the requests and constraints
        of claims still to allocate. Devices taken or given back mark their nodes changed
        (the scheduler wires the store to the cache), so a kept answer stays true. A pod
        whose claim is allocated or held by a gang mate is held to particular nodes: no
        signature."""
        if not pod.claim_sources:
            return ()
        claims, _ = pod_claims(pod, self.store, NAME)
        if claims is None or claims.allocated or self._pinned(pod, claims) \
                or self._constraints(pod):
            return None
        return tuple((c.requests, c.constraints) for c in claims.pending)

    # -- PreFilter ------------------------------------------------------------------------
    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        if not pod.claim_sources:
            return SKIP
        claims, status = pod_claims(pod, self.store, NAME)
        if claims is None:
            return status
        for claim in claims.pending:
            failed = self._check_selectors(claim)
            if failed is not None:
                return failed
        state.write(STATE_KEY, CycleData(claims, dev.InUse(self.store, self.handle.cache),
                                         self._pinned(pod, claims), gang=self._gang(pod, claims)))
        return SUCCESS

    def _constraints(self, pod: Pod) -> tuple[DeviceConstraint, ...]:
        group = self.handle.groups.podgroup(pod.group_key) if pod.group_key else None
        return group.device_constraints if group is not None else ()

    def _gang(self, pod: Pod, claims: PodClaims) -> GangDevices | None:
        """The gang's device constraints with the values its members' devices already
        fix, and the claims of members holding room on other nodes."""
        constraints = self._constraints(pod)
        if not constraints:
            return None
        gang = GangDevices(constraints, claim_keys={c.key for c in claims.claims})
        cache = self.handle.cache
        given: list[ResourceClaim] = list(claims.allocated)
        for mate in cache.group_pods(pod.group_key):
            if mate.key == pod.key:
                continue
            mate_claims, _ = pod_claims(mate, self.store, NAME)
            if mate_claims is None:
                continue
            gang.claim_keys.update(c.key for c in mate_claims.claims)
            given.extend(mate_claims.allocated)
            node = cache.claimed_node(mate.key)
            if node:
                gang.mates.setdefault(node, []).extend(mate_claims.pending)
        allocations = {c.key: self.store.allocation(c) for c in given}
        fix_values(gang, given, allocations, self.index().by_id)
        if not gang.mates and not given:
            self._size_values(gang, pod, claims)
        return gang

    def _size_values(self, gang: GangDevices, pod: Pod, claims: PodClaims) -> None:
        """The first member placed picks the gang's values: only values with free devices
        enough for every member (taken as alike to this one) are offered to it."""
        group = self.handle.groups.podgroup(pod.group_key)
        members = group.min_member if group is not None else 1
        in_use = dev.InUse(self.store, self.handle.cache)
        for index, constraint in enumerate(gang.constraints):
            each = covered_count(constraint, claims.pending)
            if index in gang.fixed or not each:
                continue
            free: dict[object, int] = {}
            for device in self.index().by_id.values():
                value = hashable_value(device.attribute(constraint.attribute))
                if value is None or device.id in in_use or not self._covered(
                        constraint, claims.pending, device):
                    continue
                free[value] = free.get(value, 0) + 1
            gang.enough[index] = {v for v, n in free.items() if n >= each * members}

    def _covered(self, constraint: DeviceConstraint, claims: tuple[ResourceClaim, ...],
                 device: Device) -> bool:
        """Whether some request of ``claims`` that ``constraint`` covers could use it."""
        return any(self._matches(c, sub, device) for c in claims for item in c.requests
                   for sub in item.alternatives if constraint.applies(sub.device_class))

    def _check_selectors(self, claim: ResourceClaim) -> Status | None:
        """Every class a pending claim names exists and every selector compiles."""
        for index, request in enumerate(claim.requests):
            for sub in request.alternatives:
                device_class = self.store.classes.get(sub.device_class)
                if device_class is None:
                    return Status.unschedulable(
                        f'resourceclaim "{claim.name}": deviceclass "{sub.device_class}" '
                        "not found", plugin=NAME)
                ref = ObjectRef("resource.k8s.io/v1", "DeviceClass", "", device_class.name)
                if device_class.parse_error:
                    return self._bad(ref, f'deviceclass "{device_class.name}": '
                                          f"{device_class.parse_error}")
                for i, text in enumerate(device_class.selectors):
                    failed = self._compiles(ref, f'deviceclass "{device_class.name}"',
                                            f"spec.selectors[{i}].cel.expression", text)
                    if failed is not None:
                        return failed
                claim_ref = ObjectRef("resource.k8s.io/v1", "ResourceClaim", claim.namespace,
                                      claim.name, claim.uid)
                for i, text in enumerate(sub.selectors):
                    failed = self._compiles(
                        claim_ref, f'resourceclaim "{claim.name}"',
                        f"spec.devices.requests[{index}] ({sub.name}).selectors[{i}]"
                        ".cel.expression", text)
                    if failed is not None:
                        return failed
        return None

    def _compiles(self, ref: ObjectRef, what: str, where: str, text: str) -> Status | None:
        compiled = compile_selector(text)
        if not compiled.error:
            return None
        return self._bad(ref, f"{what}: {where}: the CEL expression does not compile: "
                              f"{compiled.error}")

    def _bad(self, ref: ObjectRef, message: str) -> Status:
        self._event(ref, "FailedCompilation" if "compile" in message else "Invalid", message)
        return Status.unresolvable(message, plugin=NAME)

    def _event(self, ref: ObjectRef, reason: str, message: str) -> None:
        key = (f"{ref.kind}/{ref.namespace}/{ref.name}", message)
        if key in self._reported or self.handle.events is None:
            return
        if len(self._reported) > 10_000:
            self._reported.clear()
        self._reported.add(key)
        self.handle.events.object_event(ref, "Warning", reason, message)

    def _pinned(self, pod: Pod, claims: PodClaims) -> dict[str, str]:
        """Pending claims of ``pod`` that a gang mate holding room already counts on."""
        if not pod.group_key or not claims.pending:
            return {}
        wanted = {c.key for c in claims.pending}
        cache = self.handle.cache
        pinned: dict[str, str] = {}
        for mate in cache.group_pods(pod.group_key):
            node = cache.claimed_node(mate.key) if mate.key != pod.key else ""
            if not node:
                continue
            mate_claims, _ = pod_claims(mate, self.store, NAME)
            for claim in mate_claims.pending if mate_claims is not None else ():
                if claim.key in wanted:
                    pinned.setdefault(claim.key, node)
        return pinned

    def _data(self, state: CycleState, pod: Pod) -> CycleData | None:
        data = state.read(STATE_KEY)
        if data is None and pod.claim_sources:  # Filter without PreFilter (a claimed node)
            self.pre_filter(state, pod)
            data = state.read(STATE_KEY)
        return data if isinstance(data, CycleData) else None

    # -- Filter ---------------------------------------------------------------------------
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        if not pod.claim_sources:
            return SUCCESS
        data = self._data(state, pod)
        if data is None:
            return Status.unresolvable("the pod's resource claims could not be read",
                                       plugin=NAME)
        labels = node.node.labels if node.node is not None else {}
        for claim in data.claims.allocated:
            allocation = self.store.allocation(claim)
            if allocation is not None and not allocation.usable_on(labels, node.name):
                return Status.unschedulable(NOT_AVAILABLE, plugin=NAME)
        if not data.claims.pending:
            return SUCCESS
        if any(data.pinned.get(c.key, node.name) != node.name for c in data.claims.pending):
            return Status.unschedulable(NOT_AVAILABLE, plugin=NAME)
        solution, why = self._solve(data, pod, node)
        return SUCCESS if solution is not None else Status.unschedulable(why, plugin=NAME)

    def index(self) -> dev.NodeIndex:
        if self._index.version != self.store.inventory:
            self._index = dev.build_index(self.store)
            self._outcomes.clear()
        return self._index

    def _solve(self, data: CycleData, pod: Pod,
               node: NodeInfo) -> tuple[dict[str, list[Result]] | None, str]:
        """Devices for the pod's pending claims and those of the pods holding room on the
        node, all at once; or why there are none. A gang with device constraints needs a
        value that suits this node and every node its members hold room on."""
        gang = data.gang
        claims = list(data.claims.pending) + self._held_on(node, pod, data)
        if gang is None:
            return self._allocate(node, claims, data.in_use, self._matches)
        why = f"{CANNOT_ALLOCATE}: no device of the node has the gang's device constraints' " \
              "attributes"
        for values in gang.choices(self._devices_on(node)):
            matches = gang.restrict(self._matches, values)
            found, why = self._allocate(node, claims, data.in_use, matches)
            if found is None:
                continue
            if all(self._mates_fit(data, pod, other, values) for other in gang.mates
                   if other != node.name):
                return found, ""
            why = (f"{CANNOT_ALLOCATE}: with the gang's device constraints "
                   f"({', '.join(map(repr, values))}) other members' claims no longer fit")
        return None, why

    def _mates_fit(self, data: CycleData, pod: Pod, node_name: str,
                   values: tuple[object, ...]) -> bool:
        """Whether the claims held on ``node_name`` still fit when the gang's devices have
        ``values`` (once per cycle and node)."""
        assert data.gang is not None
        key = (node_name, values)
        if key not in data.gang.checked:
            node = self.handle.cache.node(node_name)
            fits = node is not None and self._allocate(
                node, self._held_on(node, pod, data), data.in_use,
                data.gang.restrict(self._matches, values))[0] is not None
            data.gang.checked[key] = fits
        return data.gang.checked[key]

    def _devices_on(self, node: NodeInfo) -> list[Device]:
        labels = node.node.labels if node.node is not None else {}
        return self.index().devices_on(labels, node.name)

    def _allocate(self, node: NodeInfo, claims: list[ResourceClaim],
                  in_use: Container[DeviceId],
                  matches: Matcher) -> tuple[dict[str, list[Result]] | None, str]:
        index = self.index()
        if index.incomplete and any(s.mode == ALL for c in claims for r in c.requests
                                    for s in r.alternatives):
            return None, f"{CANNOT_ALLOCATE}: a pool of the node is incomplete"
        try:
            found = Allocator(self._devices_on(node), in_use, matches).allocate(claims)
        except BudgetExhausted:
            return None, f"{CANNOT_ALLOCATE}: the device search ran out of steps"
        return found, "" if found is not None else CANNOT_ALLOCATE

    def _held_on(self, node: NodeInfo, pod: Pod, data: CycleData) -> list[ResourceClaim]:
        """Pending claims of the other pods that hold a gang's room on ``node``."""
        own = {c.key for c in data.claims.pending}
        found: dict[str, ResourceClaim] = {}
        for key, holder in node.claims.items():
            if key == pod.key or not holder.claim_sources:
                continue
            held, _ = pod_claims(holder, self.store, NAME)
            for claim in held.pending if held is not None else ():
                if claim.key not in own:
                    found.setdefault(claim.key, claim)
        return list(found.values())

    def _matches(self, claim: ResourceClaim, sub: Subrequest, device: Device) -> bool:
        """The class's selectors and the request's, in that order; an expression that fails
        on this device makes it not match, with an event on the object."""
        device_class = self.store.classes.get(sub.device_class)
        if device_class is None:
            return False
        if not self._passes(device_class.selectors, device, lambda: ObjectRef(
                "resource.k8s.io/v1", "DeviceClass", "", device_class.name)):
            return False
        return self._passes(sub.selectors, device, lambda: ObjectRef(
            "resource.k8s.io/v1", "ResourceClaim", claim.namespace, claim.name, claim.uid))

    def _passes(self, selectors: tuple[str, ...], device: Device,
                ref: Callable[[], ObjectRef]) -> bool:
        """Whether ``device`` passes every selector, evaluated once per inventory."""
        if not selectors:
            return True
        self.index()  # drops outcomes of an older inventory
        key = (selectors, device.id)
        outcome = self._outcomes.get(key)
        if outcome is None:
            if len(self._outcomes) > MAX_OUTCOMES:
                self._outcomes.clear()
            outcome = self._outcomes[key] = _evaluate(selectors, device)
        if isinstance(outcome, str):
            self._event(ref(), "CELRuntimeError", outcome)
            return False
        return outcome

    # -- Reserve / Unreserve ----------------------------------------------------------------
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        data = self._data(state, pod)
        if data is None or not data.claims.pending:
            return SUCCESS
        node = self.handle.cache.node(node_name)
        if node is None:
            return Status.unschedulable(f"node {node_name} is gone", plugin=NAME)
        found, why = self._solve(data, pod, node)
        if found is None:
            return Status.unschedulable(why, plugin=NAME)
        for claim in data.claims.pending:
            allocation = dev.make_allocation(claim, found[claim.key], self.index(), node_name,
                                             self.store.classes)
            self.store.assume(claim.key, pod.key, allocation)
            data.reserved.append(claim.key)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        data = state.read(STATE_KEY)
        keys = data.reserved if isinstance(data, CycleData) else [
            k for k, a in self.store.assumed.items() if a.pod == pod.key]
        for key in keys:
            self.store.forget(key, pod.key)
        client = self.handle.api
        if isinstance(data, CycleData) and client is not None:
            for claim in data.booked:
                unreserve_claim(client, claim, pod, deallocate=claim.key in data.written)
            data.booked.clear()
            data.written.clear()

    # -- PreBind --------------------------------------------------------------------------
    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        data = self._data(state, pod)
        if data is None or not data.claims.claims:
            return SUCCESS
        client = self.handle.api
        if client is None:
            return Status.error("no API client: resource claims cannot be allocated",
                                plugin=NAME)
        for claim in data.claims.claims:
            assumed = self.store.assumed.get(claim.key)  # one read: this pod's own, from Reserve
            allocation = (assumed.allocation.json if assumed is not None
                          and assumed.pod == pod.key else None)
            why = reserve_claim(client, claim, pod, allocation)
            if why:
                return Status.error(why, plugin=NAME)
            data.booked.append(claim)
            if allocation is not None:
                data.written.append(claim.key)
        return SUCCESS


def _evaluate(selectors: tuple[str, ...], device: Device) -> bool | str:
    """Whether ``device`` passes every selector, or why one failed on it."""
    for text in selectors:
        try:
            if not compile_selector(text).matches(device):
                return False
        except CelRuntimeError as err:
            return (f"{text!r} failed on device {'/'.join(device.id)}: {err}; "
                    "the device does not match")
    return True
