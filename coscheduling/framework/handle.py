"""What the scheduler offers its plugins, as roles (kube-scheduler's Handle is built the same
way: a lister, a nominator, a plugins runner, a pod activator, a workload manager).

A plugin's factory gets the :class:`Handle` and keeps the roles it uses; nothing is wired into
a plugin after it is built. Each role is a narrow protocol here, implemented elsewhere (the
cache, the scheduler's listers, the preemption ledger), so the framework depends on nothing
above it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from coscheduling.api.dra import DeviceStore
from coscheduling.api.objectref import ObjectRef
from coscheduling.framework.gangs import GangExtensions
from coscheduling.framework.status import Status

if TYPE_CHECKING:
    from coscheduling.api.budgets import Budget
    from coscheduling.api.podaffinity import LabelSelector, PodAffinity
    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import VolumeStore
    from coscheduling.framework.gangplan import GangStep
    from coscheduling.framework.metrics import SchedulerMetrics
    from coscheduling.framework.nodeinfo import NodeInfo
    from coscheduling.framework.waiting import WaitingPods


class SchedulerCache(Protocol):
    """Nodes, the pods on them, and the room gangs claimed (the cache; one lock for all)."""

    lock: threading.RLock
    namespace_labels: dict[str, dict[str, str]]
    derived: dict[str, Any]
    """What a plugin computes from these records and keeps current from the change log, by
    plugin name: a simulation's view of the cache has its own."""

    def node(self, name: str) -> NodeInfo | None: ...
    def nodes(self) -> Iterator[NodeInfo]: ...
    def node_names(self) -> list[str]: ...
    def node_count(self) -> int: ...
    def allocatable(self) -> Mapping[str, int]: ...
    def pod(self, key: str) -> Pod | None: ...
    def pods(self) -> Iterator[Pod]: ...
    def group_pods(self, group_key: str) -> list[Pod]: ...
    def group_nodes(self, group_key: str, excluding: str = "") -> Counter[str]: ...
    def group_keys(self) -> list[str]: ...
    def labelled(self, selector: LabelSelector) -> Iterable[tuple[Pod, NodeInfo]] | None:
        """Pods on node records that may match ``selector`` (a superset), with their node
        record; None when it names no label value to look them up by."""
    def placed_affinities(self) -> Iterator[tuple[PodAffinity, Iterable[tuple[Pod, NodeInfo]]]]:
        """Each distinct pod affinity of the pods on node records, with those pods."""
    def has_placed_affinities(self) -> bool:
        """Whether any pod on a node record has pod affinity (the common answer: no)."""
    def lowest_priority(self) -> int | None: ...
    @property
    def change_seq(self) -> int: ...
    def changed_since(self, seq: int) -> list[str] | None: ...
    def assumed_node(self, pod_key: str) -> str: ...
    def is_assumed(self, pod_key: str) -> bool: ...
    def claim(self, pod: Pod, node_name: str) -> None: ...
    def drop_claim(self, pod_key: str) -> None: ...
    def claimed_node(self, pod_key: str) -> str: ...
    def hand_over(self, victims: Iterable[Pod], takers: Iterable[str]) -> None: ...
    def take_back(self, victim: Pod) -> None: ...

    def transaction(self) -> Transaction:
        """Tentative changes, each undone exactly unless committed (enter it: that takes the
        lock; one open per cache, nested ones are its savepoints)."""


class Transaction(Protocol):
    """Tentative changes to the cache recorded with their inverses: a trial placement, a
    search that backtracks, the cluster without a preemption's victims. It discards unless
    committed; evicted pods return to their nodes when it ends, committed or not."""

    def __enter__(self) -> Transaction: ...
    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None: ...
    def commit(self) -> None: ...
    def discard(self) -> None: ...
    def mark(self) -> int:
        """A savepoint for :meth:`rollback_to`."""
    def rollback_to(self, mark: int) -> None: ...
    def assume(self, pod: Pod, node_name: str) -> None: ...
    def forget(self, pod_key: str) -> None: ...
    def claim(self, pod: Pod, node_name: str) -> None: ...
    def drop_claim(self, pod_key: str) -> None: ...
    def evict(self, pods: Iterable[Pod]) -> None:
        """Bound ``pods`` leave their node records until the transaction ends."""
    def hand_over(self, victims: Iterable[Pod], takers: Iterable[str]) -> None: ...
    def take_back(self, victim: Pod) -> None: ...


