"""NodeResourcesFit args: validation, defaults, and the typed form the plugin runs on.

Accepted shape (the ``NodeResourcesFitArgs`` of kube-scheduler's v1 config API)::

    scoringStrategy:
      type: LeastAllocated | MostAllocated | RequestedToCapacityRatio  # default LeastAllocated
      resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]  # weight 1..100
      requestedToCapacityRatio:          # only with type RequestedToCapacityRatio
        shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
    ignoredResources: [example.com/foo]  # extended resources Filter does not check
    ignoredResourceGroups: [example.com] # ... by the part before the "/"

Shape scores use the v1 scale 0..10 and are multiplied by 10 into node scores 0..100. The
seed's older v1alpha1 config wrote ``score: 100`` for the top point; write ``10`` here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from coscheduling.api.quantity import CPU, MEMORY, PODS
from coscheduling.config.errors import (
    ConfigError,
    as_int,
    as_list,
    as_mapping,
    as_str,
    reject_unknown,
)

LEAST_ALLOCATED = "LeastAllocated"
MOST_ALLOCATED = "MostAllocated"
REQUESTED_TO_CAPACITY_RATIO = "RequestedToCapacityRatio"
STRATEGIES = (LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO)

MIN_WEIGHT = 1
MAX_WEIGHT = 100
MAX_UTILIZATION = 100
MAX_SHAPE_SCORE = 10
"""Shape scores are 0..10; the plugin scales them by MAX_NODE_SCORE // MAX_SHAPE_SCORE."""

DEFAULT_RESOURCES: tuple[tuple[str, int], ...] = ((CPU, 1), (MEMORY, 1))
DEFAULT_SHAPE: tuple[tuple[int, int], ...] = ((0, 0), (MAX_UTILIZATION, MAX_SHAPE_SCORE))

_TOP_KEYS = {"scoringStrategy", "ignoredResources", "ignoredResourceGroups"}
_STRATEGY_KEYS = {"type", "resources", "requestedToCapacityRatio"}


@dataclass(frozen=True, slots=True)
class FitArgs:
    """Validated args: what the plugin reads at construction."""

    strategy: str = LEAST_ALLOCATED
    resources: tuple[tuple[str, int], ...] = DEFAULT_RESOURCES
    shape: tuple[tuple[int, int], ...] = DEFAULT_SHAPE
    ignored_resources: frozenset[str] = frozenset()
    ignored_groups: frozenset[str] = frozenset()

    def to_mapping(self) -> dict[str, Any]:
        """The args with every default written out, as the config loader keeps them."""
        strategy: dict[str, Any] = {
            "type": self.strategy,
            "resources": [{"name": n, "weight": w} for n, w in self.resources],
        }
        if self.strategy == REQUESTED_TO_CAPACITY_RATIO:
            strategy["requestedToCapacityRatio"] = {
                "shape": [{"utilization": u, "score": s} for u, s in self.shape]
            }
        return {
            "scoringStrategy": strategy,
            "ignoredResources": sorted(self.ignored_resources),
            "ignoredResourceGroups": sorted(self.ignored_groups),
        }


def _join(path: str, field: str) -> str:
    return f"{path}.{field}" if path else field


def _resources(raw: object, path: str) -> tuple[tuple[str, int], ...]:
    if raw is None:
        return DEFAULT_RESOURCES
    items = as_list(raw, path)
    if not items:
        raise ConfigError(path, "must list at least one resource")
    seen: set[str] = set()
    out = []
    for index, item in enumerate(items):
        item_path = f"{path}[{index}]"
        entry = as_mapping(item, item_path)
        reject_unknown(entry, {"name", "weight"}, item_path)
        if "name" not in entry:
            raise ConfigError(_join(item_path, "name"), "is required")
        name = as_str(entry["name"], _join(item_path, "name"))
        if not name:
            raise ConfigError(_join(item_path, "name"), "must not be empty")
        if name == PODS:
            raise ConfigError(_join(item_path, "name"), "pods is counted, not scored")
        if name in seen:
            raise ConfigError(_join(item_path, "name"), f"duplicate resource {name!r}")
        seen.add(name)
        weight = entry.get("weight")
        weight = MIN_WEIGHT if weight is None else as_int(
            weight, _join(item_path, "weight"), minimum=MIN_WEIGHT, maximum=MAX_WEIGHT
        )
        out.append((name, weight))
    return tuple(out)


