"""A transaction over the cache undoes exactly what it did: random caches (nodes, a deleted
node still holding pods, bound pods with labels, pod affinities, priorities and host ports,
assumed pods, gang members with claims, hand-overs, an indexed label key) and random
sequences of tentative changes with savepoints, rollbacks and nested scopes. A discard leaves
every store, index and node record as it was; a commit leaves them as the changes that were
not rolled back, applied directly to a second cache built alike. Either way the cache's
indexes hold exactly what its node records hold. Every node that differed at some point is
marked changed since then, so per-signature node tables re-read it."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduling.api.nodes import parse_node
from coscheduling.api.podaffinity import parse_label_selector
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.cache import Cache
from coscheduling.framework.nodeinfo import NodeInfo
from tests.simulation import GROUP_LABEL

NODES = ("n0", "n1", "n2", "n3")
GHOST = "ghost"  # a node that does not exist: a claim there makes a node record
APPS = ("a", "b")


@dataclass(frozen=True)
class PodSpec:
    name: str
    cpu: int
    priority: int
    app: str
    group: str  # "" for none
    anti: bool  # required anti-affinity to app=a
    port: bool
    state: str  # bound, assumed, claimed, pending, outside (not in the cache's pods)
    node: str


@dataclass(frozen=True)
class World:
    nodes: int
    pods: tuple[PodSpec, ...]
    deleted: bool  # the last node is deleted after its pods are placed
    handovers: tuple[tuple[int, tuple[int, ...]], ...]  # (victim, takers) by pod index
    index_app: bool  # the label index keeps the key "app"


@st.composite
def worlds(draw: st.DrawFn) -> World:
    nodes = draw(st.integers(1, len(NODES)))
    specs = []
    for i in range(draw(st.integers(1, 9))):
        state = draw(st.sampled_from(("bound", "assumed", "claimed", "pending", "outside")))
        specs.append(PodSpec(
            f"p{i}", draw(st.integers(0, 3)), draw(st.integers(0, 2)),
            draw(st.sampled_from(APPS)), draw(st.sampled_from(("", "g1", "g2"))),
            draw(st.booleans()), draw(st.booleans()), state,
            draw(st.sampled_from(NODES[:nodes]))))
    handovers = draw(st.lists(st.tuples(st.integers(0, len(specs) - 1),
                                        st.lists(st.integers(0, len(specs) - 1), max_size=3)
                                        .map(tuple)), max_size=3))
    return World(nodes, tuple(specs), draw(st.booleans()), tuple(handovers), draw(st.booleans()))


def _pod(spec: PodSpec, node: str = "") -> Pod:
    labels = {"app": spec.app, **({GROUP_LABEL: spec.group} if spec.group else {})}
    container: dict[str, Any] = {"name": "c", "resources": {"requests": {
        "cpu": str(spec.cpu), "memory": f"{spec.cpu}Gi"}}}
    if spec.port:
        container["ports"] = [{"containerPort": 80, "hostPort": 8080}]
    body: dict[str, Any] = {"containers": [container], "priority": spec.priority}
    if spec.anti:
        body["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "a"}},
             "topologyKey": "kubernetes.io/hostname"}]}}
    if node:
        body["nodeName"] = node
    return parse_pod({"metadata": {"name": spec.name, "namespace": "ns", "uid": spec.name,
                                   "labels": labels}, "spec": body})


def build(world: World) -> Cache:
    """The world's cache; built twice alike for a commit's reference."""
    cache = Cache()
    for name in NODES[:world.nodes]:
        cache.set_node(parse_node({"metadata": {"name": name, "labels": {"zone": name[-1]}},
                                   "status": {"allocatable": {"cpu": "8", "memory": "8Gi",
                                                              "pods": "10"}}}))
    if world.index_app:
        cache.labelled(parse_label_selector({"matchLabels": {"app": "a"}}, "selector"))
    for spec in world.pods:
        if spec.state == "bound":
            cache.set_pod(_pod(spec, spec.node))
            continue
        if spec.state != "outside":
            cache.set_pod(_pod(spec))
        if spec.state == "assumed":
            cache.assume(_pod(spec), spec.node)
        elif spec.state == "claimed":
            cache.claim(_pod(spec), spec.node)
    for victim, takers in world.handovers:
        cache.hand_over([pods(world)[victim]], [pods(world)[t].key for t in takers])
    if world.deleted:
        cache.remove_node(NODES[world.nodes - 1])
    return cache


def pods(world: World) -> list[Pod]:
    return [_pod(s, s.node if s.state == "bound" else "") for s in world.pods]


# -- the operations ---------------------------------------------------------------------
Op = tuple[Any, ...]
CHANGES = ("claim", "drop_claim", "assume", "forget", "evict", "hand_over", "take_back")
SCOPES = ("mark", "rollback", "open", "close")


@st.composite
def ops(draw: st.DrawFn, world: World) -> list[Op]:
    count = len(world.pods)
    targets = st.sampled_from((*NODES[:world.nodes], GHOST))
    index = st.integers(0, count - 1)
    # Any pod may be claimed for (a bound pod's claim is a slot of its own in every index);
    # only pods not bound are assumed (an assumption replaces the record of a bound pod).
    unbound = [i for i, s in enumerate(world.pods) if s.state != "bound"]
    chosen: list[Op] = []
    for _ in range(draw(st.integers(0, 24))):
        kind = draw(st.sampled_from((*CHANGES, *SCOPES, *SCOPES, "evict")))
        if kind == "claim":
            chosen.append((kind, draw(index), draw(targets)))
        elif kind == "assume" and unbound:
            chosen.append((kind, draw(st.sampled_from(unbound)), draw(targets)))
        elif kind == "assume":
            continue
        elif kind in ("drop_claim", "forget", "take_back"):
            chosen.append((kind, draw(index)))
        elif kind == "evict":
            chosen.append((kind, tuple(draw(st.lists(index, max_size=3)))))
        elif kind == "hand_over":
            chosen.append((kind, tuple(draw(st.lists(index, max_size=2))),
                           tuple(draw(st.lists(index, max_size=2)))))
        elif kind == "close":
            chosen.append((kind, draw(st.booleans())))
        else:
            chosen.append((kind,))
    return chosen


def apply(target: Any, op: Op, members: list[Pod]) -> None:
    """One change, on a transaction or (the reference) directly on a cache."""
    kind = op[0]
    if kind in ("claim", "assume"):
        getattr(target, kind)(members[op[1]], op[2])
    elif kind in ("drop_claim", "forget"):
        getattr(target, kind)(members[op[1]].key)
    elif kind == "take_back":
        target.take_back(members[op[1]])
    elif kind == "hand_over":
        target.hand_over([members[i] for i in op[1]], [members[i].key for i in op[2]])


def evict_directly(cache: Cache, victims: list[Pod]) -> list[tuple[str, Pod]]:
    gone = []
    for pod in victims:
        held = cache.take_off(pod.node_name, pod.key) if pod.node_name else None
        if held is not None:
            gone.append((pod.node_name, held))
    return gone


def put_back_directly(cache: Cache, gone: list[tuple[str, Pod]]) -> None:
    for name, pod in gone:
        cache.put_back(name, pod)


# -- what the cache holds ---------------------------------------------------------------
def _nonzero(amounts: dict[Any, int]) -> dict[Any, int]:
    """Totals without the zero entries the records keep for reuse (they mean nothing)."""
    return {k: v for k, v in amounts.items() if v}


def same(record: Any) -> str:
    """Records compare by identity (``eq=False``): what a record is, the same in two caches
    built alike."""
    return repr(record)


def _pods(held: dict[str, Pod]) -> dict[str, str]:
    return {key: same(pod) for key, pod in held.items()}


def node_print(cache: Cache, info: NodeInfo | None) -> Any:
    """Everything a node record keeps but its memo of shared room (asked anew)."""
    if info is None:
        return None
    return (info.name, same(info.node), _pods(info.pods), _nonzero(info.requested),
            info.nonzero_cpu, info.nonzero_memory, _pods(info.claims), _nonzero(info.claimed),
            info.claimed_nonzero_cpu, info.claimed_nonzero_memory,
            list(info.handovers.items()), _nonzero(info.ports), dict(info.unreadable))


def _entries(cache: Cache, bucket: dict[Any, tuple[Pod, NodeInfo]]) -> dict[Any, Any]:
    return {slot: (same(pod), info.name, cache.record(info.name) is info)
            for slot, (pod, info) in bucket.items()}


def fingerprint(cache: Cache) -> dict[str, Any]:
    """Every store and index of the cache, and every node record (order aside)."""
    labels = cache._labels
    return {
        "nodes": {name: node_print(cache, info) for name, info in cache._nodes.items()},
        "order": list(cache._node_order),
        "pods": _pods(cache._pods),
        "assumed": dict(cache._assumed),
        "claims": dict(cache._claims),
        "groups": {k: set(v) for k, v in cache._groups.items()},
        "group_nodes": {k: dict(v) for k, v in cache._group_nodes.items()},
        "counted": dict(cache._counted),
        "priorities": _nonzero(cache._priorities),
        "namespace_labels": dict(cache.namespace_labels),
        "label_keys": {key: {value: _entries(cache, bucket) for value, bucket in values.items()}
                       for key, values in labels._keys.items()},
        "label_affinities": {a: _entries(cache, b) for a, b in labels._affinities.items()},
        "scopes": len(cache.scopes),
    }


# -- the run ------------------------------------------------------------------------------
@dataclass
class Run:
    """Runs the operations in transactions, keeping the changes still in effect (the
    reference's list) and, after each step, what each node record looked like."""

    cache: Cache
    members: list[Pod]
    kept: list[Op] = field(default_factory=list)
    looks: list[tuple[int, dict[str, Any]]] = field(default_factory=list)

    def look(self) -> None:
        self.looks.append((self.cache.change_seq, self._nodes()))

    def _nodes(self) -> dict[str, Any]:
        return {name: node_print(self.cache, self.cache.record(name))
                for name in (*NODES, GHOST)}

    def scope(self, tx: Any, chosen: list[Op], depth: int = 0) -> list[Op]:
        """Run ``chosen`` in ``tx`` until a "close" ends this scope; returns what is left."""
        start, marks = len(self.kept), []
        while chosen:
            op, chosen = chosen[0], chosen[1:]
            kind = op[0]
            if kind == "close" and depth:
                self._end(tx, start, commit=op[1])
                return chosen
            if kind == "open":
                with self.cache.transaction() as inner:
                    chosen = self.scope(inner, chosen, depth + 1)
            elif kind == "mark":
                marks.append((tx.mark(), len(self.kept)))
            elif kind == "rollback" and marks:
                mark, kept = marks.pop()
                tx.rollback_to(mark)
                del self.kept[kept:]
            elif kind == "evict":
                tx.evict([self.members[i] for i in op[1]])
                self.kept.append(op)
            elif kind in CHANGES:
                apply(tx, op, self.members)
                self.kept.append(op)
            self.look()
        if depth:
            self._end(tx, start, commit=True)
        return chosen

    def _end(self, tx: Any, start: int, *, commit: bool) -> None:
        if commit:
            tx.commit()
            self.kept.append(("end", start))
        else:
            tx.discard()
            del self.kept[start:]
        self.look()


def reference(world: World, kept: list[Op]) -> Cache:
    """The kept changes applied directly; each scope's evictions end with the scope."""
    cache, members = build(world), pods(world)
    evicted: list[tuple[int, list[tuple[str, Pod]]]] = []
    for at, op in enumerate(kept):
        if op[0] == "evict":
            evicted.append((at, evict_directly(cache, [members[i] for i in op[1]])))
        elif op[0] == "end":
            for _, gone in reversed([e for e in evicted if e[0] >= op[1]]):
                put_back_directly(cache, gone)
            evicted = [e for e in evicted if e[0] < op[1]]
        else:
            apply(cache, op, members)
    for _, gone in reversed(evicted):
        put_back_directly(cache, gone)
    return cache


def check_indexes(cache: Cache) -> None:
    """The cache's indexes hold exactly what its node records hold: each fact kept once,
    the rest derived from it."""
    held = [(pod, info, claim) for info in cache._nodes.values()
            for claim, pods in ((False, info.pods), (True, info.claims)) for pod in pods.values()]
    priorities: Counter[int] = Counter(pod.priority for pod, _, claim in held if not claim)
    assert _nonzero(cache._priorities) == dict(priorities)
    affinities: dict[Any, dict[Any, Any]] = {}
    labelled: dict[str, dict[str, dict[Any, Any]]] = {key: {} for key in cache._labels._keys}
    for pod, info, claim in held:
        slot, entry = (pod.key, info.name, claim), (same(pod), info.name, True)
        if pod.pod_affinity is not None:
            affinities.setdefault(pod.pod_affinity, {})[slot] = entry
        for key, values in labelled.items():
            if key in pod.labels:
                values.setdefault(pod.labels[key], {})[slot] = entry
    printed = fingerprint(cache)
    assert printed["label_affinities"] == affinities
    assert printed["label_keys"] == labelled


def check_marks(run: Run) -> None:
    """Every node record that differs now from a look is marked changed since it."""
    now = run._nodes()
    for seq, then in run.looks:
        changed = run.cache.changed_since(seq)
        if changed is None:
            continue
        differ = {name for name in now if now[name] != then[name]}
        assert differ <= set(changed), f"changed but not marked since {seq}: {differ}"


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_discard_and_commit_are_exact(data: st.DataObject) -> None:
    world = data.draw(worlds())
    chosen = data.draw(ops(world))
    commit = data.draw(st.booleans())
    cache = build(world)
    before = fingerprint(cache)
    run = Run(cache, pods(world))
    run.look()
    with cache.lock:
        with cache.transaction() as tx:
            rest = run.scope(tx, chosen)
            while rest:  # a "close" with no nested scope open: the rest runs at the root
                rest = run.scope(tx, rest[1:])
            if commit:
                tx.commit()
        run.look()
    expected = fingerprint(reference(world, run.kept)) if commit else before
    assert fingerprint(cache) == expected
    check_indexes(cache)
    check_marks(run)


def test_a_transaction_takes_the_lock_and_is_the_only_one() -> None:
    cache = Cache()
    with cache.transaction() as tx:
        assert cache.lock._is_owned()  # type: ignore[attr-defined]
        with cache.transaction() as inner:
            with pytest.raises(AssertionError, match="innermost"):
                tx.claim(_pod(PodSpec("p", 1, 0, "a", "", False, False, "", "")), "n0")
            inner.commit()
    assert not cache.lock._is_owned()  # type: ignore[attr-defined]
    assert cache.scopes == []




def test_a_commit_keeps_the_claims_made_without_the_evicted_pods() -> None:
    """What a preemption does: its members claim the room of victims taken off their node,
    and committing keeps the claims while the victims (still running) return."""
    world = World(1, (PodSpec("v", 6, 0, "a", "", False, False, "bound", "n0"),
                      PodSpec("m", 6, 1, "b", "g1", False, False, "pending", "n0")),
                  False, (), False)
    cache = build(world)
    victim, member = pods(world)
    with cache.transaction() as tx:
        tx.evict([victim])
        info = cache.node("n0")
        assert info is not None and victim.key not in info.pods
        tx.claim(member, "n0")
        tx.commit()
    assert victim.key in info.pods and cache.claimed_node(member.key) == "n0"
    assert info.used("cpu") == 12000


def test_a_rollback_to_a_savepoint_undoes_only_what_came_after() -> None:
    world = World(2, tuple(PodSpec(f"m{i}", 1, 0, "a", "g1", False, False, "pending", "n0")
                           for i in range(3)), False, (), False)
    cache = build(world)
    first, second, third = pods(world)
    with cache.transaction() as tx:
        tx.claim(first, "n0")
        mark = tx.mark()
        tx.claim(second, "n0")
        tx.claim(third, "n1")
        tx.rollback_to(mark)
        assert [cache.claimed_node(p.key) for p in (first, second, third)] == ["n0", "", ""]
        assert cache.group_nodes("ns/g1") == {"n0": 1}
    assert cache.claimed_node(first.key) == "" and not cache.group_nodes("ns/g1")


def test_another_thread_cannot_use_an_open_transaction() -> None:
    cache = Cache()
    errors: list[BaseException] = []
    with cache.transaction() as tx:
        def use() -> None:
            try:
                tx.mark()
            except AssertionError as error:
                errors.append(error)
        worker = threading.Thread(target=use)
        worker.start()
        worker.join()
    assert errors and "holds the cache lock" in str(errors[0])
