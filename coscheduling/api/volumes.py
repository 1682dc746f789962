"""Storage records (claims, volumes, classes, CSINodes) and the store the volume plugins read.

The watches fill a :class:`VolumeStore`; the scheduling cycle reads it under the cache lock.
VolumeBinding also *assumes* the volumes it chose for a pod (Reserve) so that no other pod,
gang member or not, is handed the same PersistentVolume before the API server has caught up.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coscheduling.api.podaffinity import LabelSelector, parse_label_selector
from coscheduling.api.quantity import QuantityError, parse_resource_list
from coscheduling.api.selectors import NodeSelectorTerm, Requirement, parse_affinity_terms

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod

STORAGE = "storage"
SELECTED_NODE = "volume.kubernetes.io/selected-node"
BETA_CLASS = "volume.beta.kubernetes.io/storage-class"
NO_PROVISIONER = "kubernetes.io/no-provisioner"
WAIT_FOR_FIRST_CONSUMER = "WaitForFirstConsumer"
READ_WRITE_ONCE_POD = "ReadWriteOncePod"
CLAIM_SOURCES = ("persistentVolumeClaim", "ephemeral")


def _mapping(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _class_of(meta: dict[str, Any], spec: dict[str, Any]) -> str:
    """The class a claim or volume names: the beta annotation wins, as in the core API."""
    annotations = _mapping(meta.get("annotations"))
    return str(annotations.get(BETA_CLASS) or spec.get("storageClassName") or "")


@dataclass(frozen=True, slots=True)
class Claim:
    """A PersistentVolumeClaim. ``resource_version`` does not count in comparisons, so an
    update that changes nothing the scheduler reads compares equal."""

    namespace: str
    name: str
    uid: str = ""
    resource_version: str = field(default="", compare=False)
    deleting: bool = False
    phase: str = "Pending"
    volume_name: str = ""
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = "Filesystem"
    request: int = 0
    selector: LabelSelector | None = None
    selected_node: str = ""
    controller_uid: str = ""
    parse_error: str = ""

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def bound(self) -> bool:
        return self.phase == "Bound" and bool(self.volume_name)


@dataclass(frozen=True, slots=True)
class Volume:
    """A PersistentVolume; ``claim_ref`` is (namespace, name, uid) or None."""

    name: str
    uid: str = ""
    resource_version: str = field(default="", compare=False)
    deleting: bool = False
    phase: str = ""
    storage_class: str = ""
    access_modes: frozenset[str] = frozenset()
    volume_mode: str = "Filesystem"
    capacity: int = 0
    claim_ref: tuple[str, str, str] | None = None
    node_terms: tuple[NodeSelectorTerm, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)
    csi_driver: str = ""
    csi_handle: str = ""
    parse_error: str = ""

    def fits_node(self, labels: Mapping[str, str], node_name: str) -> bool:
        """The volume's required node affinity (none: every node)."""
        return not self.node_terms or any(t.matches(labels, node_name) for t in self.node_terms)

    def reserved_for(self, claim: Claim) -> bool:
        ref = self.claim_ref
        return (ref is not None and ref[0] == claim.namespace and ref[1] == claim.name
                and ref[2] in ("", claim.uid))


@dataclass(frozen=True, slots=True)
class StorageClass:
    name: str
    provisioner: str = ""
    binding_mode: str = "Immediate"
    # allowedTopologies as node selector terms (empty: every node).
    allowed_topologies: tuple[NodeSelectorTerm, ...] = ()

    def provisions_on(self, labels: Mapping[str, str], node_name: str) -> bool:
        if not self.provisioner or self.provisioner == NO_PROVISIONER:
            return False
        topologies = self.allowed_topologies
        return not topologies or any(t.matches(labels, node_name) for t in topologies)


@dataclass(frozen=True, slots=True)
class CSINode:
    """How many volumes each CSI driver may attach to the node (drivers without a count
    are not limited)."""

    name: str
    limits: Mapping[str, int] = field(default_factory=dict)


