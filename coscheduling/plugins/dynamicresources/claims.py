"""A pod's ResourceClaims, found and checked once per cycle (PreFilter).

A claim comes from ``resourceClaimName``, or from a template through the pod's
``status.resourceClaimStatuses`` once the resource-claim controller created it (and then it
must be owned by the pod). Anything that keeps a claim from being used is said with the
claim and the field named.
"""

from __future__ import annotations

from dataclasses import dataclass

from coscheduling.api.dra import RESERVED_FOR_MAX, DeviceStore, ResourceClaim
from coscheduling.api.pods import Pod
from coscheduling.framework.status import Status

NOT_PLACED = "the pod is not placed"


@dataclass(frozen=True)
class PodClaims:
    """The pod's claims (each once), those already allocated, those still to allocate."""

    claims: tuple[ResourceClaim, ...]
    allocated: tuple[ResourceClaim, ...]
    pending: tuple[ResourceClaim, ...]


def _claim_name(pod: Pod, name: str, claim_name: str, template: str) -> tuple[str, str]:
    """The claim's name, or why it is not known yet."""
    if claim_name:
        return claim_name, ""
    for status_name, generated in pod.claim_statuses:
        if status_name == name:
            return generated, "" if generated else "-"  # "-": the pod needs no claim here
    return "", (f"waiting for the resource claim of spec.resourceClaims[{name!r}] "
                f"(template {template!r}) to be created")


def _check(pod: Pod, claim: ResourceClaim, from_template: bool, plugin: str) -> Status | None:
    where = f'resourceclaim "{claim.name}"'
    if claim.parse_error:
        return Status.unresolvable(f"{where}: {claim.parse_error}", plugin=plugin)
    if claim.unsupported:
        return Status.unresolvable(
            f"{where}: {claim.unsupported} is not implemented by this scheduler; "
            f"{NOT_PLACED}", plugin=plugin)
    if claim.deleting:
        return Status.unschedulable(f"{where} is being deleted", plugin=plugin)
    if from_template and claim.owner_uid != pod.uid:
        return Status.unresolvable(f"{where} was not created for pod {pod.key}",
                                   plugin=plugin)
    if (len(claim.reserved_for) >= RESERVED_FOR_MAX
            and not claim.reserved_for_pod(pod.uid)):
        return Status.unschedulable(f"{where} is in use by {RESERVED_FOR_MAX} pods",
                                    plugin=plugin)
    return None


def pod_claims(pod: Pod, store: DeviceStore, plugin: str) -> tuple[PodClaims | None, Status]:
    """The pod's claims sorted out, or the status that stops the pod."""
    found: dict[str, ResourceClaim] = {}
    for name, claim_name, template in pod.claim_sources:
        if not claim_name and not template:
            return None, Status.unresolvable(
                f"spec.resourceClaims[{name!r}]: needs resourceClaimName or "
                f"resourceClaimTemplateName", plugin=plugin)
        resolved, why = _claim_name(pod, name, claim_name, template)
        if why == "-":
            continue
        if why:
            return None, Status.unschedulable(why, plugin=plugin)
        claim = store.claims.get(f"{pod.namespace}/{resolved}")
        if claim is None:
            return None, Status.unschedulable(f'resourceclaim "{resolved}" not found',
                                              plugin=plugin)
        failed = _check(pod, claim, not claim_name, plugin)
        if failed is not None:
            return None, failed
        found.setdefault(claim.key, claim)
    claims = tuple(found.values())
    allocated = tuple(c for c in claims if store.allocation(c) is not None)
    pending = tuple(c for c in claims if store.allocation(c) is None)
    return PodClaims(claims, allocated, pending), Status()
