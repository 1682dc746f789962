"""What the scheduler knows of the cluster: nodes, the pods on them, and in-flight decisions.

The cache accounts three kinds of usage on a node:

* pods the API server reports bound there;
* *assumed* pods, placed by a scheduling cycle but not yet bound (so the next cycle does not
  hand out the same room twice);
* *claims*, capacity a gang reserved for members it has not placed yet. A gang that passes
  PreFilter claims room for all of its missing members at once, so no other gang or pod can
  take that room half-way through; this is what keeps two gangs from each holding part of the
  cluster and waiting on each other.

A preemptor claims the room its victims will free while they still run. Until they are gone
that room is *handed over*: the victims and the preemptor's claims on a node share it, and it
is counted once (see ``NodeInfo.used``), so other pods see the node exactly as full as it is
and do not evict again for room that is already promised.

One re-entrant lock guards the cache and everything the scheduler keeps beside it (gang
state, waiting pods), because every decision reads all of it together. A simulation (a
what-if, a read-only RPC) holds it only to take a snapshot, and runs on that
(``coscheduling.core.view``).

Every change to a node's usage or to the node itself is also written to a change log, so
per-signature node tables (``coscheduling.core.placement``) re-evaluate only the nodes that
changed since they last looked.

Node records keep only what is true of their node. What spans nodes (the pods by label and by
pod affinity, their priorities) is indexed here, in one place each: every pod and claim goes
onto a node record and off it through the cache (``_put`` / ``_take``), which keeps the
indexes with it.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from coscheduling.api.budgets import Budget
from coscheduling.api.nodes import Node
from coscheduling.api.podaffinity import LabelSelector, PodAffinity
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod
from coscheduling.core.transaction import Placement, Transaction
from coscheduling.framework.labelindex import LabelIndex
from coscheduling.framework.nodeinfo import NodeInfo

MIN_CHANGE_LOG = 4096
CHANGE_LOG_PER_NODE = 4
"""The change log keeps max(MIN_CHANGE_LOG, CHANGE_LOG_PER_NODE * nodes) entries at most."""
VIEW_CHANGES_APART = 1 << 40
"""A view numbers its changes this far above the live cache's: a reader that followed one
and asks the other about a number it never gave reads every node again."""


class Cache:
    """Nodes and pods, kept current by the watches and by the scheduler's own decisions."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self._nodes: dict[str, NodeInfo] = {}
        self._node_order: list[str] = []
        self._pods: dict[str, Pod] = {}
        self._assumed: dict[str, str] = {}
        self._claims: dict[str, str] = {}
        self._groups: dict[str, set[str]] = {}
        # Group -> node -> its members bound, assumed or claimed there (not deleting), and
        # what each pod counts in it: a gang member's tie-break reads it per placement, so
        # it is kept as pods move instead of walking the gang each time (Simulate of a gang
        # of 2,000 spent most of its locked time in that walk).
        self._group_nodes: dict[str, Counter[str]] = {}
        self._counted: dict[str, tuple[str, str]] = {}
        # Names of nodes whose usage or object changed, oldest first; entry i has the
        # sequence number _changes_base + i.
        self._changes: list[str] = []
        self._changes_base = 0
        # The indexes over node records: priorities of the pods on them (so preemption knows
        # at once whether any pod is of lower priority than a preemptor), and the pods and
        # claims on them by label and by pod affinity (see labelindex).
        self._priorities: Counter[int] = Counter()
        # What the nodes that exist can hold in all, by resource (kept as nodes come, change
        # and go): a gang's share of the cluster is read against it.
        self._allocatable: Counter[str] = Counter()
        self._labels: LabelIndex[NodeInfo] = LabelIndex()
        # Namespace labels (for namespaceSelector).
        self.namespace_labels: dict[str, dict[str, str]] = {}
        # The open transaction and the scopes nested in it, outermost first.
        self.scopes: list[Transaction] = []
        # What placement and plugins compute from this cache's records and keep current
        # from its change log, by owner (node tables, the image index): a view starts
        # with none of it and never sees the live cache's.
        self.derived: dict[str, Any] = {}
        # Thread -> the view it simulates on (``coscheduling.core.view``); empty otherwise.
        self.views: dict[int, Cache] = {}

    def snapshot(self) -> Cache:
        """A copy of everything this cache holds, taken under its lock, for a simulation
        to change and throw away (``coscheduling.core.view``): node records copied,
        indexes rebuilt from them (label keys are indexed again when first asked for), its
        own lock, change log (numbered apart from this cache's) and derived state. Costs
        one pass over node records and pods, no filter."""
        view = Cache()
        with self.lock:
            view._nodes = {name: _copy_record(info) for name, info in self._nodes.items()}
            view._node_order = list(self._node_order)
            view._pods = dict(self._pods)
            view._assumed, view._claims = dict(self._assumed), dict(self._claims)
            view._groups = {key: set(members) for key, members in self._groups.items()}
            view._group_nodes = {key: Counter(c) for key, c in self._group_nodes.items()}
            view._counted = dict(self._counted)
            view._changes_base = self.change_seq + VIEW_CHANGES_APART
            view._priorities = Counter(self._priorities)
            view._allocatable = Counter(self._allocatable)
            view.namespace_labels = dict(self.namespace_labels)
        for info in view._nodes.values():
            for pod in info.pods.values():
                if pod.pod_affinity is not None:
                    view._labels.account(pod, info, False, 1)
            for pod in info.claims.values():
                if pod.pod_affinity is not None:
                    view._labels.account(pod, info, True, 1)
        return view

    def lowest_priority(self) -> int | None:
        """The lowest priority of a pod on a node (bound or assumed); None if there is none."""
        return min((p for p, n in self._priorities.items() if n > 0), default=None)

    # -- change log --------------------------------------------------------------------
    def _touch(self, name: str) -> None:
        changes = self._changes
        changes.append(name)
        if len(changes) > max(MIN_CHANGE_LOG, CHANGE_LOG_PER_NODE * len(self._node_order)):
            drop = len(changes) // 2
            del changes[:drop]
            self._changes_base += drop

    def touch(self, names: Iterable[str] | None) -> None:
        """Mark nodes changed for a reason the cache cannot see (devices taken or given
        back there); None marks every node."""
        with self.lock:
            for name in self._node_order if names is None else names:
                if name in self._nodes:
                    self._touch(name)

    @property
    def change_seq(self) -> int:
        """The sequence number the next change will get."""
        return self._changes_base + len(self._changes)

    def changed_since(self, seq: int) -> list[str] | None:
        """Nodes changed at or after ``seq`` (may repeat), or None if the log no longer
        reaches back that far (the reader must then look at every node)."""
        if not self._changes_base <= seq <= self.change_seq:  # or not this cache's number
            return None
        return self._changes[seq - self._changes_base:]

    # -- nodes -------------------------------------------------------------------------
    def set_node(self, node: Node) -> None:
        with self.lock:
            info = self._nodes.get(node.name)
            if info is None:
                info = self._nodes[node.name] = NodeInfo(node.name)
            if info.node is None:
                self._node_order.append(node.name)
            else:
                self._allocatable.subtract(info.node.allocatable)
            self._allocatable.update(node.allocatable)
            info.node = node
            self._touch(node.name)

    def remove_node(self, name: str) -> list[Pod]:
        """Forget a node; returns the assumed pods and claims that sat on it."""
        with self.lock:
            info = self._nodes.get(name)
            if info is None:
                return []
            if info.node is not None:
                self._node_order.remove(name)
                self._allocatable.subtract(info.node.allocatable)
            stranded = [p for p in info.pods.values() if p.key in self._assumed]
            stranded += list(info.claims.values())
            info.node = None
            if not info.pods and not info.claims:
                del self._nodes[name]
            self._touch(name)
            return stranded

    def node(self, name: str) -> NodeInfo | None:
        info = self._nodes.get(name)
        return info if info is not None and info.node is not None else None

    def node_names(self) -> list[str]:
        """Names of the nodes that exist, in a stable order (for round-robin sampling)."""
        return self._node_order

    def nodes(self) -> Iterator[NodeInfo]:
        return map(self._nodes.__getitem__, self._node_order)

    def node_count(self) -> int:
        return len(self._node_order)

    def allocatable(self) -> Mapping[str, int]:
        """What the nodes that exist can hold in all, by resource."""
        return self._allocatable

    def _node_info(self, name: str) -> NodeInfo:
        info = self._nodes.get(name)
        if info is None:
            info = self._nodes[name] = NodeInfo(name)
        return info

    # -- node records and the indexes over them ------------------------------------------
    def _put(self, info: NodeInfo, pod: Pod, *, claim: bool = False) -> None:
        """``pod`` goes onto ``info`` (as a gang's claim if ``claim``), replacing its record
        there: the indexes follow."""
        replaced = info.add_claim(pod) if claim else info.add_pod(pod)
        if replaced is not None:
            self._index(replaced, info, claim, -1)
        self._index(pod, info, claim, 1)

    def _take(self, info: NodeInfo, pod_key: str, *, claim: bool = False) -> Pod | None:
        """``pod_key``'s pod (or claim) leaves ``info``: the indexes follow. Its record, if
        it was there."""
        pod = info.remove_claim(pod_key) if claim else info.remove_pod(pod_key)
        if pod is not None:
            self._index(pod, info, claim, -1)
        return pod

    def _index(self, pod: Pod, info: NodeInfo, claim: bool, sign: int) -> None:
        self._labels.account(pod, info, claim, sign)
        if not claim:
            self._priorities[pod.priority] += sign

    def take_off(self, name: str, pod_key: str) -> Pod | None:
        """Take pod ``pod_key`` off node record ``name``, the pod still known (a
        transaction's tentative eviction); its record there, if it was there. Under the
        lock; the caller marks the node changed."""
        info = self._nodes.get(name)
        return self._take(info, pod_key) if info is not None else None

    def put_back(self, name: str, pod: Pod) -> None:
        """Put ``pod`` back on node record ``name`` (a tentative eviction ends). Under the
        lock; the caller marks the node changed."""
        info = self._nodes.get(name)
        assert info is not None, f"node record {name} left during a transaction"
        self._put(info, pod)

    # -- pods --------------------------------------------------------------------------
    def pod(self, key: str) -> Pod | None:
        return self._pods.get(key)

    def pods(self) -> Iterator[Pod]:
        return iter(list(self._pods.values()))

    def group_pods(self, group_key: str) -> list[Pod]:
        return [self._pods[k] for k in self._groups.get(group_key, ())]

    def group_nodes(self, group_key: str, excluding: str = "") -> Counter[str]:
        """Node -> how many members of the group are bound, assumed or claimed there."""
        nodes = Counter(self._group_nodes.get(group_key, ()))
        group, node = self._counted.get(excluding, ("", ""))
        if excluding and group == group_key:
            nodes[node] -= 1
            if not nodes[node]:
                del nodes[node]
        return nodes

    def _recount(self, key: str) -> None:
        """Bring ``key``'s share of ``_group_nodes`` up to date with where it is now."""
        pod = self._pods.get(key)
        now = ("", "")
        if pod is not None and pod.group_key and not pod.deleting:
            node = pod.node_name or self._assumed.get(key) or self._claims.get(key)
            if node:
                now = (pod.group_key, node)
        before = self._counted.get(key, ("", ""))
        if now == before:
            return
        if before[0]:
            counts = self._group_nodes[before[0]]
            counts[before[1]] -= 1
            if not counts[before[1]]:
                del counts[before[1]]
            if not counts:
                del self._group_nodes[before[0]]
            del self._counted[key]
        if now[0]:
            self._group_nodes.setdefault(now[0], Counter())[now[1]] += 1
            self._counted[key] = now

    def labelled(self, selector: LabelSelector) -> Iterable[tuple[Pod, NodeInfo]] | None:
        """Pods bound, assumed or claimed on a node (node records of deleted nodes
        included) that may match ``selector``, each with its node record; None when the
        selector names no label value to look them up by (the caller visits every node).
        Under the lock; the answer is valid until the cache next changes."""
        return self._labels.candidates(selector, self._nodes.values())

    def placed_affinities(self) -> Iterator[tuple[PodAffinity, Iterable[tuple[Pod, NodeInfo]]]]:
        """Each distinct pod affinity of the pods bound, assumed or claimed on node records,
        with those pods and their node records. Under the lock."""
        return self._labels.affinities()

    def has_placed_affinities(self) -> bool:
        """Whether any pod bound, assumed or claimed on a node record has pod affinity."""
        return self._labels.has_affinities()

    def group_keys(self) -> list[str]:
        return list(self._groups)

    def label_keys(self) -> frozenset[str]:
        """The label keys the index of placed pods keeps current (a selector's first use
        adds its keys; a view's uses stay in the view)."""
        return self._labels.keys()

    def set_pod(self, pod: Pod) -> Pod | None:
        """Record a pod from the watch; returns the previous record."""
        with self.lock:
            old = self._pods.get(pod.key)
            if old is not None and old.uid != pod.uid:
                self.remove_pod(old.key)
                old = None
            if old is not None:
                self._unindex(old)
            self._pods[pod.key] = pod
            if pod.group_key:
                self._groups.setdefault(pod.group_key, set()).add(pod.key)
            if pod.node_name:
                self._assumed.pop(pod.key, None)
                self.drop_claim(pod.key)
                self._add_to_node(pod.node_name, pod)
            elif pod.key in self._assumed:
                # Still assumed: keep it on its node with the fresh record.
                self._add_to_node(self._assumed[pod.key], pod)
            self._recount(pod.key)
            return old

    def _add_to_node(self, node_name: str, pod: Pod) -> None:
        self._put(self._node_info(node_name), pod)
        self._touch(node_name)

    def _unindex(self, pod: Pod) -> None:
        node_name = pod.node_name or self._assumed.get(pod.key, "")
        if node_name and node_name in self._nodes:
            info = self._nodes[node_name]
            self._take(info, pod.key)
            self._touch(node_name)
            if info.node is None and not info.pods and not info.claims:
                del self._nodes[node_name]
        if pod.group_key:
            members = self._groups.get(pod.group_key)
            if members is not None:
                members.discard(pod.key)
                if not members:
                    del self._groups[pod.group_key]

    def remove_pod(self, key: str) -> Pod | None:
        with self.lock:
            pod = self._pods.pop(key, None)
            if pod is None:
                return None
            if pod.node_name in self._nodes:
                self._nodes[pod.node_name].take_back(key)
            self._unindex(pod)
            self._assumed.pop(key, None)
            self.drop_claim(key)
            self._recount(key)
            return pod

    def hand_over(self, victims: Iterable[Pod], takers: Iterable[str]) -> None:
        """``victims`` were evicted to make room for the claims of ``takers`` (pod keys):
        until they are gone, their room and those claims are counted once."""
        keys = frozenset(takers)
        with self.lock:
            for victim in victims:
                info = self._nodes.get(victim.node_name)
                if info is not None and victim.key in info.pods:
                    info.hand_over(victim.key, keys)
                    self._touch(victim.node_name)

    def take_back(self, victim: Pod) -> None:
        """``victim``'s eviction failed: it keeps its room, shared with no claim."""
        with self.lock:
            info = self._nodes.get(victim.node_name)
            if info is not None and info.take_back(victim.key):
                self._touch(victim.node_name)

    # -- in-flight decisions ------------------------------------------------------------
    def assume(self, pod: Pod, node_name: str) -> None:
        """Place ``pod`` on ``node_name`` before the binding is confirmed."""
        with self.lock:
            self.drop_claim(pod.key)
            self.forget(pod.key)  # assumed before, elsewhere: it leaves that node
            self._assumed[pod.key] = node_name
            self._add_to_node(node_name, pod)
            self._recount(pod.key)

    def forget(self, pod_key: str) -> None:
        """Undo an assume after a failed or rejected binding."""
        with self.lock:
            node_name = self._assumed.pop(pod_key, None)
            if node_name is None:
                return
            info = self._nodes.get(node_name)
            if info is not None:
                self._take(info, pod_key)
                self._touch(node_name)
            self._recount(pod_key)

    def assumed_node(self, pod_key: str) -> str:
        return self._assumed.get(pod_key, "")

    def is_assumed(self, pod_key: str) -> bool:
        return pod_key in self._assumed

    def claim(self, pod: Pod, node_name: str) -> None:
        with self.lock:
            self.drop_claim(pod.key)
            self._claims[pod.key] = node_name
            self._put(self._node_info(node_name), pod, claim=True)
            self._touch(node_name)
            self._recount(pod.key)

    def drop_claim(self, pod_key: str) -> None:
        with self.lock:
            node_name = self._claims.pop(pod_key, None)
            if node_name is not None and node_name in self._nodes:
                self._take(self._nodes[node_name], pod_key, claim=True)
                self._touch(node_name)
            if node_name is not None:
                self._recount(pod_key)

    def claimed_node(self, pod_key: str) -> str:
        return self._claims.get(pod_key, "")

    # -- transactions -------------------------------------------------------------------
    def transaction(self) -> Transaction:
        """Tentative changes recorded with their inverses (``coscheduling.core.transaction``):
        enter it (that takes the lock); it discards unless committed."""
        return Transaction(self)

    def record(self, name: str) -> NodeInfo | None:
        """The node record of ``name``, a deleted node's (still holding pods) included."""
        return self._nodes.get(name)

    def placement(self, pod_key: str, *nodes: str) -> Placement:
        """Where ``pod_key`` is assumed and claimed now, for :meth:`restore`; ``nodes``: other
        nodes a change may put it on."""
        assumed, claimed = self._assumed.get(pod_key), self._claims.get(pod_key)
        assumed_info = self._nodes.get(assumed) if assumed is not None else None
        claim_info = self._nodes.get(claimed) if claimed is not None else None
        names = {n for n in (assumed, claimed, *nodes) if n}
        return Placement(
            assumed, assumed_info.pods.get(pod_key) if assumed_info is not None else None,
            claimed, claim_info.claims.get(pod_key) if claim_info is not None else None,
            frozenset(n for n in names if n in self._nodes))

    def restore(self, pod_key: str, before: Placement) -> None:
        """Put ``pod_key``'s assumption and claim back as ``before`` (a transaction's undo):
        node records, the group counts and every index follow; node records a change made
        go again."""
        now = self.placement(pod_key)
        if now.assumed is not None:
            del self._assumed[pod_key]
            if now.assumed in self._nodes:
                self._take(self._nodes[now.assumed], pod_key)
        if now.claimed is not None:
            del self._claims[pod_key]
            if now.claimed in self._nodes:
                self._take(self._nodes[now.claimed], pod_key, claim=True)
        if before.assumed is not None:
            self._assumed[pod_key] = before.assumed
            if before.assumed_pod is not None:
                self._put(self._node_info(before.assumed), before.assumed_pod)
        if before.claimed is not None:
            self._claims[pod_key] = before.claimed
            if before.claim_pod is not None:
                self._put(self._node_info(before.claimed), before.claim_pod, claim=True)
        for name in {n for n in (*now.records, before.assumed, before.claimed) if n}:
            self._touch(name)
            info = self._nodes.get(name)
            if (info is not None and name not in before.records and info.node is None
                    and not info.pods and not info.claims):
                del self._nodes[name]
        self._recount(pod_key)


