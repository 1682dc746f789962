"""The gangs of every producer, in one model.

Each module here reads one kind of group object into PodGroup records keyed by gang key
(``membership`` says which gang a pod belongs to, from whichever marker its producer put
on it) and writes status back in that kind's own shape. The scheduler only ever sees the
records: a gang is a gang whoever made it.

  ours              batch.scheduler.tencent.com/v1 PodGroup, label group.batch.scheduler...
  native            scheduling.k8s.io/v1beta1 PodGroup, spec.schedulingGroup.podGroupName
  schedulerplugins  scheduling.x-k8s.io/v1alpha1 PodGroup, label scheduling.x-k8s.io/pod-group
  volcano           scheduling.volcano.sh/v1beta1 PodGroup, annotation scheduling.k8s.io/group-name
  kubebatch         scheduling.incubator.k8s.io/v1alpha1 PodGroup, the same annotation
  labelonly         no object: labels pod-group.scheduling.sigs.k8s.io/name and min-available
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass
from typing import Any

from coscheduling.api.membership import NO_GROUP, OURS, Membership, membership
from coscheduling.api.podgroups import PodGroup
from coscheduling.groups import kubebatch, native, ours, schedulerplugins, volcano
from coscheduling.groups.source import GroupApi, StatusInput

# Other producers' kinds: watched only while the API server serves them (see discovery).
FOREIGN_APIS: tuple[GroupApi, ...] = (native.API, schedulerplugins.API, volcano.API,
                                      kubebatch.API)
APIS: tuple[GroupApi, ...] = (ours.API, *FOREIGN_APIS)
_BY_VERSION = {api.api_version: api for api in APIS}


def api_for(record: PodGroup) -> GroupApi | None:
    """The kind of object a record was read from (None: a label-only group, no object)."""
    return _BY_VERSION.get(record.api_version)


def apis_for_tag(tag: str) -> tuple[GroupApi, ...]:
    """The kinds of object that can back a gang of this membership tag, in rank order."""
    return tuple(sorted((api for api in APIS if api.tag == tag), key=lambda a: a.rank))




def scheduled_here(record: PodGroup, member_schedulers: Iterable[str],
                   names: Collection[str]) -> bool:
    """Whether this scheduler (running under ``names``) owns the group's status: ours
    always; another producer's kind when a member asks for one of the names, or, before any
    member exists, when the names include the scheduler that kind is made for (another
    scheduler in the cluster may be scheduling the rest, and its status is its own)."""
    api = api_for(record)
    if api is None or api.tag == OURS:
        return True
    schedulers = set(member_schedulers)
    if schedulers:
        return bool(schedulers & set(names))
    return bool(api.scheduler_name) and api.scheduler_name in names


@dataclass(frozen=True, slots=True)
class StatusTarget:
    """A group's status in the shape of its own kind, and where it is written."""

    identity: tuple[str, str]
    status: dict[str, Any]
    path: str
    fallback_path: str = ""


def status_target(made_of: StatusInput | None) -> StatusTarget | None:
    """Where and what to write for a group's status (None: gone, or no object to write)."""
    api = api_for(made_of.group) if made_of is not None else None
    if made_of is None or api is None:
        return None
    group = made_of.group
    fallback = api.object_path(group) if api.status_on_object_fallback else ""
    return StatusTarget((group.api_version, group.uid), api.shape(made_of),
                        api.status_path(group), fallback)


def missing_message(member: Membership, namespace: str) -> str:
    """Why a pod whose group object does not exist waits, naming the marker and the kinds."""
    kinds = " or ".join(api.title for api in apis_for_tag(member.tag))
    if not kinds:  # a derived group whose workload is not known yet (groups.derive)
        return f"waiting for its {member.marker}, which its group is derived from"
    return (f'{kinds} "{namespace}/{member.name}" not found ({member.marker}); '
            "the pod is retried when it is created")


__all__ = [
    "APIS",
    "FOREIGN_APIS",
    "NO_GROUP",
    "GroupApi",
    "Membership",
    "StatusInput",
    "StatusTarget",
    "api_for",
    "apis_for_tag",
    "membership",
    "missing_message",
    "scheduled_here",
    "status_target",
]
