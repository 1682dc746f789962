"""What devices a node offers, which are in use, and the allocation written for a claim.

The node index is rebuilt only when the store changed (its version): for every pool only
the slices of its newest generation count, node-local slices are indexed by node, and
slices with a node selector or ``allNodes`` are checked per node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.dra import (
    Allocation,
    Device,
    DeviceClass,
    DeviceId,
    DeviceStore,
    ResourceClaim,
    ResourceSlice,
    Result,
    node_terms,
)
from coscheduling.framework.handle import SchedulerCache


@dataclass
class NodeIndex:
    """Usable devices by node, with the slice each came from."""

    version: int = -1
    local: dict[str, list[Device]] = field(default_factory=dict)
    shared: list[ResourceSlice] = field(default_factory=list)
    slice_of: dict[DeviceId, ResourceSlice] = field(default_factory=dict)
    by_id: dict[DeviceId, Device] = field(default_factory=dict)
    incomplete: set[tuple[str, str]] = field(default_factory=set)
    skipped: list[str] = field(default_factory=list)  # why slices or devices are left out

    def devices_on(self, labels: Mapping[str, str], node_name: str) -> list[Device]:
        found = list(self.local.get(node_name, ()))
        for piece in self.shared:
            if piece.offers(labels, node_name):
                found.extend(piece.devices)
        return found


def _newest(slices: Sequence[ResourceSlice]) -> tuple[dict[tuple[str, str], int],
                                                     set[tuple[str, str]]]:
    """The newest generation of every pool, and the pools missing slices of it."""
    newest: dict[tuple[str, str], int] = {}
    for piece in slices:
        pool = (piece.driver, piece.pool)
        newest[pool] = max(newest.get(pool, piece.generation), piece.generation)
    counts: dict[tuple[str, str], int] = {}
    expected: dict[tuple[str, str], int] = {}
    for piece in slices:
        pool = (piece.driver, piece.pool)
        if piece.generation == newest[pool]:
            counts[pool] = counts.get(pool, 0) + 1
            expected[pool] = piece.slice_count
    return newest, {p for p, n in counts.items() if n < expected[p]}


def build_index(store: DeviceStore) -> NodeIndex:
    index = NodeIndex(store.inventory)
    good = [s for s in store.slices.values() if not s.parse_error and not s.unsupported]
    index.skipped = [f'resourceslice "{s.name}": {s.parse_error or s.unsupported} is not '
                     "usable by this scheduler" for s in store.slices.values()
                     if s.parse_error or s.unsupported]
    newest, index.incomplete = _newest(good)
    for piece in good:
        if piece.generation != newest[(piece.driver, piece.pool)]:
            continue
        usable = tuple(d for d in piece.devices if not d.unusable)
        for device in usable:
            index.slice_of[device.id] = piece
            index.by_id[device.id] = device
        if piece.node_name:
            index.local.setdefault(piece.node_name, []).extend(usable)
        elif piece.node_terms is not None or piece.all_nodes:
            index.shared.append(_with_devices(piece, usable))
    return index


def _with_devices(piece: ResourceSlice, devices: tuple[Device, ...]) -> ResourceSlice:
    return ResourceSlice(piece.name, piece.driver, piece.pool, piece.generation,
                         piece.slice_count, piece.node_name, piece.node_terms,
                         piece.all_nodes, devices, selector_json=piece.selector_json)


def _consumers_gone(claim: ResourceClaim, cache: SchedulerCache) -> bool:
    """Whether every pod the claim is reserved for is bound and yet missing from its node:
    what preemption's view of the cluster without its victims looks like."""
    if not claim.reserved_for:
        return False
    for name, uid in claim.reserved_for:
        pod = cache.pod(f"{claim.namespace}/{name}")
        if pod is None or pod.uid != uid or not pod.node_name:
            return False
        node = cache.node(pod.node_name)
        if node is None or pod.key in node.pods:
            return False
    return True


class InUse:
    """Whether a device is taken: allocated to a claim (the API server's allocation, or one
    this scheduler assumed), unless every pod of that claim is gone from the view. Asked
    per device as a search meets it, so a cycle costs the devices of its node, not the
    claims of the cluster."""

    def __init__(self, store: DeviceStore, cache: SchedulerCache) -> None:
        self.store = store
        self.cache = cache

    def __contains__(self, device: object) -> bool:
        store = self.store
        if device in store.assumed_holders:
            return True
        key = store.holders.get(device) if isinstance(device, tuple) else None
        claim = store.claims.get(key) if key is not None else None
        return claim is not None and not _consumers_gone(claim, self.cache)


def _selector_json(results: Sequence[Result], index: NodeIndex, node_name: str) -> Any:
    """The nodes an allocation can be used from: the node itself when a device is local to
    it (or selectors differ), a slice's own selector, or None for devices of every node."""
    slices = [index.slice_of.get(r.device_id) for r in results]
    if any(s is None or s.node_name for s in slices):
        return {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": [node_name]}]}]}
    selectors = {repr(s.selector_json) for s in slices if s is not None and s.selector_json}
    if len(selectors) > 1:
        return _selector_json([Result("", "", "", "")], NodeIndex(), node_name)
    return next((s.selector_json for s in slices if s is not None and s.selector_json), None)


def _config(claim: ResourceClaim, classes: Mapping[str, DeviceClass],
            chosen: set[str]) -> list[dict[str, Any]]:
    """status.allocation.devices.config: the classes' configuration for the (sub)requests
    that got devices, then the claim's own, passed through as given."""
    config: list[dict[str, Any]] = []
    for request in claim.requests:
        for sub in request.alternatives:
            if sub.name not in chosen:
                continue
            device_class = classes.get(sub.device_class)
            for entry in device_class.config if device_class is not None else ():
                config.append({"source": "FromClass", "requests": [sub.name],
                               "opaque": entry["opaque"]})
    for entry in claim.config:
        config.append({"source": "FromClaim", **entry})
    return config


def make_allocation(claim: ResourceClaim, results: Sequence[Result], index: NodeIndex,
                    node_name: str, classes: Mapping[str, DeviceClass]) -> Allocation:
    """The allocation PreBind writes for ``claim`` on ``node_name``."""
    selector = _selector_json(results, index, node_name)
    devices: dict[str, Any] = {"results": [
        {"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device}
        for r in results]}
    config = _config(claim, classes, {r.request for r in results})
    if config:
        devices["config"] = config
    body: dict[str, Any] = {"devices": devices}
    if selector is not None:
        body["nodeSelector"] = selector
    terms = node_terms(selector, "nodeSelector") if selector is not None else None
    return Allocation(tuple(results), terms, node_name, json=body)

