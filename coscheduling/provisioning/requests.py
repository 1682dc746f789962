"""ProvisioningRequest objects (``autoscaling.x-k8s.io/v1``) for a gang, and their state.

Pure functions: what to write for a gang's missing members and what a request's
conditions say. The API calls are :mod:`coscheduling.provisioning.scaleup`'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from coscheduling.api.times import parse_rfc3339

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod

API = "autoscaling.x-k8s.io/v1"
PLURAL = "provisioningrequests"
KIND = "ProvisioningRequest"
ATOMIC_CLASS = "best-effort-atomic-scale-up.autoscaling.x-k8s.io"
CHECK_CAPACITY_CLASS = "check-capacity.autoscaling.x-k8s.io"
# The autoscaler matches a pending pod to a request by both annotations (one alone is not
# enough): such pods are left to their request instead of scaling up on their own.
CONSUME_ANNOTATION = "autoscaling.x-k8s.io/consume-provisioning-request"
CLASS_ANNOTATION = "autoscaling.x-k8s.io/provisioning-class-name"
# Who made a request or a PodTemplate: the gang's key.
GANG_LABEL = "batch.scheduler.tencent.com/scale-up-for"

# The request's states, from its conditions (the first true one in this order wins).
PENDING = "Pending"
ACCEPTED = "Accepted"
PROVISIONED = "Provisioned"
FAILED = "Failed"
BOOKING_EXPIRED = "BookingExpired"
CAPACITY_REVOKED = "CapacityRevoked"
# Ours, not the autoscaler's: the gang was placed before its request was provisioned, so
# the request was deleted (the autoscaler's way to cancel one).
WITHDRAWN = "Withdrawn"
_BY_PRIORITY = (FAILED, CAPACITY_REVOKED, BOOKING_EXPIRED, PROVISIONED, ACCEPTED)
# States after which the request is of no more use: it is deleted and asked again.
ENDED = frozenset((FAILED, CAPACITY_REVOKED, BOOKING_EXPIRED))

# Pod spec fields that belong to one placed pod, not to its shape.
_PER_POD_SPEC = ("nodeName", "hostname", "subdomain")


@dataclass(frozen=True)
class RequestState:
    """What a request's conditions say: the state, why, and since when (epoch seconds)."""

    state: str = PENDING
    reason: str = ""
    message: str = ""
    since: float = 0.0


def request_state(obj: Mapping[str, Any]) -> RequestState:
    """The state of a ProvisioningRequest from its status.conditions."""
    conditions = {c.get("type"): c for c in (obj.get("status") or {}).get("conditions") or ()
                  if isinstance(c, Mapping)}
    for kind in _BY_PRIORITY:
        condition = conditions.get(kind)
        if condition is not None and condition.get("status") == "True":
            stamp = condition.get("lastTransitionTime") or ""
            return RequestState(kind, str(condition.get("reason") or ""),
                                str(condition.get("message") or ""),
                                parse_rfc3339(stamp) if stamp else 0.0)
    return RequestState()


def shape_of(pod: Pod) -> tuple[Any, ...]:
    """Members of one shape share a PodTemplate: what the autoscaler's simulation reads."""
    return (tuple(sorted(pod.requests.items())), tuple(sorted(pod.node_selector.items())),
            pod.tolerations, pod.affinity_terms)


def pod_sets(members: Iterable[Pod]) -> list[tuple[Pod, int]]:
    """One (representative, count) per shape, in the members' order."""
    counts: dict[tuple[Any, ...], list[Any]] = {}
    for pod in members:
        found = counts.setdefault(shape_of(pod), [pod, 0])
        found[1] += 1
    return [(pod, count) for pod, count in counts.values()]


def request_name(group: PodGroup, attempt: int) -> str:
    """One name per attempt, so a retried request never meets its deleted predecessor."""
    return f"{group.name}-gang-{attempt}"[:253]


def owner_reference(group: PodGroup) -> dict[str, Any]:
    """The PodGroup owns its request and templates: deleting the gang deletes them."""
    return {"apiVersion": group.api_version, "kind": "PodGroup", "name": group.name,
            "uid": group.uid, "blockOwnerDeletion": False}


def template_body(name: str, group: PodGroup, raw_pod: Mapping[str, Any]) -> dict[str, Any]:
    """A PodTemplate of one member's shape (its labels and spec, without placement)."""
    meta = raw_pod.get("metadata") or {}
    spec = {k: v for k, v in (raw_pod.get("spec") or {}).items() if k not in _PER_POD_SPEC}
    return {
        "apiVersion": "v1", "kind": "PodTemplate",
        "metadata": {"name": name, "namespace": group.namespace,
                     "labels": {GANG_LABEL: group.name},
                     "ownerReferences": [owner_reference(group)]},
        "template": {"metadata": {"labels": dict(meta.get("labels") or {})}, "spec": spec},
    }


def request_body(name: str, group: PodGroup, class_name: str,
                 sets: Sequence[tuple[str, int]]) -> dict[str, Any]:
    """The request: one podSet per (template name, count)."""
    return {
        "apiVersion": API, "kind": KIND,
        "metadata": {"name": name, "namespace": group.namespace,
                     "labels": {GANG_LABEL: group.name},
                     "ownerReferences": [owner_reference(group)]},
        "spec": {"provisioningClassName": class_name,
                 "podSets": [{"podTemplateRef": {"name": template}, "count": count}
                             for template, count in sets]},
    }


def consume_patch(name: str, class_name: str) -> dict[str, Any]:
    """The members' annotations that tie them to the request."""
    return {"metadata": {"annotations": {CONSUME_ANNOTATION: name,
                                         CLASS_ANNOTATION: class_name}}}


def requests_path(namespace: str, name: str = "") -> str:
    base = f"/apis/{API}/namespaces/{namespace}/{PLURAL}"
    return f"{base}/{name}" if name else base
