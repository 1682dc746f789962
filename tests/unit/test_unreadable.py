"""Objects the scheduler cannot read: the level-by-level JSON decoder, the record of
objects set aside (its Warning rate limit and gauge), and a node that holds a pod it cannot
read (or that it cannot read) taking no new pods."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest

from coscheduling.api.nodes import Node, parse_node
from coscheduling.api.objectref import ObjectRef
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.cluster.deepjson import (
    MAX_DEPTH,
    Decoded,
    Undecodable,
    decode_bounded,
    field_path,
    loads,
)
from coscheduling.cluster.informer import Informer
from coscheduling.cluster.unreadable import READABLE, UNREADABLE, Unreadable, UnreadableObjects
from coscheduling.core.cache import Cache
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.nodeinfo import NodeInfo
from coscheduling.framework.status import Code
from coscheduling.groups import FOREIGN_APIS
from coscheduling.groups.table import KindTable
from coscheduling.plugins.noderesources import NodeResourcesFit
from coscheduling.preemption.units import eviction_units
from coscheduling.service.wiring import group_watch, unreadable_node, unreadable_pod

# -- the decoder ----------------------------------------------------------------------------


def lists(depth: int) -> str:
    """``depth`` levels of lists: ``[[...[1]...]]``."""
    return "[" * depth + "1" + "]" * depth


@pytest.mark.parametrize("text", [
    "{}", "[]", '""', "0", "-0", "12", "-3.5e-2", "1E+2", "true", "false", "null",
    '{"a": [1, 2.5, "x\\n\\u00e9\\ud83d\\ude00", true, false, null, {}, []], "b": {"c": "d"}}',
    ' \n\t[ 1 , [ ] , { } ]\r ', '{"dup": 1, "dup": 2}', '["\\"]{[", "]"]',
    "Infinity", "-Infinity", '{"k": ' + lists(MAX_DEPTH - 1) + "}",
])
def test_the_bounded_decoder_reads_what_json_loads_reads(text: str) -> None:
    assert decode_bounded(text) == json.loads(text)


@pytest.mark.parametrize("text", [
    "", "{", "[1,]", '{"a" 1}', '{"a": 1,}', "[1 2]", '{1: 2}', "tru", "[1]]", '"open',
    "{} {}", "[01]", "[" * 2000 + "]" * 1999,
])
def test_the_bounded_decoder_refuses_what_json_loads_refuses(text: str) -> None:
    if len(text) < 100:  # the C decoder, on what it can read
        with pytest.raises(json.JSONDecodeError):
            json.loads(text)
    with pytest.raises(json.JSONDecodeError):
        decode_bounded(text)
    with pytest.raises(json.JSONDecodeError):
        loads(text)


def _random_value(rng: random.Random, depth: int) -> Any:
    kind = rng.randrange(8 if depth < 6 else 5)
    if kind == 0:
        return rng.randrange(-10**20, 10**20)
    if kind == 1:
        return rng.uniform(-1e9, 1e9)
    if kind == 2:
        alphabet = 'ab"\\\n\u00e9\U0001f600 {}[],:'
        return "".join(rng.choice(alphabet) for _ in range(rng.randrange(6)))
    if kind == 3:
        return rng.choice([True, False, None])
    if kind == 4:
        return rng.randrange(10)
    if kind in (5, 6):
        return [_random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {f"k{rng.randrange(5)}": _random_value(rng, depth + 1) for _ in range(rng.randrange(4))}


def test_random_documents_decode_alike() -> None:
    rng = random.Random(35)
    for _ in range(2000):
        text = json.dumps(_random_value(rng, 0), indent=rng.choice([None, 1]))
        assert decode_bounded(text) == json.loads(text), text


@pytest.mark.parametrize(("depth", "left_out"), [
    (MAX_DEPTH - 3, False),  # {"items": [{"x": ...}]}: 3 levels above the lists
    (MAX_DEPTH - 2, True),
    (3000, True),
    (100_000, True),
])
def test_values_deeper_than_the_limit_are_left_out_by_path(depth: int, left_out: bool) -> None:
    text = ('{"items": [{"metadata": {"name": "ok"}}, {"x": ' + lists(depth)
            + '}, {"metadata": {"name": "after"}}]}')
    decoded = decode_bounded(text)
    assert decoded["items"][0] == {"metadata": {"name": "ok"}}
    assert decoded["items"][2] == {"metadata": {"name": "after"}}
    assert isinstance(decoded, Decoded)
    if not left_out:
        assert decoded.left_out == []
        return
    [(path, why)] = decoded.left_out
    assert path[:3] == ("items", 1, "x") and len(path) == MAX_DEPTH
    assert why == f"nested deeper than {MAX_DEPTH} levels"


def test_loads_keeps_the_c_decoder_and_falls_back_only_when_it_fails() -> None:
    shallow = '{"a": ' + lists(100) + "}"
    assert type(loads(shallow)) is dict  # the fast path: no Decoded
    deep = loads('{"a": ' + lists(3000) + ', "b": 2}')
    assert isinstance(deep, Decoded) and deep["b"] == 2
    assert field_path(deep.left_out[0][0]).startswith("a[0][0][0]")
    assert loads(b'{"a": 1}') == {"a": 1}


def test_an_integer_python_will_not_convert_is_left_out() -> None:
    decoded = loads('{"items": [{"n": ' + "9" * 5000 + '}, {"n": 1}]}')
    assert isinstance(decoded, Decoded)
    assert isinstance(decoded["items"][0]["n"], Undecodable)
    assert decoded["items"][1] == {"n": 1}
    assert decoded.left_out == [(("items", 0, "n"), "an integer of 5000 digits")]


@pytest.mark.parametrize(("path", "text"), [
    ((), ""),
    (("spec",), "spec"),
    (("spec", "devices", "config", 0, "opaque"), "spec.devices.config[0].opaque"),
    ((0, "a"), "[0].a"),
    (("a", *[0] * 20), "a" + "[0]" * 11 + "..."),
])
def test_field_paths_read_as_kubectl_names_fields(path: tuple[Any, ...], text: str) -> None:
    assert field_path(path) == text


# -- objects set aside ------------------------------------------------------------------------


class Events:
    """Where UnreadableObjects' events go: kept in a list."""

    def __init__(self) -> None:
        self.written: list[tuple[str, str, str]] = []

    def object_event(self, ref: ObjectRef, kind: str, reason: str, message: str) -> None:
        self.written.append((ref.name, kind, reason))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _entry(name: str, version: str, why: str = "nested deeper than 512 levels") -> Unreadable:
    ref = ObjectRef("resource.k8s.io/v1", "ResourceClaim", "ns", name, f"uid-{name}")
    return Unreadable("resourceclaims.resource.k8s.io", ref, version, "spec.x", why)


