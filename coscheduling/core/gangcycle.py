"""A gang's cycle: its missing members placed together in one transaction, then committed
(each holds a claim on its node) or discarded (nothing held).

The gang plugin decides what a gang needs (which members, in which topology domain, in
which subgroup chunks, whether the whole gang or nothing); this module does the placing.
Each member gets the node its own cycle would pick (its PreFilter, then the one node choice
of :meth:`~coscheduling.core.placement.Placer.select`), and the member's claim is a
transactional operation, so a failed gang leaves nothing behind.

Members placed one after another, each on the node its own cycle would pick, fit exactly
when the members are alike: nodes are then interchangeable between them. Members that are
not alike and use devices (dynamic resource allocation) can fail that way although a
placement exists: member 0 (>= 40Gi) takes the only 80Gi device, on node a, while node b's
40Gi device would have done, and member 1 (>= 80Gi) finds nothing. So when the plugin asks
for it, the members are placed by a depth-first search over node choices: when a member
finds no node, the member before it moves to a node it has not tried (rolled back to the
savepoint before its claim), and the members after it start over. The search is bounded; a
gang that does not fit costs at most :data:`MAX_BACKTRACKS` more placements.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from coscheduling.framework.cycle_state import GANG_ADMISSION, CycleState
from coscheduling.framework.gangplan import Chunks, GangStep, InDomain, Members
from coscheduling.framework.status import SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.core.placement import Placer
    from coscheduling.framework.handle import SchedulerCache, Transaction
    from coscheduling.framework.interfaces import GangAdmissionPlugin
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.framework.runtime import Framework

SelectNode = Callable[["Pod", frozenset[str]], "tuple[str | None, str]"]
"""(pod, nodes to keep it off) -> (the node its own cycle would pick, or None; why no node
fits)."""

MAX_BACKTRACKS = 32


class MemberSearch:
    """Places one gang's members in a transaction, backtracking when ``budget`` allows."""

    def __init__(self, cache: SchedulerCache, select_node: SelectNode,
                 budget: int = MAX_BACKTRACKS) -> None:
        self.cache = cache
        self.select_node = select_node
        self.budget = budget
        self._avoid: dict[str, frozenset[str]] = {}  # member -> nodes it has tried

    def place(self, members: Sequence[Pod]) -> tuple[int, str]:
        """Claim a node for every member: (len(members), "") when it found them all, else
        (how many the furthest attempt placed, why the next one found no node), with no
        claim left behind (the search's transaction is discarded)."""
        at, furthest, why = 0, 0, ""
        marks: list[int] = []  # the savepoint before each placed member's claim
        try:
            with self.cache.transaction() as tx:
                while at < len(members):
                    member = members[at]
                    node, failed = self.select_node(
                        member, self._avoid.get(member.key, frozenset()))
                    if node is not None:
                        marks.append(tx.mark())
                        tx.claim(member, node)
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
            self._avoid.clear()

    def _back(self, tx: Transaction, members: Sequence[Pod], at: int, mark: int) -> int:
        """Member ``at`` found no node: the one before it leaves its node (its claim is
        rolled back to ``mark``) for another."""
        self.budget -= 1
        self._avoid.pop(members[at].key, None)
        previous = members[at - 1]
        node = self.cache.claimed_node(previous.key)
        tx.rollback_to(mark)
        self._avoid[previous.key] = self._avoid.get(previous.key, frozenset()) | {node}
        return at - 1


