"""When a gang's members must be searched for, not placed one after another.

Members placed one after another, each on the node its own cycle would pick, fit exactly
when the members are alike: nodes are then interchangeable between them. Members that are
not alike and use devices (dynamic resource allocation) can miss a placement that exists
that way, so for them the gang's cycle (:mod:`coscheduling.core.gangcycle`) searches over
node choices. Which gangs need that is the plugin's call, made here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod


def _kind(pod: Pod) -> tuple[object, ...]:
    """What makes members interchangeable: equal requests and claims from the same
    templates (a claim named directly is one object, shared or not: never alike)."""
    sources = tuple(template or f"claim:{name}" for _, name, template in pod.claim_sources)
    return (tuple(sorted(pod.requests.items())), sources)


def needs_search(group: PodGroup, members: Sequence[Pod]) -> bool:
    """Whether placing members one after another might miss a placement that exists:
    members use devices and are not alike, or the gang's devices must share a value (the
    first member's node picks it)."""
    if not any(m.claim_sources for m in members):
        return False
    return bool(group.device_constraints) or len({_kind(m) for m in members}) > 1
