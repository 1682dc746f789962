"""Placing a gang's members when one member's node decides what is left for another.

Members placed one after another, each on the node its own cycle would pick, fit exactly
when the members are alike: nodes are then interchangeable between them. Members that are
not alike and use devices (dynamic resource allocation) can fail that way although a
placement exists: member 0 (>= 40Gi) takes the only 80Gi device, on node a, while node b's
40Gi device would have done, and member 1 (>= 80Gi) finds nothing. So such a gang is placed
by a depth-first search over node choices: when a member finds no node, the member before it
moves to a node it has not tried (the Coscheduling Filter keeps it off the ones it has, for
this search only), and the members after it start over. The search is bounded; a gang that
does not fit costs at most ``budget`` more placements before it is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache, Transaction

SelectNode = Callable[["Pod"], "tuple[str | None, str]"]
"""pod -> (the node its own cycle would pick, or None; why no node fits)."""

MAX_BACKTRACKS = 32


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


class MemberSearch:
    """One gang's search; ``avoid`` is what the Coscheduling Filter reads while it runs."""

    def __init__(self, cache: SchedulerCache, select_node: SelectNode,
                 budget: int = MAX_BACKTRACKS) -> None:
        self.cache = cache
        self.select_node = select_node
        self.budget = budget
        self.avoid: dict[str, frozenset[str]] = {}  # member -> nodes it has tried

    def place(self, members: Sequence[Pod]) -> tuple[int, str]:
        """Claim a node for every member: (len(members), "") when it found them all, else
        (how many the furthest attempt placed, why the next one found no node), with no
        claim left behind (the search's transaction is discarded)."""
        at, furthest, why = 0, 0, ""
        marks: list[int] = []  # the savepoint before each placed member's claim
        try:
            with self.cache.transaction() as tx:
                while at < len(members):
                    node, failed = self.select_node(members[at])
                    if node is not None:
                        marks.append(tx.mark())
                        tx.claim(members[at], node)
                        at += 1
                        continue
                    if at >= furthest:
                        furthest, why = at, failed
                    if at == 0 or self.budget <= 0:
                        return furthest, why
                    at = self._back(tx, members, at, marks.pop())
                tx.commit()
                return at, ""
        finally:
            self.avoid.clear()

    def _back(self, tx: Transaction, members: Sequence[Pod], at: int, mark: int) -> int:
        """Member ``at`` found no node: the one before it leaves its node (its claim is
        rolled back to ``mark``) for another."""
        self.budget -= 1
        self.avoid.pop(members[at].key, None)
        previous = members[at - 1]
        node = self.cache.claimed_node(previous.key)
        tx.rollback_to(mark)
        self.avoid[previous.key] = self.avoid.get(previous.key, frozenset()) | {node}
        return at - 1