def test_warnings_come_once_per_version_and_interval_and_the_gauge_counts() -> None:
    events, clock, counts = Events(), Clock(), {}
    objects = UnreadableObjects(events, counts.__setitem__, repeat_after=600, clock=clock)
    kind = "resourceclaims.resource.k8s.io"
    objects.set_aside(_entry("a", "1"))
    objects.set_aside(_entry("a", "1"))  # a relist: same version
    clock.now = 10
    objects.set_aside(_entry("a", "2"))  # rewritten within the interval
    objects.set_aside(_entry("b", "1"))
    assert events.written == [("a", "Warning", UNREADABLE), ("b", "Warning", UNREADABLE)]
    assert counts == {kind: 2}
    clock.now = 700
    objects.set_aside(_entry("a", "2"))  # the interval passed, but the same version
    objects.set_aside(_entry("a", "3"))
    assert events.written[-1] == ("a", "Warning", UNREADABLE) and len(events.written) == 3
    objects.readable(kind, "ns/a")
    assert events.written[-1] == ("a", "Normal", READABLE) and counts == {kind: 1}
    objects.gone(kind, "ns/b")
    assert events.written[-1] == ("b", "Normal", READABLE) and counts == {kind: 0}
    assert objects.entries() == []
    assert "spec.x: nested deeper than 512 levels" in _entry("a", "1").message


