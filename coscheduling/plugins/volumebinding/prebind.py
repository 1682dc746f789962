"""PreBind's work: make the API server bind what Reserve chose, wait for it, or undo it.

A static volume gets the claim in its ``spec.claimRef`` (the PV binder controller then
binds both sides); a claim to provision gets the ``volume.kubernetes.io/selected-node``
annotation (its provisioner creates the volume there). Then the claims must turn Bound
within the timeout. On any failure what was written is taken back, if it still stands, so
the next attempt (maybe on another node) starts clean.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from coscheduling.api.volumes import SELECTED_NODE, PodVolumes, VolumeStore
from coscheduling.cluster.client import ApiError, q
from coscheduling.framework.handle import ApiWriter

log = logging.getLogger(__name__)

Undo = Callable[[ApiWriter], None]


def _claim_path(key: str) -> str:
    namespace, name = key.split("/", 1)
    return f"/api/v1/namespaces/{q(namespace)}/persistentvolumeclaims/{q(name)}"


def _bind_volume(client: ApiWriter, store: VolumeStore, claim_key: str,
                 volume_name: str) -> Undo | None:
    """Point the volume's claimRef at the claim (guarded by the resourceVersion we read)."""
    claim, volume = store.claims.get(claim_key), store.volumes.get(volume_name)
    if claim is None or volume is None:
        raise ApiError(404, f"claim {claim_key} or volume {volume_name} is gone")
    if volume.reserved_for(claim):
        return None  # already pointing at it: nothing of ours to undo
    body: dict[str, Any] = {
        "metadata": {"resourceVersion": volume.resource_version},
        "spec": {"claimRef": {"kind": "PersistentVolumeClaim", "apiVersion": "v1",
                              "namespace": claim.namespace, "name": claim.name,
                              "uid": claim.uid}},
    }
    client.patch(f"/api/v1/persistentvolumes/{q(volume_name)}", body)

    def undo(undo_client: ApiWriter) -> None:
        current, bound = store.volumes.get(volume_name), store.claims.get(claim_key)
        if current is not None and current.reserved_for(claim) and not (
                bound is not None and bound.bound):
            undo_client.patch(f"/api/v1/persistentvolumes/{q(volume_name)}",
                              {"spec": {"claimRef": None}})
    return undo


def _select_node(client: ApiWriter, store: VolumeStore, claim_key: str,
                 node: str) -> Undo | None:
    claim = store.claims.get(claim_key)
    if claim is None:
        raise ApiError(404, f"claim {claim_key} is gone")
    if claim.selected_node == node:
        return None
    client.patch(_claim_path(claim_key), {"metadata": {"annotations": {SELECTED_NODE: node}}})

    def undo(undo_client: ApiWriter) -> None:
        current = store.claims.get(claim_key)
        if current is not None and not current.bound and current.selected_node == node:
            undo_client.patch(_claim_path(claim_key),
                              {"metadata": {"annotations": {SELECTED_NODE: None}}})
    return undo


def bind_and_wait(client: ApiWriter, store: VolumeStore, chosen: PodVolumes,
                  timeout: float) -> str:
    """Write the bindings, wait until every claim is Bound; "" on success, else why not
    (after undoing what was written)."""
    undos: list[Undo] = []
    keys = [key for key, _ in chosen.static] + list(chosen.provision)
    try:
        for claim_key, volume_name in chosen.static:
            undo = _bind_volume(client, store, claim_key, volume_name)
            if undo is not None:
                undos.append(undo)
        for claim_key in chosen.provision:
            undo = _select_node(client, store, claim_key, chosen.node)
            if undo is not None:
                undos.append(undo)
        failure = [""]

        def settled() -> bool:
            for key in keys:
                claim = store.claims.get(key)
                if claim is None or claim.deleting:
                    failure[0] = f"persistentvolumeclaim {key} was deleted while binding"
                    return True
                if not claim.bound:
                    return False
            # The volumes' own records must show their claims too (a separate watch), or
            # once the assumption is dropped another pod could be offered them.
            return all((v := store.volumes.get(name)) is not None and v.claim_ref is not None
                       for _, name in chosen.static)

        if not store.wait_until(settled, timeout):
            failure[0] = (f"binding volumes for {', '.join(keys)} timed out after "
                          f"{timeout:g}s")
        if not failure[0]:
            return ""
        why = failure[0]
    except ApiError as err:
        why = f"binding volumes: {err}"
    for undo in reversed(undos):
        try:
            undo(client)
        except ApiError as err:
            log.warning("undoing a volume binding failed: %s", err)
    return why
