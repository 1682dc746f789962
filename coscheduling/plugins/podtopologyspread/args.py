"""PodTopologySpread args: the cluster-level default constraints.

``defaultingType: List`` (the default here) applies ``defaultConstraints`` (empty by
default, so: none) to pods that set no constraint of their own; ``System`` applies
kube-scheduler's built-in defaults (hostname maxSkew 3, zone maxSkew 5, both
ScheduleAnyway). kube-scheduler counts, for default constraints, the pods selected by the
Services, ReplicationControllers, ReplicaSets and StatefulSets that select the pod; this
scheduler does not watch those objects, so it counts the pods that share the pod's
controlling ReplicationController, ReplicaSet or StatefulSet, and applies no default to
pods without one. That is why defaults are off unless asked for.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coscheduling.api.podaffinity import (
    HOSTNAME,
    SpreadConstraint,
    parse_spread_constraint,
)
from coscheduling.config.errors import ConfigError, as_list, as_str, reject_unknown

SYSTEM = "System"
LIST = "List"
ZONE = "topology.kubernetes.io/zone"
OWNER_KINDS = ("ReplicationController", "ReplicaSet", "StatefulSet")

SYSTEM_DEFAULTS = (
    SpreadConstraint(max_skew=3, topology_key=HOSTNAME, hard=False, selector=None),
    SpreadConstraint(max_skew=5, topology_key=ZONE, hard=False, selector=None),
)


@dataclass(frozen=True, slots=True)
class SpreadArgs:
    defaulting_type: str = LIST
    default_constraints: tuple[SpreadConstraint, ...] = ()

    @property
    def defaults(self) -> tuple[SpreadConstraint, ...]:
        return SYSTEM_DEFAULTS if self.defaulting_type == SYSTEM else self.default_constraints


def parse_args(raw: Mapping[str, Any], path: str) -> SpreadArgs:
    reject_unknown(raw, {"defaultingType", "defaultConstraints"}, path)
    defaulting = as_str(raw.get("defaultingType", LIST), f"{path}.defaultingType",
                        choices=(SYSTEM, LIST))
    entries = as_list(raw.get("defaultConstraints"), f"{path}.defaultConstraints")
    if defaulting == SYSTEM and entries:
        raise ConfigError(f"{path}.defaultConstraints",
                          "must be empty when defaultingType is System")
    constraints = []
    for index, entry in enumerate(entries):
        where = f"{path}.defaultConstraints[{index}]"
        if isinstance(entry, Mapping) and "labelSelector" in entry:
            raise ConfigError(f"{where}.labelSelector", "not allowed in default constraints "
                              "(the pods counted are those of the pod's controller)")
        try:
            constraints.append(parse_spread_constraint(dict(entry) if isinstance(
                entry, Mapping) else entry, where, {}))
        except ValueError as err:
            raise ConfigError(where, str(err).removeprefix(f"{where}.")) from err
    return SpreadArgs(defaulting, tuple(constraints))


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """Checked args with the default filled in (a dumped configuration shows it)."""
    parsed = parse_args(raw, path)
    return {"defaultingType": parsed.defaulting_type,
            "defaultConstraints": list(raw.get("defaultConstraints") or [])}
