"""What every kind of group object has in common: where it is served, how its objects are
read into the one gang model (PodGroup records), and how status is written back in its own
shape."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from coscheduling.api.podgroups import PodGroup


@dataclass(frozen=True, slots=True)
class StatusInput:
    """What a group's status is made from: our own status of the gang (the shape of
    the gang plugin's status), and whether the group's minResources fit the free room
    of the cluster now (for the kinds that report admission before pods exist)."""

    group: PodGroup
    status: dict[str, Any]
    fits: bool = True
    why_not: str = ""  # when it does not fit: what is short


@dataclass(frozen=True, slots=True)
class GroupApi:
    """One served kind of group object."""

    title: str  # for messages, e.g. "Volcano PodGroup (scheduling.volcano.sh/v1beta1)"
    group: str
    version: str
    tag: str  # the membership tag whose gangs these objects describe
    parse: Callable[[dict[str, Any]], PodGroup]
    shape: Callable[[StatusInput], dict[str, Any]]
    plural: str = "podgroups"
    # Among the kinds that share a tag, the lower rank wins when both objects exist.
    rank: int = 0
    # Whether the shape reads StatusInput.fits (costs a pass over the nodes).
    reports_admission: bool = False
    # The scheduler that producer's groups are made for (e.g. "volcano"): a group without
    # members yet is this scheduler's to admit only if it runs under that name too.
    scheduler_name: str = ""
    # The producer's own CRD may lack the status subresource (Volcano's does): status is
    # then written on the object itself, which deploy/11-rbac-status-on-object.yaml allows.
    status_on_object_fallback: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    @property
    def path(self) -> str:
        return f"/apis/{self.group}/{self.version}/{self.plural}"

    def object_path(self, record: PodGroup) -> str:
        namespace, name = quote(record.namespace, safe=""), quote(record.name, safe="")
        return f"/apis/{self.group}/{self.version}/namespaces/{namespace}/{self.plural}/{name}"

    def status_path(self, record: PodGroup) -> str:
        return f"{self.object_path(record)}/status"


def pick(status: dict[str, Any], *fields: str) -> dict[str, Any]:
    """The ``fields`` of our status that a kind's schema also has."""
    return {name: status[name] for name in fields if name in status}
