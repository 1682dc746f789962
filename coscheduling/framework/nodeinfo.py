"""A node as the framework's plugins see it: the node object and what sits on it.

It accounts pods bound there, pods assumed there (placed, not yet bound) and claims (room a
gang reserved for members it has not placed yet); room handed over from preemption victims to
the claims that take it is counted once (see ``used``). The cache (:mod:`coscheduling.core.cache`)
keeps one per node; Filter and Score plugins read it. A record holds only what is true of its
node: the indexes across nodes (pods by label and by pod affinity, priorities) are the cache's,
which it keeps as it puts pods and claims on records and takes them off.
"""

from __future__ import annotations

from collections.abc import Callable

from coscheduling.api.nodes import Node
from coscheduling.api.pods import Pod, unreadable_error
from coscheduling.api.quantity import add_into


class NodeInfo:
    """A node with the requests of the pods, assumed pods and claims that sit on it."""

    __slots__ = (
        "_shared_memo",
        "claimed",
        "claimed_nonzero_cpu",
        "claimed_nonzero_memory",
        "claims",
        "handovers",
        "name",
        "node",
        "nonzero_cpu",
        "nonzero_memory",
        "pods",
        "ports",
        "requested",
        "unreadable",
    )

    def __init__(self, name: str, node: Node | None = None) -> None:
        self.name = name
        self.node = node
        self.pods: dict[str, Pod] = {}
        self.requested: dict[str, int] = {}
        self.nonzero_cpu = 0
        self.nonzero_memory = 0
        self.claims: dict[str, Pod] = {}
        self.claimed: dict[str, int] = {}
        # Claims weigh in scoring as the pods they hold room for will: with the non-zero
        # cpu / memory defaults of best-effort containers, as an assumed pod does.
        self.claimed_nonzero_cpu = 0
        self.claimed_nonzero_memory = 0
        # Victims still on this node -> the claims (pod keys) that will take their room.
        self.handovers: dict[str, frozenset[str]] = {}
        # (resource, or "" for the pod count; excluding) -> _shared's answer, while pods,
        # claims and handovers stay as they are: filters ask it per node and resource.
        self._shared_memo: dict[tuple[str, str], int] = {}
        self.ports: dict[tuple[str, str, int], int] = {}
        # Pods here whose spec could not be read (key -> parse error): the room they take is
        # unknown, never zero, so the node takes no new pods while any is here.
        self.unreadable: dict[str, str] = {}

    def _account(self, pod: Pod, sign: int) -> None:
        self._shared_memo.clear()
        add_into(self.requested, pod.requests, sign)
        self.nonzero_cpu += sign * pod.nonzero_cpu
        self.nonzero_memory += sign * pod.nonzero_memory
        for port in pod.host_ports:
            self.ports[port] = self.ports.get(port, 0) + sign

    def add_pod(self, pod: Pod) -> Pod | None:
        """Put ``pod`` here; the record of it that it replaces (so the cache's indexes can
        drop it), if any."""
        replaced = self.remove_pod(pod.key) if pod.key in self.pods else None
        self.pods[pod.key] = pod
        self._account(pod, 1)
        if pod.parse_error and unreadable_error(pod):
            self.unreadable[pod.key] = pod.parse_error
        return replaced

    def remove_pod(self, key: str) -> Pod | None:
        """Take pod ``key`` off; its record here, if it was here."""
        pod = self.pods.pop(key, None)
        if pod is not None:
            self._account(pod, -1)
            if self.unreadable:
                self.unreadable.pop(key, None)
        return pod

    @property
    def closed(self) -> bool:
        """Whether the node takes no new pods because something here cannot be read."""
        return bool(self.unreadable) or (self.node is not None and bool(self.node.parse_error))

    def closed_reason(self) -> str:
        """Why the node is ``closed`` ("" when it is not): the node itself cannot be read,
        or a pod here, whose room is unknown (counting it as zero could over-commit). The
        pod is not named: the reason reaches pods of every namespace (the pod itself has
        a Warning event naming its field)."""
        if self.node is not None and self.node.parse_error:
            return f"node {self.name} cannot be read ({self.node.parse_error})"
        if self.unreadable:
            return ("a pod on the node cannot be read (see its Unreadable event): the room "
                    "it takes is unknown")
        return ""

    def add_claim(self, pod: Pod) -> Pod | None:
        """Claim room here for ``pod``; the claim it replaces, if any."""
        replaced = self.remove_claim(pod.key)
        self.claims[pod.key] = pod
        self._account_claim(pod, 1)
        return replaced

    def remove_claim(self, key: str) -> Pod | None:
        """Drop ``key``'s claim here; the claim, if there was one."""
        pod = self.claims.pop(key, None)
        if pod is not None:
            self._account_claim(pod, -1)
        return pod

    def _account_claim(self, pod: Pod, sign: int) -> None:
        self._shared_memo.clear()
        add_into(self.claimed, pod.requests, sign)
        self.claimed_nonzero_cpu += sign * pod.nonzero_cpu
        self.claimed_nonzero_memory += sign * pod.nonzero_memory

    def used(self, resource: str, excluding: str = "") -> int:
        """Requested plus claimed ``resource``, not counting ``excluding``'s own claim, and
        counting room handed over by victims to claims once."""
        total = self.requested.get(resource, 0) + self.claimed.get(resource, 0)
        own = self.claims.get(excluding) if excluding else None
        if own is not None:
            total -= own.requests.get(resource, 0)
        if self.handovers:
            total -= self._shared(resource, excluding)
        return total

    def _shared(self, resource: str, excluding: str) -> int:
        """What victims still here and the claims that take their room both count: per
        preemption, the smaller of the two sides (a claim beyond its victims' room uses room
        that was free; victims beyond the claims still hold theirs). A claim is shared at
        most once, even if two preemptions name it. ``resource`` "" counts pods."""
        memo = self._shared_memo.get((resource, excluding))
        if memo is None:
            memo = self._shared_memo[resource, excluding] = self._count_shared(
                (lambda p: p.requests.get(resource, 0)) if resource else (lambda p: 1),
                excluding)
        return memo

    def _count_shared(self, amount: Callable[[Pod], int], excluding: str) -> int:
        victims: dict[frozenset[str], int] = {}
        for key, takers in self.handovers.items():
            pod = self.pods.get(key)
            if pod is not None:  # not taken out for a preemption's simulation
                victims[takers] = victims.get(takers, 0) + amount(pod)
        unshared: dict[str, int] = {}
        shared = 0
        for takers, freed in victims.items():
            for key in sorted(takers):
                claim = self.claims.get(key)
                if freed <= 0:
                    break
                if claim is None or key == excluding:
                    continue
                left = unshared.get(key, amount(claim))
                take = min(left, freed)
                unshared[key] = left - take
                freed -= take
                shared += take
        return shared

    def hand_over(self, victim: str, takers: frozenset[str]) -> None:
        self._shared_memo.clear()
        self.handovers[victim] = takers

    def forget_shared(self) -> None:
        """The hand-overs were set anew: what is shared is counted again when asked."""
        self._shared_memo.clear()

    def take_back(self, victim: str) -> bool:
        """``victim``'s room is its own again (it is gone, or its eviction failed); whether
        it was handed over."""
        self._shared_memo.clear()
        return self.handovers.pop(victim, None) is not None

    def nonzero_used(self, cpu: bool, excluding: str = "") -> int:
        """Non-zero cpu (``cpu``) or memory requested and claimed, for scoring; not counting
        ``excluding``'s own claim."""
        if cpu:
            total = self.nonzero_cpu + self.claimed_nonzero_cpu
        else:
            total = self.nonzero_memory + self.claimed_nonzero_memory
        own = self.claims.get(excluding) if excluding else None
        if own is not None:
            total -= own.nonzero_cpu if cpu else own.nonzero_memory
        return total

    def group_members(self, group_key: str, excluding: str = "") -> int:
        """Members of ``group_key`` placed, assumed or claimed on this node."""
        count = 0
        for holder in (self.pods, self.claims):
            for key, pod in holder.items():
                if key != excluding and pod.group_key == group_key:
                    count += 1
        return count

    def pod_count(self, excluding: str = "") -> int:
        count = len(self.pods) + len(self.claims)
        if excluding and excluding in self.claims:
            count -= 1
        if self.handovers:
            count -= self._shared("", excluding)
        return count