def test_a_new_leader_writes_the_warnings_again_at_once() -> None:
    """A follower's Warnings were refused by the fencing policy: taking up leadership
    writes them anew, not ten minutes later."""
    events, clock = Events(), Clock()
    objects = UnreadableObjects(events, repeat_after=600, clock=clock)
    objects.set_aside(_entry("a", "1"))  # written as a follower: refused
    clock.now = 5
    objects.warn_again()
    assert events.written == [("a", "Warning", UNREADABLE)] * 2
    objects.set_aside(_entry("a", "1"))  # a relist right after: no third
    assert len(events.written) == 2


# -- a node holding something it cannot read ----------------------------------------------------


def _pod(name: str, node: str, limits: dict[str, str] | None = None,
         **meta: Any) -> Pod:
    return parse_pod({
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", **meta},
        "spec": {"nodeName": node, "containers": [{"name": "c", "resources": {
            "requests": {"cpu": "1"}, "limits": {"cpu": "1", **(limits or {})}}}]}})


def _node(name: str = "n1", cpu: str = "4") -> NodeInfo:
    return NodeInfo(name, parse_node({"metadata": {"name": name},
                                      "status": {"allocatable": {"cpu": cpu, "pods": "10"}}}))


def _filter(info: NodeInfo, cpu: str = "1") -> tuple[Code, tuple[str, ...]]:
    pending = parse_pod({"metadata": {"name": "new", "namespace": "ns", "uid": "u"},
                         "spec": {"containers": [{"name": "c", "resources": {
                             "requests": {"cpu": cpu}}}]}})
    plugin = NodeResourcesFit()
    state = CycleState()
    plugin.pre_filter(state, pending)
    status = plugin.filter(state, pending, info)
    return status.code, status.reasons


@pytest.mark.parametrize(("occupant", "closed"), [
    ({}, False),
    # A limit no parser reads (negative): the pod's requests are not known.
    ({"limits": {"memory": "-1"}}, True),
    # A malformed group marker alone: the pod is read, its room counts.
    ({"labels": {"pod-group.scheduling.sigs.k8s.io/name": "g",
                 "pod-group.scheduling.sigs.k8s.io/min-available": "x"}}, False),
])
def test_a_bound_pod_it_cannot_read_closes_its_node(occupant: dict[str, Any],
                                                     closed: bool) -> None:
    info = _node()
    pod = _pod("occupant", "n1", occupant.get("limits"),
               **({"labels": occupant["labels"]} if "labels" in occupant else {}))
    assert bool(pod.parse_error) == bool(occupant)
    info.add_pod(pod)
    code, reasons = _filter(info)
    if not closed:
        assert code == Code.SUCCESS
        return
    assert code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert reasons[0].startswith("a pod on the node cannot be read (see its Unreadable")
    assert "occupant" not in reasons[0]  # the reason reaches other namespaces' pods
    info.remove_pod(pod.key)  # gone (or read again): the node opens
    assert _filter(info)[0] == Code.SUCCESS


@pytest.mark.parametrize(("node", "reason"), [
    # The informer's stand-in for a node its parser failed on.
    (unreadable_node({"metadata": {"name": "n1"}}, "status.allocatable: bad"),
     "node n1 cannot be read (status.allocatable: bad)"),
    # A node record kept with a parse error.
    (parse_node({"metadata": {"name": "n1"}, "status": {"allocatable": {"cpu": "-1"}}}),
     "node n1 cannot be read (status.allocatable: cpu: "),
])
def test_a_node_it_cannot_read_takes_no_pods(node: Node, reason: str) -> None:
    info = _node()
    info.node = node
    code, reasons = _filter(info, cpu="0")
    assert code == Code.UNSCHEDULABLE_AND_UNRESOLVABLE
    assert reasons[0].startswith(reason), reasons