class GroupLister(Protocol):
    """PodGroups (of every producer) from their watches, and members that finished."""

    def podgroup(self, key: str) -> PodGroup | None: ...
    def podgroups(self) -> Mapping[str, PodGroup]: ...

    def finished_members(self, group_key: str) -> Mapping[str, str]:
        """Members of a group that Succeeded or Failed: pod key -> phase."""


class PriorityLister(Protocol):
    """PriorityClasses and PodDisruptionBudgets, from their watches."""

    def priority_class(self, name: str) -> int | None: ...
    def budgets(self) -> Iterable[Budget]: ...


class PluginsRunner(Protocol):
    """Runs the profile's plugins for a pod outside its own cycle (a gang's admission places
    its missing members through the gang's cycle; preemption re-filters a node without its
    victims)."""

    def place_gang(self, plan: GangStep, skip_plugin: str) -> str:
        """The gang's cycle: place and claim ``plan``'s members (each as its own cycle
        would: PreFilter but ``skip_plugin``, Filter, Score) in its domains and chunks, all
        or none: "" with every claim kept, else why not (the plan's own words)."""

    def filter_node(self, pod: Pod, node: NodeInfo, skip_plugin: str = "") -> Status:
        """PreFilter (all but ``skip_plugin``) and Filter of ``pod`` on one node."""

    def preemption_enabled(self) -> bool:
        """Whether the profile preempts (DefaultPreemption is among its PostFilters)."""


class PodActivator(Protocol):
    """Moves pending pods back to the active queue."""

    def activate(self, pod_keys: Iterable[str]) -> None: ...

    def capacity_freed(self) -> None:
        """Room appeared: frozen gangs and parked pods may try again."""


class PreemptionLedger(Protocol):
    """The one record of what preemption evicted, for whom, and the room handed over."""

    def evict(self, victims: Sequence[Pod], preemptor: str, takers: Sequence[str]) -> None:
        """Evict ``victims`` for ``preemptor`` ("pod ns/p" or "gang ns/g"); their room goes
        to the claims of ``takers`` (pod keys), activated once the victims are gone."""

    def nominate(self, pod: Pod, node_name: str) -> None:
        """Record the node ``pod`` waits for (status.nominatedNodeName)."""

    def evicted(self, pod: Pod) -> bool:
        """Whether ``pod`` is being evicted by this scheduler's preemption."""

    def victims_left(self, preemptor: str) -> int:
        """How many of ``preemptor``'s victims still exist."""


class StatusPublisher(Protocol):
    """Where a gang's state changes are told: PodGroup status and events."""

    def group_changed(self, group_key: str) -> None: ...
    def group_event(self, group: PodGroup, kind: str, reason: str, message: str) -> None: ...
    def pod_event(self, pod: Pod, kind: str, reason: str, message: str) -> None: ...


class Binder(Protocol):
    def bind(self, pod: Pod, node_name: str) -> Status:
        """Write a Binding through the API server."""


class ApiWriter(Protocol):
    """Writes to the API server that plugins make themselves (PreBind's volume patches and
    claim allocations, which read the object they update first)."""

    def patch(self, path: str, body: Any, *, kind: str = "merge") -> dict[str, Any]: ...
    def get(self, path: str, **query: Any) -> dict[str, Any]: ...


class EventRecorder(Protocol):
    """Events about objects other than pods and PodGroups (a DeviceClass whose selector
    does not compile)."""

    def object_event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None: ...


class Clock(Protocol):
    def now(self) -> float:
        """Wall-clock seconds; plugins take time from here so tests can reason about it."""


@dataclass(frozen=True)
class Handle:
    """The roles a plugin may take when it is built."""

    cache: SchedulerCache
    groups: GroupLister
    priorities: PriorityLister
    runner: PluginsRunner
    activator: PodActivator
    preemption: PreemptionLedger
    status: StatusPublisher
    binder: Binder
    clock: Clock
    waiting_pods: WaitingPods
    metrics: SchedulerMetrics
    volumes: VolumeStore
    api: ApiWriter | None = None
    devices: DeviceStore = field(default_factory=DeviceStore)
    events: EventRecorder | None = None
    scheduler_names: tuple[str, ...] = ()
    gangs: GangExtensions = field(default_factory=GangExtensions)
