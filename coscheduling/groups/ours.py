"""Our own PodGroups (batch.scheduler.tencent.com/v1): status written as it is built."""

from __future__ import annotations

from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.membership import OURS
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.groups.source import GroupApi, StatusInput


def _shape(status: StatusInput) -> dict[str, Any]:
    """As built; a reservation that ended is removed (null, in the merge patch)."""
    return {"reservation": None, **status.status}


API = GroupApi(title=f"PodGroup ({GROUP_API}/{GROUP_VERSION})", group=GROUP_API,
               version=GROUP_VERSION, tag=OURS, parse=parse_podgroup, shape=_shape)