def test_a_pod_stand_in_keeps_its_node_closed_in_the_cache() -> None:
    cache = Cache()
    cache.set_node(parse_node({"metadata": {"name": "n1"},
                               "status": {"allocatable": {"cpu": "4", "pods": "10"}}}))
    stand_in = unreadable_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
                               "spec": {"nodeName": "n1", "x": "?"}},
                              "spec.x: RecursionError: too deep")
    cache.set_pod(stand_in)
    info = cache.node("n1")
    assert info is not None and info.closed
    assert "a pod on the node cannot be read" in info.closed_reason()
    assert info.unreadable == {"ns/p": "spec.x: RecursionError: too deep"}
    cache.set_pod(_pod("p", "n1"))  # readable again: counted, and the node opens
    assert info is not None and not info.closed and info.requested["cpu"] == 1000


class Recorder:
    """An informer's handler that records what it was told."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, int]] = []

    def on_add(self, record: PodGroup) -> None:
        self.seen.append(("add", record.key, record.min_member))

    def on_update(self, old: PodGroup, new: PodGroup) -> None:
        self.seen.append(("update", new.key, new.min_member))

    def on_delete(self, record: PodGroup) -> None:
        self.seen.append(("delete", record.key, record.min_member))


def _foreign_group(version: str, min_member: int) -> dict[str, Any]:
    return {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"namespace": "ns", "name": "pg", "uid": "u1",
                         "resourceVersion": version},
            "spec": {"minMember": min_member}}


def test_a_tagged_group_set_aside_leaves_the_store_and_comes_back_under_its_own_key() -> None:
    """Other producers' groups are keyed namespace/name@tag: an unreadable version of one
    must replace the readable one under that key (never a stale minMember kept), and its
    entry in the set-aside record must end when it is readable again or deleted."""
    api = next(a for a in FOREIGN_APIS if a.group == "scheduling.x-k8s.io")
    watch = group_watch(api, KindTable())
    objects = UnreadableObjects()
    handler = Recorder()
    informer = Informer[PodGroup](None, api.path, watch.parse, watch.key,  # type: ignore[arg-type]
                                  handler, unreadable=objects, object_key=watch.object_key)
    informer._changed(_foreign_group("1", 2), None)
    informer._changed(_foreign_group("2", 4), ("spec.x", "nested too deeply"))
    assert informer.store == {} and handler.seen[-1] == ("delete", "ns/pg@x-k8s", 2)
    assert [(e.key) for e in objects.entries()] == ["ns/pg@x-k8s"]
    informer._changed(_foreign_group("3", 4), None)
    assert handler.seen[-1] == ("add", "ns/pg@x-k8s", 4) and not objects.entries()
    informer._deleted(_foreign_group("3", 4))  # deleted once readable: nothing kept of it
    assert not objects._warned
    informer._changed(_foreign_group("4", 5), ("spec.x", "nested too deeply"))
    informer._deleted(_foreign_group("4", 5))
    assert not objects.entries() and not informer._set_aside


def test_a_bound_members_stand_in_keeps_its_gang_so_preemption_spares_the_gang() -> None:
    """The stand-in of a bound pod that cannot be read still names its gang: its readable
    mates are not victims (evicting them would leave it bound below minMember)."""
    labels = {"scheduling.x-k8s.io/pod-group": "g"}

    def member(name: str, node: str) -> dict[str, Any]:
        return {"metadata": {"namespace": "ns", "name": name, "uid": name, "labels": labels},
                "spec": {"nodeName": node, "containers": [{"name": "c"}]},
                "status": {"phase": "Running"}}

    readable = parse_pod(member("a", "n1"))
    stand_in = unreadable_pod(member("b", "n2"), "spec.x: nested too deeply")
    assert stand_in.group_key == readable.group_key == "ns/g@x-k8s"
    group = PodGroup(namespace="ns", name="g", min_member=2)
    units = eviction_units([readable, stand_in], 1000, "", lambda key: group,
                           lambda g, members: 0, lambda pod: False)
    assert units == []