def parse_claim(obj: dict[str, Any]) -> Claim:
    meta, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    namespace, name = str(meta.get("namespace") or ""), str(meta.get("name") or "")
    controller: object = next((r for r in meta.get("ownerReferences") or ()
                               if _mapping(r).get("controller")), {})
    base: dict[str, Any] = {
        "uid": str(meta.get("uid") or ""),
        "resource_version": str(meta.get("resourceVersion") or ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        "phase": str(status.get("phase") or "Pending"),
        "volume_name": str(spec.get("volumeName") or ""),
        "storage_class": _class_of(meta, spec),
        "volume_mode": str(spec.get("volumeMode") or "Filesystem"),
        "selected_node": str(_mapping(meta.get("annotations")).get(SELECTED_NODE) or ""),
        "controller_uid": str(_mapping(controller).get("uid") or ""),
    }
    try:
        where = "spec.accessModes"
        base["access_modes"] = frozenset(str(m) for m in spec.get("accessModes") or ())
        where = "spec.resources.requests"
        requests = _mapping(_mapping(spec.get("resources")).get("requests"))
        base["request"] = parse_resource_list(requests).get(STORAGE, 0)
        where = "spec.selector"
        base["selector"] = parse_label_selector(spec.get("selector"), where)
    except (QuantityError, ValueError, TypeError) as err:
        base["parse_error"] = f"{where}: {err}"
    return Claim(namespace, name, **base)


def _topology_terms(raw: object) -> tuple[NodeSelectorTerm, ...]:
    """A class's ``allowedTopologies`` (key In values, ANDed per term) as node terms."""
    terms = []
    for term in raw if isinstance(raw, list) else ():
        expressions = tuple(
            Requirement(str(e.get("key", "")), "In", tuple(str(v) for v in e.get("values") or ()))
            for e in _mapping(term).get("matchLabelExpressions") or ())
        terms.append(NodeSelectorTerm(expressions, ()))
    return tuple(terms)


def parse_volume(obj: dict[str, Any]) -> Volume:
    meta, spec, status = (_mapping(obj.get(k)) for k in ("metadata", "spec", "status"))
    ref = _mapping(spec.get("claimRef"))
    csi = _mapping(spec.get("csi"))
    base: dict[str, Any] = {
        "uid": str(meta.get("uid") or ""),
        "resource_version": str(meta.get("resourceVersion") or ""),
        "deleting": bool(meta.get("deletionTimestamp")),
        "phase": str(status.get("phase") or ""),
        "storage_class": _class_of(meta, spec),
        "volume_mode": str(spec.get("volumeMode") or "Filesystem"),
        "claim_ref": (str(ref.get("namespace") or ""), str(ref.get("name") or ""),
                      str(ref.get("uid") or "")) if ref else None,
        "labels": {str(k): str(v) for k, v in _mapping(meta.get("labels")).items()},
        "csi_driver": str(csi.get("driver") or ""),
        "csi_handle": str(csi.get("volumeHandle") or ""),
    }
    try:
        where = "spec.accessModes"
        base["access_modes"] = frozenset(str(m) for m in spec.get("accessModes") or ())
        where = "spec.capacity"
        base["capacity"] = parse_resource_list(spec.get("capacity")).get(STORAGE, 0)
        where = "spec.nodeAffinity"
        required = _mapping(spec.get("nodeAffinity")).get("required")
        base["node_terms"] = parse_affinity_terms(
            {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}})
    except (QuantityError, ValueError, TypeError, AttributeError) as err:
        base["parse_error"] = f"{where}: {err}"
    return Volume(str(meta.get("name") or ""), **base)


def parse_storage_class(obj: dict[str, Any]) -> StorageClass:
    meta = _mapping(obj.get("metadata"))
    return StorageClass(str(meta.get("name") or ""), str(obj.get("provisioner") or ""),
                        str(obj.get("volumeBindingMode") or "Immediate"),
                        _topology_terms(obj.get("allowedTopologies")))


