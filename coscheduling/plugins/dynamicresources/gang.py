"""A gang's device constraints (PodGroup ``spec.deviceConstraints``): every device its
members get (of the named classes) shares one value of an attribute, e.g. one NVLink clique.

The value is not chosen up front. While a gang is placed, a member fits a node when some
value lets its own claims be allocated there *and* lets the claims of every member already
holding room elsewhere be allocated on their nodes. Checked that way member after member,
the values left shrink but never vanish, so when the last member fits, one value suits all.
The first member to reserve devices picks that value (the first that still suits all);
its allocation fixes it for the others.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.dra import EXACT_COUNT, Device, ResourceClaim, Subrequest
from coscheduling.api.podgroups import DeviceConstraint
from coscheduling.plugins.dynamicresources.allocator import Matcher

MAX_CHOICES = 64
"""At most this many value assignments are tried per node (several constraints multiply)."""

Values = tuple[Any, ...]
"""One value per constraint, in the order of spec.deviceConstraints."""


@dataclass
class GangDevices:
    """The gang's constraints as one member's cycle sees them."""

    constraints: tuple[DeviceConstraint, ...]
    fixed: dict[int, Any] = field(default_factory=dict)  # constraint -> value mates got
    mates: dict[str, list[ResourceClaim]] = field(default_factory=dict)  # node -> claims
    claim_keys: set[str] = field(default_factory=set)  # every claim the gang's members use
    # (node, values) -> whether the mates holding room on that node fit with those values.
    checked: dict[tuple[str, Values], bool] = field(default_factory=dict)
    # For the first member placed: the values with free devices enough for the whole gang.
    enough: dict[int, set[Any]] = field(default_factory=dict)

    def choices(self, devices: Sequence[Device]) -> list[Values]:
        """Value assignments to try for a node offering ``devices``: a fixed value, else
        every value of the attribute found there (sorted, so every member tries the same
        order)."""
        options = []
        for index, constraint in enumerate(self.constraints):
            if index in self.fixed:
                options.append([self.fixed[index]])
                continue
            seen = {hashable_value(d.attribute(constraint.attribute)) for d in devices}
            seen.discard(None)
            if index in self.enough:
                seen &= self.enough[index]
            # None: no device here may serve a request the constraint covers.
            options.append(sorted(seen, key=repr) or [None])
        return list(itertools.islice(itertools.product(*options), MAX_CHOICES))

    def restrict(self, matches: Matcher, values: Values) -> Matcher:
        """``matches``, and for the gang's claims the devices constraints cover must have
        ``values``."""
        constraints, keys = self.constraints, self.claim_keys

        def restricted(claim: ResourceClaim, sub: Subrequest, device: Device) -> bool:
            if not matches(claim, sub, device):
                return False
            if claim.key not in keys:
                return True
            for index, constraint in enumerate(constraints):
                if constraint.applies(sub.device_class):
                    value = hashable_value(device.attribute(constraint.attribute))
                    if value is None or value != values[index]:
                        return False
            return True
        return restricted


def hashable_value(value: Any) -> Any:
    """Attribute values as set members (a version is a tagged dict)."""
    if isinstance(value, dict):
        return tuple(sorted((k, hashable_value(v)) for k, v in value.items()))
    if isinstance(value, list):
        return tuple(hashable_value(v) for v in value)
    return value


def class_of(claim: ResourceClaim, request: str) -> str:
    """The DeviceClass an allocation result's (sub)request names."""
    for item in claim.requests:
        for sub in item.alternatives:
            if sub.name == request:
                return sub.device_class
    return ""


def fix_values(gang: GangDevices, claims: Iterable[ResourceClaim],
               allocations: Mapping[str, Any], devices: Mapping[Any, Device]) -> None:
    """Record the values the devices already given to ``claims`` (allocated or assumed)
    have: the gang is held to them."""
    for claim in claims:
        allocation = allocations.get(claim.key)
        for result in allocation.results if allocation is not None else ():
            device = devices.get(result.device_id)
            if device is None:
                continue
            for index, constraint in enumerate(gang.constraints):
                if index not in gang.fixed and constraint.applies(
                        class_of(claim, result.request)):
                    value = hashable_value(device.attribute(constraint.attribute))
                    if value is not None:
                        gang.fixed[index] = value


def covered_count(constraint: DeviceConstraint, claims: Iterable[ResourceClaim]) -> int | None:
    """How many devices ``claims`` ask for that ``constraint`` covers (first alternatives);
    None when a request takes every matching device (its count is the node's)."""
    total = 0
    for claim in claims:
        for item in claim.requests:
            sub = item.alternatives[0]
            if not constraint.applies(sub.device_class):
                continue
            if sub.mode != EXACT_COUNT:
                return None
            total += sub.count
    return total