def _copy_record(info: NodeInfo) -> NodeInfo:
    """A node record of its own with the same contents (the pods' records are shared: a
    cache replaces a pod's record, never changes it). Field by field, not by a loop over
    its slots: this runs for every node while the lock is held, and is twice as fast."""
    copy = NodeInfo(info.name, info.node)
    copy.pods, copy.claims = dict(info.pods), dict(info.claims)
    copy.requested, copy.claimed = dict(info.requested), dict(info.claimed)
    copy.nonzero_cpu, copy.nonzero_memory = info.nonzero_cpu, info.nonzero_memory
    copy.claimed_nonzero_cpu = info.claimed_nonzero_cpu
    copy.claimed_nonzero_memory = info.claimed_nonzero_memory
    copy.handovers, copy.ports = dict(info.handovers), dict(info.ports)
    copy.unreadable = dict(info.unreadable)
    return copy


class Listers:
    """The objects scheduling reads besides nodes and pods, kept by their watches: PodGroups
    of every producer, members that finished, PriorityClasses and PodDisruptionBudgets."""

    def __init__(self) -> None:
        self.groups: dict[str, PodGroup] = {}
        # Members that finished (Succeeded/Failed), by group: the main pod watch leaves them.
        self.finished: dict[str, dict[str, str]] = {}
        self.priority_classes: dict[str, int] = {}
        self.pdbs: dict[str, Budget] = {}
        # Thread -> the made-up groups only it sees (a what-if's gang, see imagining).
        self._imagined: dict[int, dict[str, PodGroup]] = {}

    def podgroup(self, key: str) -> PodGroup | None:
        if self._imagined:
            mine = self._imagined.get(threading.get_ident())
            if mine is not None and key in mine:
                return mine[key]
        return self.groups.get(key)

    def podgroups(self) -> dict[str, PodGroup]:
        mine = self._imagined.get(threading.get_ident()) if self._imagined else None
        return {**self.groups, **mine} if mine else self.groups

    @contextmanager
    def imagining(self, group: PodGroup) -> Iterator[None]:
        """``group`` is listed for the calling thread alone until the block ends (a what-if's
        gang on its view): the watches' groups and every other thread never see it."""
        thread = threading.get_ident()
        assert thread not in self._imagined, "a thread imagines one group at a time"
        self._imagined[thread] = {group.key: group}
        try:
            yield
        finally:
            del self._imagined[thread]

    def finished_members(self, group_key: str) -> dict[str, str]:
        return self.finished.get(group_key, {})

    def priority_class(self, name: str) -> int | None:
        return self.priority_classes.get(name)

    def budgets(self) -> list[Budget]:
        return list(self.pdbs.values())