def parse_csinode(obj: dict[str, Any]) -> CSINode:
    meta, spec = _mapping(obj.get("metadata")), _mapping(obj.get("spec"))
    limits: dict[str, int] = {}
    for driver in spec.get("drivers") or ():
        count = _mapping(_mapping(driver).get("allocatable")).get("count")
        if isinstance(count, int) and not isinstance(count, bool):
            limits[str(driver.get("name") or "")] = count
    return CSINode(str(meta.get("name") or ""), limits)


@dataclass(frozen=True, slots=True)
class PodVolumes:
    """What Reserve chose for one pod on one node: static volumes to bind (claim key ->
    volume name) and claims to provision there."""

    node: str
    static: tuple[tuple[str, str], ...] = ()
    provision: tuple[str, ...] = ()


class VolumeStore:
    """The storage objects of the cluster, from their watches, plus the volumes the
    scheduler has assumed for pods it is binding. Writers notify waiters (PreBind)."""

    def __init__(self) -> None:
        self.claims: dict[str, Claim] = {}
        self.volumes: dict[str, Volume] = {}
        self.classes: dict[str, StorageClass] = {}
        self.csinodes: dict[str, CSINode] = {}
        # Pod key -> what its Reserve chose; volume name -> the claim key it is assumed for.
        self.assumed: dict[str, PodVolumes] = {}
        self.assumed_volumes: dict[str, str] = {}
        self.changed = threading.Condition()

    def update(self, apply: Callable[[], object]) -> None:
        """Run ``apply`` (a change to the maps) and wake whoever waits for a change."""
        with self.changed:
            apply()
            self.changed.notify_all()

    def wait_until(self, done: Callable[[], bool], timeout: float) -> bool:
        with self.changed:
            return self.changed.wait_for(done, timeout)

    def assume(self, pod_key: str, chosen: PodVolumes) -> None:
        self.forget(pod_key)
        self.assumed[pod_key] = chosen
        for claim_key, volume in chosen.static:
            self.assumed_volumes[volume] = claim_key

    def forget(self, pod_key: str) -> None:
        chosen = self.assumed.pop(pod_key, None)
        for claim_key, volume in chosen.static if chosen else ():
            if self.assumed_volumes.get(volume) == claim_key:
                self.assumed_volumes.pop(volume, None)


def claim_names(pod: Pod) -> Iterator[tuple[str, str]]:
    """(source, claim name) of the pod's claims: ``persistentVolumeClaim`` volumes and the
    claims the ephemeral controller creates for generic ephemeral volumes."""
    for _, source, claim in pod.placement_volumes:
        if source in CLAIM_SOURCES:
            yield source, claim


def has_claims(pod: Pod) -> bool:
    """Cheap for the usual pod, which has no placement volume at all."""
    return bool(pod.placement_volumes) and any(True for _ in claim_names(pod))


def pod_claims(pod: Pod, store: VolumeStore) -> tuple[list[Claim], str]:
    """The pod's claims, or why they cannot be used (a missing claim, one being deleted,
    an ephemeral claim the pod does not own, a claim that cannot be read)."""
    claims: list[Claim] = []
    seen: set[str] = set()
    for source, name in claim_names(pod):
        claim = store.claims.get(f"{pod.namespace}/{name}")
        if claim is None:
            return [], f'persistentvolumeclaim "{name}" not found'
        if claim.deleting:
            return [], f'persistentvolumeclaim "{name}" is being deleted'
        if source == "ephemeral" and claim.controller_uid != pod.uid:
            return [], (f"PVC {claim.key} was not created for pod {pod.key} "
                        "(pod is not owner)")
        if claim.parse_error:
            return [], f'persistentvolumeclaim "{name}": {claim.parse_error}'
        if claim.key not in seen:
            seen.add(claim.key)
            claims.append(claim)
    return claims, ""
