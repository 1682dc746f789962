"""Topology-aware gang placement: the domains (nodes sharing a value of a label key) a gang
may go to, how well it fits each, and why none can hold it.

A gang is one job whose members talk to each other, so ``spec.topology`` asks for all of it
in one rack, or failing that one zone. The core's gang cycle tries each domain with the same
per-node admission a gang always gets (every filter, member by member, on top of what is used
and claimed); this module only enumerates and measures, as the plugin's policy.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coscheduling.api.quantity import add_into, format_units

if TYPE_CHECKING:
    from coscheduling.api.podgroups import Topology
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache


@dataclass(frozen=True, slots=True)
class Domain:
    """The nodes labelled ``key=value``."""

    key: str
    value: str

    def __str__(self) -> str:
        return f"{self.key}={self.value}"


def domains(cache: SchedulerCache, key: str, placed: Iterable[str]) -> dict[str, list[str]]:
    """Domains of ``key`` the gang may use: label value -> node names, in node order.

    Nodes without the label belong to no domain. When members already sit on ``placed``
    nodes, only the one domain that holds all of them is left (none if they span several
    or sit on a node without the label): a gang is never split across domains.
    """
    by_value: dict[str, list[str]] = {}
    for info in cache.nodes():
        node = info.node
        if node is None:
            continue
        value = node.labels.get(key)
        if value is not None:
            by_value.setdefault(value, []).append(info.name)
    values = set()
    for name in placed:
        holder = cache.node(name)
        values.add(holder.node.labels.get(key) if holder is not None and holder.node else None)
    if not values:
        return by_value
    if len(values) > 1 or None in values:
        return {}
    value = values.pop()
    return {value: by_value[value]} if value in by_value else {}


def total_request(members: Iterable[Pod]) -> dict[str, int]:
    """What the members ask for together (the resources the fit is measured in)."""
    need: dict[str, int] = {}
    for member in members:
        add_into(need, member.requests)
    return need


def free_room(cache: SchedulerCache, names: Iterable[str],
              resources: Iterable[str]) -> tuple[dict[str, int], dict[str, int]]:
    """(free, allocatable) of ``resources`` summed over the nodes ``names``."""
    wanted = list(resources)
    free = dict.fromkeys(wanted, 0)
    allocatable = dict.fromkeys(wanted, 0)
    for name in names:
        info = cache.node(name)
        if info is None or info.node is None:
            continue
        for resource in wanted:
            amount = info.node.allocatable.get(resource, 0)
            allocatable[resource] += amount
            free[resource] += max(0, amount - info.used(resource))
    return free, allocatable


def leftover(cache: SchedulerCache, names: Iterable[str], need: Mapping[str, int]) -> float:
    """How much room a domain keeps once the gang is in (fractions of its allocatable, added
    over the gang's resources): the smallest leftover is the tightest, best fit."""
    free, allocatable = free_room(cache, names, need)
    return sum(free[r] / allocatable[r] for r in need if allocatable[r] > 0)


def largest(cache: SchedulerCache, options: Mapping[str, list[str]],
            need: Mapping[str, int]) -> tuple[str, dict[str, int]] | None:
    """The domain that comes closest to holding ``need`` (the highest worst-resource ratio of
    free room to need), with its free room; None when there are no domains."""
    best: tuple[float, str, dict[str, int]] | None = None
    for value in sorted(options):
        free, _ = free_room(cache, options[value], need)
        ratio = min((free[r] / amount for r, amount in need.items() if amount > 0),
                    default=float("inf"))
        if best is None or ratio > best[0]:
            best = (ratio, value, free)
    return None if best is None else (best[1], best[2])


def describe(amounts: Mapping[str, int]) -> str:
    """``cpu 12, memory 4Gi``, in a stable order."""
    return ", ".join(f"{r} {format_units(r, amounts[r])}" for r in sorted(amounts)) or "nothing"


class TopologyDomains:
    """The domain policy of a gang's (or a subgroup's) ``members`` for the core's gang
    cycle: the domains left to them, the tightest fit, and why none will do. ``hold`` holds
    the members to a domain (the Coscheduling Filter reads it) during each trial and
    after; ``placed`` gives the nodes their gang (or subgroup) already sits on."""

    def __init__(self, cache: SchedulerCache, topology: Topology, members: Sequence[Pod],
                 placed: Callable[[], Iterable[str]], hold: Callable[[Domain | None], None],
                 whose: str = "the gang's") -> None:
        self._cache = cache
        self._topology = topology
        self._missing = len(members)
        self._need = total_request(members)
        self._placed = placed
        self._hold = hold
        self._whose = whose

    @property
    def keys(self) -> Sequence[str]:
        return self._topology.keys

    @property
    def required(self) -> bool:
        return self._topology.required

    def options(self, key: str) -> dict[str, list[str]]:
        return domains(self._cache, key, self._placed())

    def tightness(self, nodes: Sequence[str]) -> float:
        return leftover(self._cache, nodes, self._need)

    def hold(self, domain: tuple[str, str] | None) -> None:
        self._hold(Domain(*domain) if domain is not None else None)

    def refusal(self, widest: Mapping[str, Sequence[str]]) -> str:
        return no_domain(self._cache, self._topology, self._missing, self._need,
                         {value: list(nodes) for value, nodes in widest.items()},
                         any(True for _ in self._placed()), self._whose)


def no_domain(cache: SchedulerCache, topology: Topology, missing: int,
              need: dict[str, int], widest: dict[str, list[str]], partly_placed: bool,
              whose: str) -> str:
    """Why a Required gang (or subgroup) waits: its need against the largest domain's
    free room."""
    keys = ", ".join(topology.keys)
    head = (f"topology Required: no domain of {keys} can hold {whose} "
            f"{missing} missing members")
    if partly_placed and not widest:
        return (f"{head}: the members already placed are not all in one domain of "
                f"{topology.keys[-1]}")
    found = largest(cache, widest, need)
    if found is None:
        return f"{head}: no node has the label {topology.keys[-1]}"
    value, free = found
    return (f"{head}, which need {describe(need)}; the largest, "
            f"{topology.keys[-1]}={value}, has {describe(free)} free")
