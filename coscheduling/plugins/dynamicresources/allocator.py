"""The structured allocator: which free devices on one node satisfy a set of claims.

It searches device choices depth first and backtracks, so claims fit exactly when some
assignment of devices to all of their requests exists (bounded by a step budget). One search
covers every claim that still needs devices on the node: the pod's own, and those of gang
members that hold room there, so an earlier member's choice is revisited when a later
member needs its device (member 0 asking >= 40Gi, member 1 >= 80Gi, devices of 80Gi and
40Gi: member 0 gets the 40Gi one). Facts follow kube-scheduler's structured allocator:
ExactCount takes ``count`` devices, All takes every matching device on the node and needs
them all free, firstAvailable tries its alternatives in order, constraints hold per claim.
"""

from __future__ import annotations

from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.dra import (
    ALL,
    Constraint,
    Device,
    DeviceId,
    ResourceClaim,
    Result,
    Subrequest,
)

DEFAULT_BUDGET = 20_000
Matcher = Callable[[ResourceClaim, Subrequest, Device], bool]
"""Whether a device matches a subrequest of a claim (class and request selectors)."""


class BudgetExhausted(Exception):
    """The search ran out of steps before it found an allocation or proved there is none."""


@dataclass
class _Slot:
    """One request of one claim, in search order."""

    claim: ResourceClaim
    index: int


@dataclass
class _State:
    used: set[DeviceId] = field(default_factory=set)
    # (claim key, constraint index) -> the values the devices chosen so far bring.
    values: dict[tuple[str, int], list[Any]] = field(default_factory=dict)
    chosen: dict[str, list[Result]] = field(default_factory=dict)


class Allocator:
    """A search over ``devices`` (free ones first; ``taken`` are in use by others)."""

    def __init__(self, devices: Sequence[Device], taken: Container[DeviceId], matches: Matcher,
                 budget: int = DEFAULT_BUDGET) -> None:
        self.devices = devices
        self.taken = taken
        self.matches = matches
        self.budget = budget
        self._match_cache: dict[tuple[str, str, DeviceId], bool] = {}

    def allocate(self, claims: Sequence[ResourceClaim]) -> dict[str, list[Result]] | None:
        """claim key -> its results, or None when no assignment exists. Raises
        BudgetExhausted when the search was cut short."""
        slots = [_Slot(c, i) for c in claims for i in range(len(c.requests))]
        state = _State(chosen={c.key: [] for c in claims})
        return state.chosen if self._slot(slots, 0, state) else None

    def _match(self, claim: ResourceClaim, sub: Subrequest, device: Device) -> bool:
        key = (claim.key, sub.name, device.id)
        found = self._match_cache.get(key)
        if found is None:
            found = self._match_cache[key] = self.matches(claim, sub, device)
        return found

    def _slot(self, slots: list[_Slot], at: int, state: _State) -> bool:
        if at == len(slots):
            return True
        slot = slots[at]
        for sub in slot.claim.requests[slot.index].alternatives:
            candidates = [d for d in self.devices if self._match(slot.claim, sub, d)]
            if sub.mode == ALL:
                if self._take_all(slots, at, state, sub, candidates):
                    return True
            elif self._pick(slots, at, state, sub, candidates, 0, sub.count):
                return True
        return False

    def _take_all(self, slots: list[_Slot], at: int, state: _State, sub: Subrequest,
                  candidates: list[Device]) -> bool:
        """All mode: every matching device of the node, none in use, at least one."""
        if not candidates or any(d.id in self.taken or d.id in state.used for d in candidates):
            return False
        claim = slots[at].claim
        added: list[Device] = []
        for device in candidates:
            if not self._add(claim, sub, device, state):
                self._undo(claim, added, state)
                return False
            added.append(device)
        if self._slot(slots, at + 1, state):
            return True
        self._undo(claim, added, state)
        return False

    def _pick(self, slots: list[_Slot], at: int, state: _State, sub: Subrequest,
              candidates: list[Device], start: int, need: int) -> bool:
        """Choose ``need`` more devices among ``candidates[start:]`` (in order, so each set
        is tried once), then go on with the next slot."""
        if need == 0:
            return self._slot(slots, at + 1, state)
        claim = slots[at].claim
        for position in range(start, len(candidates) - need + 1):
            self.budget -= 1
            if self.budget < 0:
                raise BudgetExhausted
            device = candidates[position]
            if device.id in self.taken or device.id in state.used:
                continue
            if not self._add(claim, sub, device, state):
                continue
            if self._pick(slots, at, state, sub, candidates, position + 1, need - 1):
                return True
            self._undo(claim, [device], state)
        return False

    def _add(self, claim: ResourceClaim, sub: Subrequest, device: Device,
             state: _State) -> bool:
        """Record ``device`` for ``sub`` unless a constraint of the claim forbids it."""
        applied: list[tuple[str, int]] = []
        for index, constraint in enumerate(claim.constraints):
            if not constraint.applies(sub.name):
                continue
            value = device.attribute(constraint.attribute)
            if not _admits(constraint, state.values.get((claim.key, index), []), value):
                for key in applied:
                    state.values[key].pop()
                return False
            state.values.setdefault((claim.key, index), []).append(value)
            applied.append((claim.key, index))
        state.used.add(device.id)
        state.chosen[claim.key].append(Result(sub.name, *device.id))
        return True

    def _undo(self, claim: ResourceClaim, devices: list[Device], state: _State) -> None:
        for device in reversed(devices):
            state.used.discard(device.id)
            result = state.chosen[claim.key].pop()
            for index, constraint in enumerate(claim.constraints):
                if constraint.applies(result.request):
                    state.values[(claim.key, index)].pop()


def _admits(constraint: Constraint, values: list[Any], value: Any) -> bool:
    if value is None:
        return False  # a device without the attribute satisfies no constraint on it
    if constraint.distinct:
        return value not in values
    return not values or values[0] == value
