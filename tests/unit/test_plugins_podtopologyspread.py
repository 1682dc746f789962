"""PodTopologySpread against kube-scheduler's documented semantics, table by table."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from coscheduling import GROUP_LABEL
from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.config import ConfigError, parse_config
from coscheduling.core.scheduler import Scheduler
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Code
from coscheduling.plugins.podtopologyspread import NAME, PodTopologySpread
from coscheduling.plugins.registry import default_registry
from tests.simulation import SimCluster, normalized_scores

ZONE = "topology.kubernetes.io/zone"
HOST = "kubernetes.io/hostname"
# n1, n2 in zone a; n3 in b; n4 in c; n5 has no zone label.
NODES = {"n1": "a", "n2": "a", "n3": "b", "n4": "c", "n5": None}
WEB = {"app": "web"}
SKEW = "node(s) didn't match pod topology spread constraints"
MISSING = "node(s) didn't match pod topology spread constraints (missing required label)"


def pod_doc(name: str, labels: dict[str, str] | None = None, namespace: str = "ns",
            spread: list[dict[str, Any]] | None = None, owner: str = "",
            deleting: bool = False, **spec: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": f"u-{name}",
                            "labels": dict(labels or {}),
                            "creationTimestamp": "2026-01-01T00:00:00Z"}
    if owner:
        kind, owner_name = owner.split("/")
        meta["ownerReferences"] = [{"kind": kind, "name": owner_name, "uid": owner_name,
                                    "controller": True}]
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:01Z"
    return {"metadata": meta,
            "spec": {"schedulerName": "batch-scheduler",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": "100m"}}}],
                     "topologySpreadConstraints": spread or [], **spec}}


def make_pod(name: str, **kwargs: Any) -> Pod:
    pod = parse_pod(pod_doc(name, **kwargs))
    assert not pod.parse_error, pod.parse_error
    return pod


def constraint(key: str = ZONE, skew: int = 1, when: str = "DoNotSchedule",
               selector: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
            "labelSelector": {"matchLabels": WEB if selector is None else selector}, **extra}


def scheduler(args: dict[str, Any] | None = None,
              taint: str = "") -> Scheduler:
    registry = default_registry()
    doc: dict[str, Any] = {"apiVersion": "config.batch.scheduler.tencent.com/v1",
                           "kind": "SchedulerConfiguration"}
    if args is not None:
        doc["pluginConfig"] = [{"name": NAME, "args": args}]
    s = Scheduler(parse_config(doc, registry), registry, client=None)
    for name, zone in NODES.items():
        labels = {HOST: name, **({ZONE: zone} if zone else {})}
        taints = [{"key": "t", "effect": "NoSchedule"}] if name == taint else []
        s.cache.set_node(parse_node({"metadata": {"name": name, "labels": labels},
                                     "spec": {"taints": taints},
                                     "status": {"allocatable": {"cpu": "8", "pods": "110"}}}))
    return s


@pytest.fixture
def sched() -> Iterator[Scheduler]:
    s = scheduler()
    yield s
    s.stop()


def plugin(s: Scheduler) -> PodTopologySpread:
    found = s.framework.instances[NAME]
    assert isinstance(found, PodTopologySpread)
    return found


def place(s: Scheduler, existing: list[tuple[dict[str, Any], str]]) -> None:
    for index, (doc, where) in enumerate(existing):
        pod = make_pod(doc.pop("name", f"e{index}"), **doc)
        if where.startswith("claim:"):
            s.cache.set_pod(pod)
            s.cache.claim(pod, where.removeprefix("claim:"))
        else:
            pod.node_name = where
            s.cache.set_pod(pod)


def run_filter(s: Scheduler, pod: Pod, pre_filter: bool = True) -> dict[str, str]:
    p = plugin(s)
    state = CycleState()
    if pre_filter and p.pre_filter(state, pod).code == Code.SKIP:
        return {info.name: "" for info in s.cache.nodes()}
    result = {}
    for info in s.cache.nodes():
        verdict = p.filter(state, pod, info)
        result[info.name] = "" if verdict.ok else verdict.message
    return result


def web_on(*nodes: str, **extra: Any) -> list[tuple[dict[str, Any], str]]:
    return [({"labels": WEB, **extra}, n) for n in nodes]


FILTER_CASES: list[tuple[str, list[tuple[dict[str, Any], str]], dict[str, Any],
                         dict[str, str], str]] = [
    ("skew counts the domain, the pod itself, and the emptiest domain",
     web_on("n1", "n3"), dict(labels=WEB, spread=[constraint()]),
     {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": "", "n5": MISSING}, ""),
    ("a larger maxSkew allows it",
     web_on("n1", "n3"), dict(labels=WEB, spread=[constraint(skew=2)]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, ""),
    ("a pod outside its own selector adds nothing",
     [({"labels": {"app": "db"}}, "n1"), ({"labels": {"app": "db"}}, "n3")],
     dict(labels=WEB, spread=[constraint(selector={"app": "db"})]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, ""),
    ("every domain holds one: any node keeps the skew at 1",
     web_on("n1", "n3", "n4"), dict(labels=WEB, spread=[constraint()]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, ""),
    ("minDomains above the domains that exist makes the minimum 0",
     web_on("n1", "n3", "n4"), dict(labels=WEB, spread=[constraint(minDomains=4)]),
     {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": SKEW, "n5": MISSING}, ""),
    ("nodeAffinityPolicy Honor (default): domains the pod may not use do not count",
     web_on("n1", "n3"),
     dict(labels=WEB, spread=[constraint()], affinity={"nodeAffinity": {
         "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
             {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["a", "b"]}]}]}}}),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, ""),
    ("nodeAffinityPolicy Ignore: they count",
     web_on("n1", "n3"),
     dict(labels=WEB, spread=[constraint(nodeAffinityPolicy="Ignore")], nodeSelector={
         ZONE: "a"}),
     {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": "", "n5": MISSING}, ""),
    ("nodeTaintsPolicy Ignore (default): a tainted node's domain counts",
     web_on("n1", "n3"), dict(labels=WEB, spread=[constraint()]),
     {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": "", "n5": MISSING}, "n4"),
    ("nodeTaintsPolicy Honor: an untolerated taint drops the domain",
     web_on("n1", "n3"), dict(labels=WEB, spread=[constraint(nodeTaintsPolicy="Honor")]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, "n4"),
    ("pods of other namespaces and terminating pods do not count",
     [*web_on("n1", "n3"), ({"labels": WEB, "namespace": "other"}, "n4"),
      ({"labels": WEB, "deleting": True}, "n4")],
     dict(labels=WEB, spread=[constraint()]),
     {"n1": SKEW, "n2": SKEW, "n3": SKEW, "n4": "", "n5": MISSING}, ""),
    ("claimed pods count as present",
     [*web_on("n1", "n3"), *web_on("claim:n4")], dict(labels=WEB, spread=[constraint()]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": MISSING}, ""),
    ("matchLabelKeys counts only pods with the pod's own value",
     [({"labels": {**WEB, "job": "j1"}}, "n1"), ({"labels": {**WEB, "job": "j2"}}, "n3"),
      ({"labels": {**WEB, "job": "j2"}}, "n4")],
     dict(labels={**WEB, "job": "j1"}, spread=[constraint(matchLabelKeys=["job"])]),
     {"n1": SKEW, "n2": SKEW, "n3": "", "n4": "", "n5": MISSING}, ""),
    ("ScheduleAnyway does not filter",
     web_on("n1", "n1", "n3"), dict(labels=WEB, spread=[constraint(when="ScheduleAnyway")]),
     {"n1": "", "n2": "", "n3": "", "n4": "", "n5": ""}, ""),
    ("two constraints: both must hold",
     web_on("n3", "n4"),
     dict(labels=WEB, spread=[constraint(skew=2), constraint(key=HOST)]),
     {"n1": "", "n2": "", "n3": SKEW, "n4": SKEW, "n5": MISSING}, ""),
]


@pytest.mark.parametrize(("why", "existing", "incoming", "expected", "taint"), FILTER_CASES,
                         ids=[c[0] for c in FILTER_CASES])
def test_filter(why: str, existing: list[tuple[dict[str, Any], str]], incoming: dict[str, Any],
                expected: dict[str, str], taint: str) -> None:
    s = scheduler(taint=taint)
    try:
        place(s, existing)
        assert run_filter(s, make_pod("incoming", **incoming)) == expected
    finally:
        s.stop()


def test_filter_without_prefilter_still_holds_the_constraint(sched: Scheduler) -> None:
    place(sched, web_on("n1", "n3"))
    pod = make_pod("incoming", labels=WEB, spread=[constraint()])
    assert run_filter(sched, pod, pre_filter=False)["n1"] == SKEW


def run_score(s: Scheduler, pod: Pod) -> dict[str, int]:
    return normalized_scores(plugin(s), s.cache.nodes(), pod)


SCORE_CASES: list[tuple[str, dict[str, Any] | None, list[tuple[dict[str, Any], str]],
                        dict[str, Any], dict[str, int]]] = [
    # 3 zone domains: weight ln 5; raw n1 = n2 = round(2 ln 5) = 3, n3 = 2, n4 = 0;
    # 100 * (max + min - raw) / max; n5 lacks the key: 0.
    ("zone, maxSkew 1", None, web_on("n1", "n1", "n3"),
     dict(labels=WEB, spread=[constraint(when="ScheduleAnyway")]),
     {"n1": 0, "n2": 0, "n3": 33, "n4": 100, "n5": 0}),
    # maxSkew 3 adds 2 to every raw score: 5, 5, 4, 2.
    ("zone, maxSkew 3", None, web_on("n1", "n1", "n3"),
     dict(labels=WEB, spread=[constraint(skew=3, when="ScheduleAnyway")]),
     {"n1": 40, "n2": 40, "n3": 60, "n4": 100, "n5": 0}),
    # hostname: 5 nodes, weight ln 7; raw n1 = round(2 ln 7) = 4, n3 = 2, others 0.
    ("hostname counts each node's own pods", None, web_on("n1", "n1", "n3"),
     dict(labels=WEB, spread=[constraint(key=HOST, when="ScheduleAnyway")]),
     {"n1": 0, "n2": 100, "n3": 50, "n4": 100, "n5": 100}),
    ("nothing matches: every node with the key scores 100", None, [],
     dict(labels=WEB, spread=[constraint(when="ScheduleAnyway")]),
     {"n1": 100, "n2": 100, "n3": 100, "n4": 100, "n5": 0}),
    ("no constraint and no defaults: skipped", None, web_on("n1"), dict(labels=WEB), {}),
    # System defaults (hostname maxSkew 3, zone maxSkew 5) over the pods of the same
    # ReplicaSet; nodes without a zone still score on hostname. Zone domains: a, b, c and
    # "" (n5): weight ln 6; hostname weight ln 7.
    # raw n1 = 2 ln 7 + 2 + 2 ln 6 + 4 = 13, n2 = 2 + 2 ln 6 + 4 = 10,
    # n3 = ln 7 + 2 + ln 6 + 4 = 10, n4 = 2 + 4 = 6, n5 = 2.
    ("System defaults bind to the pod's controller", {"defaultingType": "System"},
     [({"owner": "ReplicaSet/rs1"}, "n1"), ({"owner": "ReplicaSet/rs1"}, "n1"),
      ({"owner": "ReplicaSet/rs1"}, "n3"), ({"owner": "ReplicaSet/other"}, "n4"),
      ({"labels": WEB}, "n4")],
     dict(owner="ReplicaSet/rs1"),
     {"n1": 15, "n2": 38, "n3": 38, "n4": 69, "n5": 100}),
    ("defaults do not apply to a pod without a ReplicaSet-like controller",
     {"defaultingType": "System"}, [], dict(owner="Job/j1"), {}),
    ("listed default constraints", {"defaultConstraints": [
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"}]},
     [({"owner": "StatefulSet/s"}, "n2")], dict(owner="StatefulSet/s"),
     {"n1": 100, "n2": 0, "n3": 100, "n4": 100, "n5": 100}),
]


@pytest.mark.parametrize(("why", "args", "existing", "incoming", "expected"), SCORE_CASES,
                         ids=[c[0] for c in SCORE_CASES])
def test_score(why: str, args: dict[str, Any] | None,
               existing: list[tuple[dict[str, Any], str]], incoming: dict[str, Any],
               expected: dict[str, int]) -> None:
    s = scheduler(args)
    try:
        place(s, existing)
        assert run_score(s, make_pod("incoming", **incoming)) == expected
    finally:
        s.stop()


def test_signature_is_constant_only_without_constraints(sched: Scheduler) -> None:
    p = plugin(sched)
    assert p.sign(make_pod("plain", owner="ReplicaSet/rs")) == ()
    assert p.sign(make_pod("spread", labels=WEB, spread=[constraint()])) is None
    with_defaults = scheduler({"defaultingType": "System"})
    try:
        assert plugin(with_defaults).sign(make_pod("rs", owner="ReplicaSet/rs")) is None
        assert plugin(with_defaults).sign(make_pod("bare")) == ()
    finally:
        with_defaults.stop()


@pytest.mark.parametrize(("entry", "error"), [
    ({"maxSkew": 0, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule"},
     "[0].maxSkew: must be an integer >= 1"),
    ({"maxSkew": 1, "whenUnsatisfiable": "DoNotSchedule"}, "[0].topologyKey: must be"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "Sometimes"},
     "[0].whenUnsatisfiable: must be DoNotSchedule or ScheduleAnyway"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "ScheduleAnyway",
      "minDomains": 2}, "[0].minDomains: only allowed with DoNotSchedule"),
    ({"maxSkew": 1, "topologyKey": ZONE, "whenUnsatisfiable": "DoNotSchedule",
      "nodeTaintsPolicy": "Sometimes"}, "[0].nodeTaintsPolicy: must be Honor or Ignore"),
])
def test_bad_constraints_are_parse_errors_naming_the_field(entry: dict[str, Any],
                                                           error: str) -> None:
    pod = parse_pod(pod_doc("bad", spread=[entry]))
    assert pod.parse_error.startswith("spec.topologySpreadConstraints: ")
    assert error in pod.parse_error


@pytest.mark.parametrize(("args", "path"), [
    ({"defaultingType": "Sometimes"}, "defaultingType"),
    ({"defaultingType": "System", "defaultConstraints": [
        {"maxSkew": 1, "topologyKey": HOST, "whenUnsatisfiable": "ScheduleAnyway"}]},
     "defaultConstraints"),
    ({"defaultConstraints": [{"maxSkew": 1, "topologyKey": HOST,
                              "whenUnsatisfiable": "ScheduleAnyway",
                              "labelSelector": {}}]}, "defaultConstraints[0].labelSelector"),
    ({"defaultConstraints": [{"maxSkew": 0, "topologyKey": HOST,
                              "whenUnsatisfiable": "ScheduleAnyway"}]},
     "defaultConstraints[0]"),
    ({"other": 1}, "other"),
])
def test_bad_args_name_the_field(args: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        scheduler(args)
    assert err.value.path.endswith(path), err.value.path


# Zone a has four nodes, b and c one each: LeastAllocated alone puts one member per node
# (a gets four), so only the spread constraint yields 2-2-2.
UNEVEN_ZONES = {"a": 4, "b": 1, "c": 1}


def gang_of_six_zones(config: dict[str, Any] | None = None) -> Counter[str]:
    """The zones a gang of six with a zone maxSkew 1 constraint lands in, over
    ``UNEVEN_ZONES``."""
    sim = SimCluster(config)
    try:
        for zone, count in UNEVEN_ZONES.items():
            for i in range(count):
                sim.add_node(f"{zone}{i}", labels={ZONE: zone})
        sim.add_group("g", 6)
        for i in range(6):
            sim.pods.on_add(make_pod(f"g-{i}", labels={**WEB, GROUP_LABEL: "g"},
                                     spread=[constraint()]))
        sim.run()
        assert sim.bound_in_group("g") == 6
        assert not sim.violations, sim.violations
        return Counter(sim.bound[f"ns/g-{i}"][0] for i in range(6))
    finally:
        sim.close()


def test_gang_of_six_with_max_skew_one_over_three_zones_lands_two_two_two() -> None:
    assert gang_of_six_zones() == {"a": 2, "b": 2, "c": 2}


def test_the_two_two_two_layout_needs_the_spread_constraint() -> None:
    """The layout above discriminates: without PodTopologySpread the gang lands 4-1-1."""
    off = {"disabled": [{"name": NAME}]}
    without = {"plugins": {point: off for point in ("preFilter", "filter", "score")}}
    assert gang_of_six_zones(without) == {"a": 4, "b": 1, "c": 1}
