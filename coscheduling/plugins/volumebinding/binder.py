"""Which volumes a pod's claims get on one node: the matching rules of kube-scheduler's
volume binder, over the :class:`VolumeStore` (facts from its semantics, not its code).

A bound claim needs its volume's node affinity to admit the node. An unbound claim of a
WaitForFirstConsumer class takes the smallest available static volume that fits it there,
or else is provisioned there if its class has a provisioner whose allowed topologies admit
the node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from coscheduling.api.volumes import (
    WAIT_FOR_FIRST_CONSUMER,
    Claim,
    PodVolumes,
    Volume,
    VolumeStore,
)

UNBOUND_IMMEDIATE = "pod has unbound immediate PersistentVolumeClaims"
NODE_CONFLICT = "node(s) had volume node affinity conflict"
BIND_CONFLICT = "node(s) didn't find available persistent volumes to bind"
VOLUME_MISSING = "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)"


@dataclass(frozen=True, slots=True)
class PodClaims:
    """A pod's claims sorted out at PreFilter: the volumes of its bound claims, and its
    unbound claims that wait for a node (smallest request first, as upstream tries them)."""

    bound: tuple[Volume, ...] = ()
    to_bind: tuple[Claim, ...] = ()


def sort_claims(claims: Sequence[Claim], store: VolumeStore) -> tuple[PodClaims | None, str]:
    """Split claims into bound and to-bind, or say why the pod cannot be placed anywhere."""
    bound: list[Volume] = []
    to_bind: list[Claim] = []
    for claim in claims:
        if claim.volume_name:
            volume = store.volumes.get(claim.volume_name)
            if volume is None:
                return None, VOLUME_MISSING
            if volume.parse_error:
                return None, f"persistentvolume {volume.name!r}: {volume.parse_error}"
            bound.append(volume)
            continue
        storage_class = store.classes.get(claim.storage_class)
        if storage_class is None or storage_class.binding_mode != WAIT_FOR_FIRST_CONSUMER:
            return None, UNBOUND_IMMEDIATE
        to_bind.append(claim)
    to_bind.sort(key=lambda c: c.request)
    return PodClaims(tuple(bound), tuple(to_bind)), ""


def _matches(volume: Volume, claim: Claim) -> bool:
    """Whether an available static volume can satisfy the claim (node aside)."""
    if volume.storage_class != claim.storage_class or volume.volume_mode != claim.volume_mode:
        return False
    if not claim.access_modes <= volume.access_modes or volume.capacity < claim.request:
        return False
    return claim.selector is None or claim.selector.matches(volume.labels)


def find_volume(claim: Claim, store: VolumeStore, labels: Mapping[str, str], node: str,
                taken: set[str]) -> Volume | None:
    """The volume ``claim`` would bind to on ``node``: one already reserved for it (its
    claimRef names it), else the smallest available match; volumes in ``taken`` or assumed
    for another claim are not offered."""
    best: Volume | None = None
    for volume in store.volumes.values():
        if volume.deleting or volume.parse_error or volume.name in taken:
            continue
        if volume.claim_ref is not None:
            if volume.reserved_for(claim) and volume.fits_node(labels, node):
                return volume
            continue
        assumed_for = store.assumed_volumes.get(volume.name)
        if volume.phase != "Available" or assumed_for not in (None, claim.key):
            continue
        if not _matches(volume, claim) or not volume.fits_node(labels, node):
            continue
        if best is None or volume.capacity < best.capacity:
            best = volume
    return best


def _provisionable(claim: Claim, store: VolumeStore, labels: Mapping[str, str],
                   node: str) -> bool:
    if claim.selected_node and claim.selected_node != node:
        return False  # already promised to another node
    storage_class = store.classes.get(claim.storage_class)
    return storage_class is not None and storage_class.provisions_on(labels, node)


def bindings_on(claims: PodClaims, store: VolumeStore, labels: Mapping[str, str],
                node: str) -> tuple[PodVolumes | None, str]:
    """What the pod's claims get on ``node``, or the reason they cannot be met there."""
    for volume in claims.bound:
        if not volume.fits_node(labels, node):
            return None, NODE_CONFLICT
    static: list[tuple[str, str]] = []
    provision: list[str] = []
    taken: set[str] = set()
    for claim in claims.to_bind:
        match = find_volume(claim, store, labels, node, taken)
        if match is not None:
            taken.add(match.name)
            static.append((claim.key, match.name))
        elif _provisionable(claim, store, labels, node):
            provision.append(claim.key)
        else:
            return None, BIND_CONFLICT
    return PodVolumes(node, tuple(static), tuple(provision)), ""