class GangCycle:
    """The gang's cycle, owned by :class:`~coscheduling.core.cycle.Cycles` and lent to the
    gang plugin (through the plugins runner) for the placements its policy tries."""

    def __init__(self, framework: Framework, placer: Placer) -> None:
        self._fw = framework
        self._placer = placer

    def place_members(self, members: Sequence[Pod], skip_plugin: str, *,
                      backtrack: bool) -> tuple[int, str]:
        """Place and claim every one of ``members`` (PreFilter but ``skip_plugin``, the
        gang plugin placing them, then the one node choice), all or none; (how many the
        furthest attempt placed, why not: "" when all are claimed)."""
        def select_node(pod: Pod, avoid: frozenset[str]) -> tuple[str | None, str]:
            return self.select_node(pod, skip_plugin, avoid)

        search = MemberSearch(self._placer.cache, select_node,
                              budget=MAX_BACKTRACKS if backtrack else 0)
        return search.place(members)

    def place(self, step: GangStep, skip_plugin: str) -> str:
        """Place the plan ``step`` (see :mod:`coscheduling.framework.gangplan`) for the gang
        plugin ``skip_plugin``: "" with every member's claim kept, else why not, with no
        claim left behind."""
        if isinstance(step, Members):
            made, why = self.place_members(step.pods, skip_plugin, backtrack=step.backtrack)
            return "" if made == len(step.pods) else step.refusal(made, why)
        if isinstance(step, Chunks):
            with self._placer.cache.transaction() as tx:
                for prefix, part in step.parts:
                    why = self.place(part, skip_plugin)
                    if why:
                        return prefix + why  # the parts placed before are discarded too
                tx.commit()
            return ""
        return self._place_in_domain(step, skip_plugin)

    def _place_in_domain(self, step: InDomain, skip_plugin: str) -> str:
        """``step.inner`` inside one domain: the narrowest key first, and within a key the
        domain it fits most tightly, each tried in a transaction that is discarded, the
        chosen one placed for real; a domain that is not required falls back to anywhere."""
        policy = step.domains
        options: Mapping[str, Sequence[str]] = {}
        for key in policy.keys:
            options = policy.options(key)
            fits: list[tuple[float, str]] = []
            for value in sorted(options):
                policy.hold((key, value))
                with self._placer.cache.transaction():  # a trial: its claims are discarded
                    if self.place(step.inner, skip_plugin):
                        continue
                    fits.append((policy.tightness(options[value]), value))
            if fits:
                policy.hold((key, min(fits)[1]))
                why = self.place(step.inner, skip_plugin)
                if why:
                    policy.hold(None)
                return why
        policy.hold(None)
        if not policy.required:
            return self.place(step.inner, skip_plugin)
        return policy.refusal(options)

    def admit(self, plugin: GangAdmissionPlugin, state: CycleState, pod: Pod) -> Status:
        """After ``plugin``'s PreFilter passed: the gang's admission when the plugin asked
        for it (its request is taken from ``state``), else nothing to do."""
        request = state.read(GANG_ADMISSION)
        if request is None:
            return SUCCESS
        state.write(GANG_ADMISSION, None)
        return plugin.admit_gang(state, pod, request)

    def select_node(self, pod: Pod, skip_plugin: str,
                    avoid: frozenset[str] = frozenset()) -> tuple[str | None, str]:
        """The node ``pod``'s own cycle would pick (None, and why, when none passes)."""
        state = CycleState()
        status = self._fw.pre_filter_except(state, pod, skip_plugin)
        if not status.ok:
            return None, f"{pod.name}: {status.message}"
        choice = self._placer.select(state, pod, avoid)
        return choice.node, "" if choice.node else choice.summary()


class PluginsRunner:
    """Runs the profile's plugins for a pod outside its own cycle: a gang's admission places
    its missing members through the gang's cycle, and preemption re-filters a node without
    its victims."""

    def __init__(self) -> None:
        self._fw: Framework | None = None
        self._gangs: GangCycle | None = None

    def attach(self, framework: Framework, gangs: GangCycle) -> None:
        """The framework exists only once its plugins, which get this role, are built."""
        self._fw, self._gangs = framework, gangs

    def _parts(self) -> tuple[Framework, GangCycle]:
        if self._fw is None or self._gangs is None:
            raise RuntimeError("the plugins runner is used before its framework exists")
        return self._fw, self._gangs

    def place_gang(self, plan: GangStep, skip_plugin: str) -> str:
        _, gangs = self._parts()
        return gangs.place(plan, skip_plugin)

    def filter_node(self, pod: Pod, node: NodeInfo, skip_plugin: str = "") -> Status:
        framework, gangs = self._parts()
        state = CycleState()
        status = framework.pre_filter_except(state, pod, skip_plugin, gangs.admit)
        return status if not status.ok else framework.run_filter(state, pod, node)

    def preemption_enabled(self) -> bool:
        framework, _ = self._parts()
        return any(p.name == "DefaultPreemption" for p in framework.post_filter_plugins)
