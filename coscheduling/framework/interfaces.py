"""One interface per extension point (the roles plugins reach the scheduler through are
in :mod:`coscheduling.framework.handle`)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Status

if TYPE_CHECKING:
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.api.queues import Queue
    from coscheduling.framework.nodeinfo import NodeInfo

MAX_NODE_SCORE = 100


def scale_to_best(scores: dict[str, int], *, reverse: bool = False) -> None:
    """kube-scheduler's default normalization, in place: ``score * 100 // best``, reversed
    (``100 - that``) if asked; when every score is 0 they stay 0 (100 when reversed)."""
    best = max(scores.values(), default=0)
    if best <= 0:
        if reverse:
            for name in scores:
                scores[name] = MAX_NODE_SCORE
        return
    for name, value in scores.items():
        scaled = MAX_NODE_SCORE * value // best
        scores[name] = MAX_NODE_SCORE - scaled if reverse else scaled


class Plugin(ABC):
    """Base of every plugin; ``name`` is how profiles and the registry refer to it."""

    name: ClassVar[str]


class QueueSortPlugin(Plugin):
    @abstractmethod
    def sort_key(self, pod: Pod) -> tuple[Any, ...]:
        """Pods with smaller keys leave the queue first; computed once per queue entry."""

    def less(self, a: Pod, b: Pod) -> bool:
        """QueueSort's Less: whether ``a`` is scheduled before ``b``."""
        return self.sort_key(a) < self.sort_key(b)


class PreEnqueuePlugin(Plugin):
    @abstractmethod
    def pre_enqueue(self, pod: Pod) -> Status:
        """Whether a new pending pod may enter the active queue (kube-scheduler's
        PreEnqueue): a rejection parks it, without an attempt, until an event moves it.
        Runs under the cache lock; for enabled PreFilter plugins that implement it."""


class PreFilterPlugin(Plugin):
    @abstractmethod
    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """Check the pod once per cycle and prepare what Filter needs."""


class Signer:
    """Lets Filter and Score results be shared between pods and kept across cycles."""

    def sign(self, pod: Pod) -> Hashable | None:
        """The parts of ``pod`` this plugin's Filter and Score read, provided they read
        nothing else but the one node they are given (and the state PreFilter derives from
        the same parts). None, the default, when they look further (other nodes, where
        other pods run): the pod is then filtered and scored from scratch every cycle."""
        return None


class FilterPlugin(Signer, Plugin):
    @abstractmethod
    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        """Whether ``pod`` may run on ``node``."""


class PostFilterPlugin(Plugin):
    @abstractmethod
    def post_filter(
        self, state: CycleState, pod: Pod, filtered: Mapping[str, Status]
    ) -> Status:
        """Runs when no node passed Filter (``filtered`` maps node names to their failure)."""


class ScorePlugin(Signer, Plugin):
    @abstractmethod
    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        """Score in 0..100 (after normalize); higher is better."""

    def normalize_scores(self, state: CycleState, pod: Pod, scores: dict[str, int]) -> None:
        """Rescale the scores of all feasible nodes in place; by default they stay."""


class ReservePlugin(Plugin):
    @abstractmethod
    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Hold what the pod will use on ``node_name`` before binding."""

    @abstractmethod
    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Release what reserve held; must be idempotent."""


class PermitPlugin(Plugin):
    @abstractmethod
    def permit(self, state: CycleState, pod: Pod, node_name: str) -> tuple[Status, float]:
        """Allow, reject, or make the pod Wait (with the timeout in seconds)."""


class PreBindPlugin(Plugin):
    @abstractmethod
    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Prepare what the pod needs before its Binding is written (volumes); runs in the
        binding cycle, without the cache lock. A failure unreserves and retries the pod."""


class BindPlugin(Plugin):
    @abstractmethod
    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Bind, or return Skip to let the next bind plugin do it."""


class PostBindPlugin(Plugin):
    @abstractmethod
    def post_bind(self, state: CycleState, pod: Pod, node_name: str) -> None:
        """Informational: the pod is bound."""


class ClusterEventsPlugin(Plugin):
    """Optional hooks for plugins that keep state across cycles (the gang plugin).

    Each hook runs under the cache lock and returns PodGroup keys whose pods should be moved
    back to the active queue.
    """

    def capacity_freed(self, exclude: str = "") -> list[str]:
        """Room was freed or added somewhere (node added, pod gone, gang rejected);
        ``exclude`` names a group that must stay as it is (the one just rejected)."""
        return []

    def held_by_gates(self, pod: Pod, status: Status) -> bool:
        """Whether ``status`` (a failed attempt of ``pod``) only says it waits for pods that
        scheduling gates hold back (its gang's other members): a wait the gates' owner
        ends, not a failure to report."""
        return False

    def group_changed(self, group: PodGroup) -> list[str]:
        return []

    def group_deleted(self, group_key: str) -> list[str]:
        return []

    def node_deleted(self, node_name: str, stranded: list[Pod]) -> list[str]:
        return []

    def pod_lost(self, pod: Pod) -> list[str]:
        """A bound pod was deleted or failed (``pod`` is its last record)."""
        return []

    def housekeeping(self, now: float) -> list[str]:
        """Called about once a second: expire what has a deadline."""
        return []

    def queue_order_changed(self) -> bool:
        """Whether the QueueSort keys of queued pods may have changed (then the queue is
        re-keyed); asked after the caches sync and on housekeeping."""
        return False


