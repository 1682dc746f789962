"""PreBind's writes, as kube-scheduler makes them: the finalizer that keeps an allocated
claim from vanishing under its pod, then ``status.allocation`` (when this scheduler made it)
together with the pod in ``status.reservedFor``. Each write is guarded by the
resourceVersion just read, and re-read and retried on a conflict (gang members sharing a
claim reserve it at the same time). Unreserve takes back what PreBind wrote."""

from __future__ import annotations

from typing import Any

from coscheduling.api.dra import API_PATH, FINALIZER, DeviceStore, ResourceClaim
from coscheduling.api.pods import Pod
from coscheduling.cluster.client import ApiError, q
from coscheduling.framework.handle import ApiWriter

ATTEMPTS = 5


def claim_path(claim: ResourceClaim) -> str:
    return f"{API_PATH}/namespaces/{q(claim.namespace)}/resourceclaims/{q(claim.name)}"


def _entry(pod: Pod) -> dict[str, str]:
    return {"resource": "pods", "name": pod.name, "uid": pod.uid}


def _reserve_once(client: ApiWriter, claim: ResourceClaim, pod: Pod,
                  allocation: Any) -> str:
    """One read-modify-write; raises ApiError (a conflict is retried by the caller)."""
    current = client.get(claim_path(claim))
    meta, status = current.get("metadata") or {}, current.get("status") or {}
    if meta.get("uid") != claim.uid:
        return f'resourceclaim "{claim.name}" was replaced'
    reserved = list(status.get("reservedFor") or [])
    if any(r.get("uid") == pod.uid for r in reserved) and status.get("allocation"):
        return ""
    body: dict[str, Any] = {"status": {"reservedFor": [*reserved, _entry(pod)]}}
    if not status.get("allocation"):
        if allocation is None:
            return f'resourceclaim "{claim.name}" is no longer allocated'
        finalizers = list(meta.get("finalizers") or [])
        if FINALIZER not in finalizers:
            current = client.patch(claim_path(claim), {"metadata": {
                "finalizers": [*finalizers, FINALIZER],
                "resourceVersion": meta.get("resourceVersion")}})
            meta = current.get("metadata") or {}
        body["status"]["allocation"] = allocation
    body["metadata"] = {"resourceVersion": meta.get("resourceVersion")}
    client.patch(f"{claim_path(claim)}/status", body)
    return ""


def reserve_claim(client: ApiWriter, claim: ResourceClaim, pod: Pod, allocation: Any) -> str:
    """Allocate (if ``allocation``) and reserve ``claim`` for ``pod``; "" or why not."""
    for _ in range(ATTEMPTS):
        try:
            return _reserve_once(client, claim, pod, allocation)
        except ApiError as err:
            if not err.conflict:
                return f'resourceclaim "{claim.name}": {err}'
    return f'resourceclaim "{claim.name}": still conflicting after {ATTEMPTS} attempts'


def unreserve_claim(client: ApiWriter, claim: ResourceClaim, pod: Pod,
                    deallocate: bool) -> None:
    """Take ``pod`` out of the claim's reservedFor; when nobody is left and this scheduler
    allocated it in this cycle (``deallocate``), the allocation and finalizer go too."""
    for _ in range(ATTEMPTS):
        try:
            current = client.get(claim_path(claim))
            meta, status = current.get("metadata") or {}, current.get("status") or {}
            reserved = [r for r in status.get("reservedFor") or [] if r.get("uid") != pod.uid]
            body: dict[str, Any] = {"metadata": {"resourceVersion": meta.get("resourceVersion")},
                                    "status": {"reservedFor": reserved or None}}
            if deallocate and not reserved:
                body["status"]["allocation"] = None
            current = client.patch(f"{claim_path(claim)}/status", body)
            if deallocate and not reserved:
                _drop_finalizer(client, claim, current.get("metadata") or {})
            return
        except ApiError as err:
            if err.not_found or not err.conflict:
                return


def _drop_finalizer(client: ApiWriter, claim: ResourceClaim, meta: dict[str, Any]) -> None:
    finalizers = [f for f in meta.get("finalizers") or [] if f != FINALIZER]
    client.patch(claim_path(claim), {"metadata": {
        "finalizers": finalizers or None, "resourceVersion": meta.get("resourceVersion")}})


def settled(store: DeviceStore, claim: ResourceClaim) -> bool:
    current = store.claims.get(claim.key)
    return current is not None and current.allocation is not None
