"""InterPodAffinity against kube-scheduler's documented semantics, table by table.

Each case builds a small cluster in the real scheduler's cache, then runs the plugin's
PreFilter, Filter on every node and Score + normalize over the feasible ones.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling import GROUP_LABEL
from coscheduling.api.namespaces import parse_namespace
from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config import parse_config
from coscheduling.core.eventhandlers import NamespaceEvents
from coscheduling.core.scheduler import Scheduler
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Code
from coscheduling.plugins.interpodaffinity import NAME, InterPodAffinity
from coscheduling.plugins.registry import default_registry
from tests.simulation import SimCluster, normalized_scores

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
# n1, n2 in zone a; n3 in zone b; n4 has no zone label.
NODES = {"n1": "a", "n2": "a", "n3": "b", "n4": None}


def pod_doc(name: str, labels: dict[str, str] | None = None, namespace: str = "ns",
            affinity: dict[str, Any] | None = None, node: str = "",
            group: str = "") -> dict[str, Any]:
    meta_labels = dict(labels or {})
    if group:
        meta_labels[GROUP_LABEL] = group
    spec: dict[str, Any] = {"schedulerName": "batch-scheduler", "nodeName": node,
                            "containers": [{"name": "c", "resources": {
                                "requests": {"cpu": "100m"}}}]}
    if affinity is not None:
        spec["affinity"] = affinity
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"u-{name}",
                         "labels": meta_labels,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": spec}


def make_pod(name: str, **kwargs: Any) -> Pod:
    pod = parse_pod(pod_doc(name, **kwargs))
    assert not pod.parse_error, pod.parse_error
    return pod


def term(key: str, labels: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"topologyKey": key, "labelSelector": {"matchLabels": labels or {}}, **extra}


def required(kind: str, *terms: dict[str, Any]) -> dict[str, Any]:
    return {kind: {"requiredDuringSchedulingIgnoredDuringExecution": list(terms)}}


def preferred(kind: str, *weighted: tuple[int, dict[str, Any]]) -> dict[str, Any]:
    return {kind: {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": w, "podAffinityTerm": t} for w, t in weighted]}}


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    registry = default_registry()
    s = Scheduler(parse_config(None, registry), registry, client=None)
    for name, zone in NODES.items():
        labels = {HOST: name, **({ZONE: zone} if zone else {})}
        s.cache.set_node(parse_node({"metadata": {"name": name, "labels": labels},
                                     "status": {"allocatable": {"cpu": "8", "pods": "110"}}}))
    yield s
    s.stop()


def plugin(s: Scheduler) -> InterPodAffinity:
    found = s.framework.instances[NAME]
    assert isinstance(found, InterPodAffinity)
    return found


def place(s: Scheduler, pods: list[tuple[Pod, str]]) -> None:
    """Existing pods: bound with a node name, or claimed when the node is 'claim:<n>'."""
    for pod, where in pods:
        if where.startswith("claim:"):
            s.cache.set_pod(pod)
            s.cache.claim(pod, where.removeprefix("claim:"))
        else:
            pod.node_name = where
            s.cache.set_pod(pod)


def run_filter(s: Scheduler, pod: Pod) -> dict[str, str]:
    """Node -> "" if it passes, else the reason."""
    p = plugin(s)
    state = CycleState()
    status = p.pre_filter(state, pod)
    result = {}
    for info in s.cache.nodes():
        if status.code == Code.SKIP:
            result[info.name] = ""
            continue
        verdict = p.filter(state, pod, info)
        result[info.name] = "" if verdict.ok else verdict.message
    return result


AFF = "node(s) didn't match pod affinity rules"
ANTI = "node(s) didn't match pod anti-affinity rules"
EXISTING = "node(s) didn't satisfy existing pods anti-affinity rules"

FILTER_CASES: list[tuple[str, list[tuple[dict[str, Any], str]], dict[str, Any],
                         dict[str, str]]] = [
    ("affinity follows a matching pod's zone; nodes without the key fail",
     [(dict(name="db", labels={"app": "db"}), "n1")],
     dict(affinity=required("podAffinity", term(ZONE, {"app": "db"}))),
     {"n1": "", "n2": "", "n3": AFF, "n4": AFF}),
    ("first of its kind: nothing matches anywhere and the pod matches its own term",
     [],
     dict(labels={"app": "db"}, affinity=required("podAffinity", term(ZONE, {"app": "db"}))),
     {"n1": "", "n2": "", "n3": "", "n4": AFF}),
    ("no match anywhere and the pod does not match its own term: nowhere",
     [],
     dict(labels={"app": "web"}, affinity=required("podAffinity", term(ZONE, {"app": "db"}))),
     {"n1": AFF, "n2": AFF, "n3": AFF, "n4": AFF}),
    ("an existing match ends the first-of-its-kind exception",
     [(dict(name="db", labels={"app": "db"}), "n3")],
     dict(labels={"app": "db"}, affinity=required("podAffinity", term(ZONE, {"app": "db"}))),
     {"n1": AFF, "n2": AFF, "n3": "", "n4": AFF}),
    ("an existing pod must match all affinity terms at once",
     [(dict(name="a", labels={"app": "db"}), "n1"), (dict(name="b", labels={"tier": "x"}), "n3")],
     dict(affinity=required("podAffinity", term(ZONE, {"app": "db"}), term(ZONE, {"tier": "x"}))),
     {"n1": AFF, "n2": AFF, "n3": AFF, "n4": AFF}),
    ("anti-affinity on hostname keeps off the matching pod's node",
     [(dict(name="web", labels={"app": "web"}), "n1")],
     dict(affinity=required("podAntiAffinity", term(HOST, {"app": "web"}))),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("anti-affinity on zone keeps off the whole zone; a node without the key is free",
     [(dict(name="web", labels={"app": "web"}), "n1")],
     dict(affinity=required("podAntiAffinity", term(ZONE, {"app": "web"}))),
     {"n1": ANTI, "n2": ANTI, "n3": "", "n4": ""}),
    ("symmetry: an existing pod's anti-affinity keeps the matching pod out of its zone",
     [(dict(name="loner", affinity=required("podAntiAffinity", term(ZONE, {"app": "web"}))),
       "n3")],
     dict(labels={"app": "web"}),
     {"n1": "", "n2": "", "n3": EXISTING, "n4": ""}),
    ("claimed pods count as present",
     [(dict(name="web", labels={"app": "web"}), "claim:n2")],
     dict(affinity=required("podAntiAffinity", term(HOST, {"app": "web"}))),
     {"n1": "", "n2": ANTI, "n3": "", "n4": ""}),
    ("terms look in the pod's own namespace by default",
     [(dict(name="web", labels={"app": "web"}, namespace="other"), "n1")],
     dict(affinity=required("podAntiAffinity", term(HOST, {"app": "web"}))),
     {"n1": "", "n2": "", "n3": "", "n4": ""}),
    ("listed namespaces",
     [(dict(name="web", labels={"app": "web"}, namespace="other"), "n1")],
     dict(affinity=required("podAntiAffinity",
                            term(HOST, {"app": "web"}, namespaces=["other"]))),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("an empty namespaceSelector means every namespace",
     [(dict(name="web", labels={"app": "web"}, namespace="other"), "n1")],
     dict(affinity=required("podAntiAffinity",
                            term(HOST, {"app": "web"}, namespaceSelector={}))),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("a namespaceSelector matches namespace labels",
     [(dict(name="web", labels={"app": "web"}, namespace="other"), "n1"),
      (dict(name="web2", labels={"app": "web"}, namespace="third"), "n3")],
     dict(affinity=required("podAntiAffinity", term(
         HOST, {"app": "web"}, namespaceSelector={"matchLabels": {"team": "x"}}))),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("matchLabelKeys narrows the selector to the pod's own value",
     [(dict(name="w1", labels={"app": "web", "job": "j2"}), "n1"),
      (dict(name="w2", labels={"app": "web", "job": "j1"}), "n2")],
     dict(labels={"app": "web", "job": "j1"}, affinity=required(
         "podAntiAffinity", term(HOST, {"app": "web"}, matchLabelKeys=["job"]))),
     {"n1": "", "n2": ANTI, "n3": "", "n4": ""}),
    ("mismatchLabelKeys keeps away from other values only",
     [(dict(name="w1", labels={"app": "web", "job": "j2"}), "n1"),
      (dict(name="w2", labels={"app": "web", "job": "j1"}), "n2")],
     dict(labels={"app": "web", "job": "j1"}, affinity=required(
         "podAntiAffinity", term(HOST, {"app": "web"}, mismatchLabelKeys=["job"]))),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("a missing labelSelector matches no pod",
     [(dict(name="web", labels={"app": "web"}), "n1")],
     dict(affinity=required("podAntiAffinity", {"topologyKey": HOST})),
     {"n1": "", "n2": "", "n3": "", "n4": ""}),
    ("an empty labelSelector matches every pod",
     [(dict(name="web", labels={"app": "web"}), "n1")],
     dict(affinity=required("podAntiAffinity", {"topologyKey": HOST, "labelSelector": {}})),
     {"n1": ANTI, "n2": "", "n3": "", "n4": ""}),
    ("matchExpressions",
     [(dict(name="web", labels={"app": "web"}), "n1"), (dict(name="db", labels={"app": "db"}),
                                                        "n3")],
     dict(affinity=required("podAntiAffinity", {"topologyKey": HOST, "labelSelector": {
         "matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}})),
     {"n1": "", "n2": "", "n3": ANTI, "n4": ""}),
]


@pytest.mark.parametrize(("why", "existing", "incoming", "expected"), FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(sched: Scheduler, why: str, existing: list[tuple[dict[str, Any], str]],
                incoming: dict[str, Any], expected: dict[str, str]) -> None:
    sched.cache.namespace_labels.update({"other": {"team": "x"}, "third": {"team": "y"}})
    place(sched, [(make_pod(**doc), where) for doc, where in existing])
    assert run_filter(sched, make_pod("incoming", **incoming)) == expected


def test_the_pods_own_claim_does_not_count_against_it(sched: Scheduler) -> None:
    anti = required("podAntiAffinity", term(HOST, {"app": "web"}))
    pod = make_pod("me", labels={"app": "web"}, affinity=anti)
    sched.cache.set_pod(pod)
    sched.cache.claim(pod, "n1")
    assert run_filter(sched, pod)["n1"] == ""


def scores(s: Scheduler, pod: Pod) -> dict[str, int]:
    return normalized_scores(plugin(s), s.cache.nodes(), pod)


SCORE_CASES: list[tuple[str, list[tuple[dict[str, Any], str]], dict[str, Any],
                        dict[str, int]]] = [
    ("preferred affinity toward a zone",
     [(dict(name="db", labels={"app": "db"}), "n3")],
     dict(affinity=preferred("podAffinity", (5, term(ZONE, {"app": "db"})))),
     {"n1": 0, "n2": 0, "n3": 100, "n4": 0}),
    ("preferred anti-affinity: the matching pod's zone scores lowest",
     [(dict(name="db", labels={"app": "db"}), "n1")],
     dict(affinity=preferred("podAntiAffinity", (5, term(ZONE, {"app": "db"})))),
     {"n1": 0, "n2": 0, "n3": 100, "n4": 100}),
    ("weights add up per domain, then min..max maps onto 0..100",
     [(dict(name="db1", labels={"app": "db"}), "n1"), (dict(name="db2", labels={"app": "db"}),
                                                       "n3"),
      (dict(name="db3", labels={"app": "db"}), "n3")],
     dict(affinity=preferred("podAffinity", (2, term(ZONE, {"app": "db"})),
                             (1, term(HOST, {"app": "db"})))),
     # raw: n1 2+1=3, n2 2, n3 4+2=6, n4 0
     {"n1": 50, "n2": 33, "n3": 100, "n4": 0}),
    ("an existing pod's required affinity draws the pod with hardPodAffinityWeight 1",
     [(dict(name="fan", affinity=required("podAffinity", term(HOST, {"app": "web"}))), "n2")],
     dict(labels={"app": "web"}),
     {"n1": 0, "n2": 100, "n3": 0, "n4": 0}),
    ("an existing pod's preferred anti-affinity pushes the pod away",
     [(dict(name="shy", affinity=preferred("podAntiAffinity",
                                           (7, term(ZONE, {"app": "web"})))), "n3")],
     dict(labels={"app": "web"}),
     {"n1": 100, "n2": 100, "n3": 0, "n4": 100}),
    ("an existing pod's required anti-affinity does not score",
     [(dict(name="loner", affinity=required("podAntiAffinity", term(ZONE, {"app": "web"}))),
       "n3")],
     dict(labels={"app": "web"}),
     {}),
    ("nothing to score: skipped",
     [(dict(name="db", labels={"app": "db"}), "n1")],
     dict(),
     {}),
]


@pytest.mark.parametrize(("why", "existing", "incoming", "expected"), SCORE_CASES,
                         ids=[c[0] for c in SCORE_CASES])
def test_score(sched: Scheduler, why: str, existing: list[tuple[dict[str, Any], str]],
               incoming: dict[str, Any], expected: dict[str, int]) -> None:
    place(sched, [(make_pod(**doc), where) for doc, where in existing])
    assert scores(sched, make_pod("incoming", **incoming)) == expected


def test_args_change_scoring(sched: Scheduler) -> None:
    handle = sched
    fan = make_pod("fan", affinity={
        **required("podAffinity", term(HOST, {"app": "web"})),
        **preferred("podAntiAffinity", (3, term(ZONE, {"app": "web"})))})
    place(sched, [(fan, "n1")])
    web = make_pod("web", labels={"app": "web"})
    p = InterPodAffinity({"hardPodAffinityWeight": 10}, handle)
    state = CycleState()
    p.pre_filter(state, web)
    # n1: +10 (hard) -3 (zone a); n2: -3; n3, n4: 0.
    assert {i.name: p.score(state, web, i) for i in sched.cache.nodes()} == {
        "n1": 7, "n2": -3, "n3": 0, "n4": 0}
    p = InterPodAffinity({"hardPodAffinityWeight": 0,
                          "ignorePreferredTermsOfExistingPods": True}, handle)
    state = CycleState()
    p.pre_filter(state, web)
    assert NAME in state.skip_score


def test_signature_is_constant_unless_other_pods_bear_on_the_pod(sched: Scheduler) -> None:
    p = plugin(sched)
    plain = make_pod("plain", labels={"app": "web"})
    assert p.sign(plain) == ()
    with_terms = make_pod("aff", affinity=required("podAntiAffinity", term(HOST, {"a": "b"})))
    assert p.sign(with_terms) is None
    place(sched, [(make_pod("other", affinity=required("podAntiAffinity",
                                                       term(HOST, {"app": "db"}))), "n1")])
    assert p.sign(plain) == ()  # the placed pod's term does not match it
    place(sched, [(make_pod("loner", affinity=required("podAntiAffinity",
                                                       term(HOST, {"app": "web"}))), "n2")])
    assert p.sign(plain) is None
    sched.cache.remove_pod("ns/loner")
    assert p.sign(plain) == ()
    state = CycleState()
    assert p.pre_filter(state, plain).code == Code.SKIP and NAME in state.skip_score


@pytest.mark.parametrize(("affinity", "error"), [
    (required("podAntiAffinity", {"labelSelector": {}}), "[0].topologyKey: must be"),
    (preferred("podAffinity", (0, term(HOST))), "[0].weight: must be an integer in 1..100"),
    (required("podAffinity", {"topologyKey": HOST, "labelSelector": {"matchExpressions": [
        {"key": "a", "operator": "Gt", "values": ["1"]}]}}), "operator: must be one of In"),
    (required("podAffinity", {"topologyKey": HOST, "labelSelector": {"matchExpressions": [
        {"key": "a", "operator": "Exists", "values": ["1"]}]}}), "values: must be empty"),
    (required("podAffinity", {"topologyKey": HOST, "labelSelector": {"matchExpressions": [
        {"key": "a", "operator": "In"}]}}), "values: must not be empty"),
    ({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"x": 1}}},
     "must be a list"),
])
def test_bad_terms_are_parse_errors_naming_the_field(affinity: dict[str, Any],
                                                     error: str) -> None:
    pod = parse_pod(pod_doc("bad", affinity=affinity))
    assert pod.parse_error.startswith("spec.affinity: pod")
    assert error in pod.parse_error


def gang_pod(name: str, group: str, affinity: dict[str, Any]) -> Pod:
    return make_pod(name, labels={"app": group}, group=group, affinity=affinity)


@pytest.mark.parametrize(("nodes", "bound"), [(4, 4), (6, 4), (3, 0)])
def test_gang_with_required_anti_affinity_goes_one_per_node_or_waits_whole(
        nodes: int, bound: int) -> None:
    sim = SimCluster()
    try:
        for i in range(nodes):
            sim.add_node(f"n{i}")
        sim.add_group("g", 4)
        anti = required("podAntiAffinity", term(HOST, {"app": "g"}))
        for i in range(4):
            sim.pods.on_add(gang_pod(f"g-{i}", "g", anti))
        sim.run()
        assert sim.bound_in_group("g") == bound
        placed = [n for k, n in sim.bound.items() if k.startswith("ns/g-")]
        assert len(set(placed)) == len(placed)
        if not bound:
            gang = sim.scheduler.framework.instances["Coscheduling"]
            frozen = gang.manager.frozen("ns/g")  # type: ignore[attr-defined]
            assert frozen is not None and ANTI in frozen[1], frozen
    finally:
        sim.close()


def test_gang_with_required_affinity_follows_an_existing_pod() -> None:
    sim = SimCluster()
    try:
        for i in range(4):
            sim.add_node(f"n{i}")
        db = make_pod("db", labels={"app": "db"})
        sim.pods.on_add(db)
        sim.run()
        db_node = sim.bound["ns/db"]
        sim.add_group("g", 3)
        follow = required("podAffinity", term(HOST, {"app": "db"}))
        for i in range(3):
            sim.pods.on_add(gang_pod(f"g-{i}", "g", follow))
        sim.run()
        assert sim.bound_in_group("g") == 3
        assert {sim.bound[f"ns/g-{i}"] for i in range(3)} == {db_node}
    finally:
        sim.close()


@pytest.mark.parametrize(("db_labels", "follows"), [({"app": "db"}, True),
                                                     ({"app": "cache"}, False)])
def test_a_pod_waiting_for_its_affinity_is_retried_when_a_match_is_bound(
        db_labels: dict[str, str], follows: bool) -> None:
    """No cluster event frees room here: only the bound match may wake the waiting pod."""
    sim = SimCluster()
    try:
        for i in range(3):
            sim.add_node(f"n{i}")
        follow = required("podAffinity", term(HOST, {"app": "db"}))
        sim.pods.on_add(make_pod("fan", affinity=follow))
        sim.run()
        assert "ns/fan" not in sim.bound
        sim.pods.on_add(make_pod("db", labels=db_labels))
        sim.run()
        assert ("ns/fan" in sim.bound) == follows
        if follows:
            assert sim.bound["ns/fan"] == sim.bound["ns/db"]
        assert sim.scheduler.queue.counts()["unschedulable"] == (0 if follows else 1)
    finally:
        sim.close()


def test_default_profile_runs_both_plugins_with_upstream_weights() -> None:
    config = parse_config(None, default_registry())
    for name in ("InterPodAffinity", "PodTopologySpread"):
        assert name in config.plugins.pre_filter and name in config.plugins.filter
        assert config.plugins.score[name] == 2


def test_namespace_labels_come_from_namespace_events(sched: Scheduler) -> None:
    """namespaceSelector terms follow the namespace watch: labels added, changed, removed."""
    events = NamespaceEvents(sched)
    place(sched, [(make_pod("web", labels={"app": "web"}, namespace="other"), "n1")])
    pod = make_pod("incoming", affinity=required("podAntiAffinity", term(
        HOST, {"app": "web"}, namespaceSelector={"matchLabels": {"team": "x"}})))
    events.on_add(parse_namespace({"metadata": {"name": "other", "labels": {"team": "y"}}}))
    assert run_filter(sched, pod)["n1"] == ""
    events.on_update(parse_namespace({"metadata": {"name": "other", "labels": {"team": "y"}}}),
                     parse_namespace({"metadata": {"name": "other", "labels": {"team": "x"}}}))
    assert run_filter(sched, pod)["n1"] == ANTI
    events.on_delete(parse_namespace({"metadata": {"name": "other"}}))
    assert run_filter(sched, pod)["n1"] == ""
