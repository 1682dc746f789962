"""Label-only groups (the first coscheduling plugin, seed 004): no object, two pod labels.

The first member seen fixes the group's min-available and priority class; the record lives
as long as a member does. A member whose min-available disagrees is refused with a message
(``disagreement``) instead of being placed under a count it did not ask for.
"""

from __future__ import annotations

from collections.abc import MutableMapping

from coscheduling.api.membership import LABEL_ONLY, LABEL_ONLY_MIN
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod


def observe(pod: Pod, records: MutableMapping[str, PodGroup]) -> bool:
    """Create the group's record from ``pod`` if it has none; True when one was created."""
    member = pod.membership
    if member.tag != LABEL_ONLY or member.key in records:
        return False
    records[member.key] = PodGroup(
        namespace=pod.namespace, name=member.name, created=pod.created,
        min_member=member.min_available, tag=LABEL_ONLY, api_version="")
    return True


def forget_if_empty(group_key: str, members_left: int,
                    records: MutableMapping[str, PodGroup]) -> bool:
    """Drop a label-only group's record once its last member is gone; True if dropped."""
    record = records.get(group_key)
    if record is None or record.tag != LABEL_ONLY or members_left:
        return False
    del records[group_key]
    return True


def disagreement(pod: Pod, group: PodGroup) -> str:
    """Why ``pod`` may not join ``group`` ("" when it may)."""
    wanted = pod.membership.min_available
    if group.tag != LABEL_ONLY or not wanted or wanted == group.min_member:
        return ""
    return (f"label {LABEL_ONLY_MIN}={wanted} disagrees with the group's min-available "
            f"{group.min_member}, fixed by its first member: relabel the pod")