class GangOrderPlugin(Plugin):
    """Orders gangs against each other (DRF): the gang plugin's QueueSort keys a member by
    it, so members still leave the queue together."""

    @abstractmethod
    def gang_key(self, group: PodGroup, pod: Pod, partial: int) -> tuple[Any, ...]:
        """The QueueSort key of ``pod``, a member of ``group`` (``partial``: 0 when the gang
        is partly bound and goes first, else 1). Called under the cache lock."""


class QueueSharePlugin(Plugin):
    """Keeps queues to their shares (Proportion): what a gang may reclaim from queues over
    theirs, and how far a gang's reservation may grow."""

    @abstractmethod
    def reclaimable(self, group: PodGroup, members: Sequence[Pod]) -> list[Any]:
        """Eviction units the gang of ``members`` may take back beside lower-priority
        pods (the preemption search's units)."""

    @abstractmethod
    def reclaimed(self, group: PodGroup, victims: Any) -> None:
        """``victims`` (the search's choice among reclaimable units) are evicted for
        ``group``: announce which queue took the room back."""

    @abstractmethod
    def may_reserve(self, group_key: str, queue: str, more: Mapping[str, int]) -> bool:
        """Whether the gang's reservation may grow by ``more`` (the queues' policy)."""

    def queue(self, name: str) -> Queue | None:
        """The Queue named ``name`` as last seen (None: not known)."""
        return None


class GangKeeperPlugin(Plugin):
    """Keeps gangs (Coscheduling): their claims, attempts and reservations."""

    @abstractmethod
    def give_back(self, group_key: str, reason: str) -> None:
        """End the gang's attempt and drop its claims, without freezing it (its queue takes
        the room back)."""

    @abstractmethod
    def reserved_room(self) -> Mapping[str, tuple[str, Mapping[str, int]]]:
        """group key -> (queue, room its reservation holds), counted toward the queues'
        shares."""


@dataclass(frozen=True)
class GangAdmission:
    """What a gang plugin's PreFilter asks for (written to the cycle state as
    ``GANG_ADMISSION``): the member's gang must be admitted now, from the pending members
    given (in queue order, the member itself left out)."""

    group_key: str
    candidates: tuple[Pod, ...]


class GangAdmissionPlugin(PreFilterPlugin):
    """A PreFilter plugin whose gangs are admitted as a whole (Coscheduling). Its PreFilter
    only passes a member's gates; when the gang must be admitted it writes a
    :class:`GangAdmission` to the cycle state, and the gang's cycle (the core's, for the loop
    and the gRPC server alike) runs at once, at this plugin's place among the PreFilters,
    handing the request to :meth:`admit_gang`."""

    @abstractmethod
    def admit_gang(self, state: CycleState, pod: Pod, request: GangAdmission) -> Status:
        """Admit ``pod``'s gang as ``request`` says: say which members and domains, have
        the core place them (``handle.runner.place_gang``), and record the outcome
        (claims kept, or the gang frozen, reserving, or preempting). The answer stands for
        this plugin's PreFilter."""


@dataclass(frozen=True)
class GangSummary:
    """Where a gang stands, for readers outside its plugin (the gRPC GetPodGroup)."""

    placed: int
    waiting: int
    claimed: int
    phase: str
    frozen_until: float
    attempt_deadline: float = 0.0
    last_failure: str = ""
    attempts: int = 0
    timeouts: int = 0
    rejections: int = 0


class GangReporter(Plugin):
    """A plugin that keeps gangs and can say where one stands."""

    @abstractmethod
    def summary(self, group_key: str) -> GangSummary | None:
        """None when the group is unknown to it; call under the cache lock."""


@dataclass(frozen=True)
class GangTrial:
    """What would become of a gang that does not exist (yet), as its admission would decide
    it on the cluster as it is: nothing is claimed, frozen or evicted by a trial."""

    fits: bool
    # Member pod key -> the node its admission would claim (empty when it does not fit).
    nodes: Mapping[str, str] = field(default_factory=dict)
    # The topology domain it would go to ("" when it has no spec.topology, or no fit).
    domain: str = ""
    # The pods it would evict first, and whether they are taken back by its queue (reclaim)
    # rather than preempted for priority.
    victims: tuple[Pod, ...] = ()
    reclaim: bool = False
    # Why it does not fit now ("" when it does).
    reason: str = ""
    # When it does not fit now but would once room frees: whether it would reserve the room
    # that frees (first in line), the reservations of its queue ahead of it, the nodes it
    # would reserve, and when they are expected to be free (0: not known).
    would_reserve: bool = False
    ahead: tuple[str, ...] = ()
    reserve_nodes: tuple[str, ...] = ()
    estimated_start: float = 0.0


class GangSimulator(Plugin):
    """A plugin that can try a gang's admission without acting on it (the what-if). Its
    methods are called on a view of the cache (the handle's cache is the view for the
    calling thread), without the cache lock: the loop runs meanwhile."""

    @abstractmethod
    def trial(self, group: PodGroup, members: Sequence[Pod], *, preempt: bool) -> GangTrial:
        """The gang of ``members`` (in the cache and listers for the call only) against the
        cluster as the cache shows it; with ``preempt``, also which victims would let it
        in. Leaves no claim, freeze or gang state behind."""

    def scale_up_answer(self, members: Sequence[Pod]) -> tuple[bool, str]:
        """Whether the gang's admission would ask the autoscaler for what it is missing,
        and when it would not although it could (scale-ups on), why."""
        return False, ""

    @abstractmethod
    def reservation_preview(self, group: PodGroup, members: Sequence[Pod]) -> GangTrial:
        """For a gang that would wait for room: whether it would reserve the room that frees,
        which reservations are ahead of it, where and when (``would_reserve``, ``ahead``,
        ``reserve_nodes``, ``estimated_start``). Changes nothing."""
