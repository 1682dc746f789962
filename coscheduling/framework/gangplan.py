"""What a gang plugin asks the core's gang cycle to place, and how it wants a failure told.

The plugin says what: which members (:class:`Members`), which parts are placed in turn, all
or none (:class:`Chunks`, a gang's subgroups), and inside which topology domain
(:class:`InDomain`: the domains a key offers, how tightly the gang fits one, which domain
its Filter holds the members to, why none will do). The core's gang cycle
(:mod:`coscheduling.core.gangcycle`) does the placing: each member with its own cycle's node
choice, every claim in a transaction, each domain tried in a transaction it discards, the
tightest fitting domain placed for real, and the whole committed or discarded.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod


@dataclass(frozen=True)
class Members:
    """Members placed one after another, all or none; with ``backtrack``, by a bounded
    search over node choices (members that differ and use devices)."""

    pods: tuple[Pod, ...]
    backtrack: bool
    refusal: Callable[[int, str], str]
    """(how many the furthest attempt placed, why the next member found no node) -> why the
    members cannot be placed, as the plugin tells it."""


@dataclass(frozen=True)
class Chunks:
    """Parts placed in turn, all or none (a gang's subgroups); a part's failure is told
    after its prefix."""

    parts: tuple[tuple[str, GangStep], ...]


class DomainPolicy(Protocol):
    """The plugin's say on a topology domain for one gang or subgroup."""

    @property
    def keys(self) -> Sequence[str]:
        """Label keys to try, narrowest first."""

    @property
    def required(self) -> bool:
        """Whether no domain means no placement (else: anywhere)."""

    def options(self, key: str) -> Mapping[str, Sequence[str]]:
        """The domains of ``key`` the members may use: label value -> node names."""

    def tightness(self, nodes: Sequence[str]) -> float:
        """How much room the domain of ``nodes`` keeps with the members placed in it
        (measured while they are): the smallest is the best fit."""

    def hold(self, domain: tuple[str, str] | None) -> None:
        """Hold the members to the domain ``(key, value)`` (the plugin's Filter reads it),
        or to none."""

    def refusal(self, widest: Mapping[str, Sequence[str]]) -> str:
        """Why no domain can hold the members (``widest``: the last key's options)."""


@dataclass(frozen=True)
class InDomain:
    """``inner`` placed inside one domain of ``domains``."""

    domains: DomainPolicy
    inner: GangStep


GangStep = Members | Chunks | InDomain
"""A gang's placement plan."""