def _shape(raw: object, path: str) -> tuple[tuple[int, int], ...]:
    ratio = as_mapping(raw, path)
    reject_unknown(ratio, {"shape"}, path)
    shape_path = _join(path, "shape")
    if ratio.get("shape") is None:
        return DEFAULT_SHAPE
    points = as_list(ratio["shape"], shape_path)
    if not points:
        raise ConfigError(shape_path, "must have at least one point")
    out: list[tuple[int, int]] = []
    for index, item in enumerate(points):
        point_path = f"{shape_path}[{index}]"
        point = as_mapping(item, point_path)
        reject_unknown(point, {"utilization", "score"}, point_path)
        for key in ("utilization", "score"):
            if key not in point:
                raise ConfigError(_join(point_path, key), "is required")
        utilization = as_int(
            point["utilization"], _join(point_path, "utilization"),
            minimum=0, maximum=MAX_UTILIZATION,
        )
        score = as_int(point["score"], _join(point_path, "score"), minimum=0)
        if score > MAX_SHAPE_SCORE:
            raise ConfigError(
                _join(point_path, "score"),
                f"must be <= {MAX_SHAPE_SCORE}, got {score} (shape scores are 0..10, "
                "scaled x10 to node scores 0..100)",
            )
        if out and utilization <= out[-1][0]:
            raise ConfigError(
                _join(point_path, "utilization"),
                f"must be greater than the previous point's {out[-1][0]}, got {utilization}",
            )
        out.append((utilization, score))
    return tuple(out)


def _names(raw: object, path: str, *, group: bool) -> frozenset[str]:
    out = set()
    for index, item in enumerate(as_list(raw, path)):
        name = as_str(item, f"{path}[{index}]")
        if not name:
            raise ConfigError(f"{path}[{index}]", "must not be empty")
        if group and "/" in name:
            raise ConfigError(f"{path}[{index}]", f"a resource group has no '/', got {name!r}")
        out.add(name)
    return frozenset(out)


def parse_args(raw: Mapping[str, Any] | None, path: str = "") -> FitArgs:
    """Check ``raw`` and fill in defaults; errors are ConfigError naming the field."""
    args = as_mapping(raw, path)
    reject_unknown(args, _TOP_KEYS, path)
    strategy_path = _join(path, "scoringStrategy")
    strategy = as_mapping(args.get("scoringStrategy"), strategy_path)
    reject_unknown(strategy, _STRATEGY_KEYS, strategy_path)
    kind = strategy.get("type")
    kind = LEAST_ALLOCATED if kind is None else as_str(
        kind, _join(strategy_path, "type"), choices=STRATEGIES
    )
    resources = _resources(strategy.get("resources"), _join(strategy_path, "resources"))
    ratio_path = _join(strategy_path, "requestedToCapacityRatio")
    if kind == REQUESTED_TO_CAPACITY_RATIO:
        shape = _shape(strategy.get("requestedToCapacityRatio"), ratio_path)
    else:
        if strategy.get("requestedToCapacityRatio") is not None:
            raise ConfigError(ratio_path, f"only valid with type {REQUESTED_TO_CAPACITY_RATIO}")
        shape = DEFAULT_SHAPE
    return FitArgs(
        strategy=kind,
        resources=resources,
        shape=shape,
        ignored_resources=_names(
            args.get("ignoredResources"), _join(path, "ignoredResources"), group=False
        ),
        ignored_groups=_names(
            args.get("ignoredResourceGroups"), _join(path, "ignoredResourceGroups"), group=True
        ),
    )


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """The registry's ArgsValidator: the args with defaults filled in."""
    return parse_args(raw, path).to_mapping()
