"""The gRPC plugin server on a scheduler attached to the real control plane (issue 4).

Every test drives the scheduler through gRPC only, with the scheduling loop off
(``start(loops=False)``) so that nothing races the calls, and checks what the cluster and
the scheduler's own state say afterwards.
"""

from __future__ import annotations

import json
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coscheduling.cluster.client import KubeClient
from coscheduling.core.scheduler import Scheduler
from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.status import Code
from coscheduling.server import GrpcSettings, PluginServer, build_server
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.gen import scheduling_pb2_grpc as pb_grpc
from tests.integration.fixtures import RunningScheduler
from tests.integration.kube import create_pod, create_podgroup, pod_body, wait_until

StartScheduler = Callable[..., RunningScheduler]


# -- helpers shared with test_grpc_server.py ------------------------------------------------
@dataclass
class Served:
    sched: RunningScheduler
    server: PluginServer
    channel: grpc.Channel
    stub: Any
    namespace: str

    @property
    def scheduler(self) -> Scheduler:
        return self.sched.service.scheduler

    def ref(self, name: str) -> pb.PodRef:
        return pb.PodRef(key=pb.ObjectKey(namespace=self.namespace, name=name))

    def health(self) -> int:
        stub = health_pb2_grpc.HealthStub(self.channel)
        return int(stub.Check(health_pb2.HealthCheckRequest(), timeout=5).status)


def serve(sched: RunningScheduler, namespace: str, **settings: Any) -> Served:
    """A started server on the scheduler's own instances, on a free loopback port."""
    server = build_server(sched.service.scheduler, lambda: sched.service.synced,
                          GrpcSettings(address="127.0.0.1:0", **settings))
    server.start()
    channel = grpc.insecure_channel(server.address)
    return Served(sched, server, channel, stub_for(channel), namespace)


def stub_for(channel: grpc.Channel) -> Any:
    return pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]


@pytest.fixture
def served(start_scheduler: StartScheduler, namespace: str) -> Iterator[Served]:
    yield from serving(start_scheduler, namespace)


def serving(start_scheduler: StartScheduler, namespace: str) -> Iterator[Served]:
    """A scheduler synced without its loop, and a server on it (the `served` fixture)."""
    sched = start_scheduler(start=False)
    s = serve(sched, namespace)
    sched.start(loops=False)
    wait_until(lambda: s.health() == health_pb2.HealthCheckResponse.SERVING, timeout=10,
               what="health SERVING")
    try:
        yield s
    finally:
        s.channel.close()
        s.server.stop(0).wait(10)


def node_name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:6]}"


def wait_cached(s: Served, pods: list[str] = (), nodes: list[str] = (),  # type: ignore[assignment]
                groups: list[str] = ()) -> None:  # type: ignore[assignment]
    cache = s.scheduler.cache
    wait_until(lambda: all(cache.pod(f"{s.namespace}/{p}") is not None for p in pods)
               and all(cache.node(n) is not None for n in nodes)
               and all(s.scheduler.listers.podgroup(f"{s.namespace}/{g}") is not None
                       for g in groups),
               timeout=20, what="the watch cache to see the test's objects")


def pod(kube: KubeClient, s: Served, name: str, cpu: str = "1", group: str = "",
        priority_class: str = "") -> dict[str, Any]:
    return create_pod(kube, s.namespace, pod_body(name, scheduler=s.sched.name, cpu=cpu,
                                                  group=group, priority_class=priority_class))


class DecisionStream:
    """WatchDecisions in a thread, so a test can check that nothing came yet."""

    def __init__(self, s: Served, group: str = "") -> None:
        request = pb.WatchDecisionsRequest()
        if group:
            request.group.CopyFrom(pb.ObjectKey(namespace=s.namespace, name=group))
        self.call = s.stub.WatchDecisions(request)
        self.call.initial_metadata()  # subscribed: no later decision is missed
        self.decisions: queue.Queue[pb.Decision] = queue.Queue()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for decision in self.call:
                self.decisions.put(decision)
        except grpc.RpcError:
            pass

    def take(self, count: int, timeout: float = 10.0) -> list[pb.Decision]:
        deadline = time.monotonic() + timeout
        return [self.decisions.get(timeout=max(0.01, deadline - time.monotonic()))
                for _ in range(count)]

    def close(self) -> None:
        self.call.cancel()
        self._thread.join(5)


def code_of(status: pb.Status) -> Code:
    return Code(status.code)


def _gang_of_three(kube: KubeClient, make_node: Any, s: Served, prefix: str, member: str,
                   other: tuple[str, str]) -> tuple[str, str]:
    """Nodes of 4 and 1 cpu, gang "gang" of three members ``<member>-<i>`` and a plain pod
    ``other`` (name, cpu), all in the server's cache: (big node, small node)."""
    big, small = node_name(f"{prefix}-big"), node_name(f"{prefix}-small")
    make_node(big, cpu="4")
    make_node(small, cpu="1")
    create_podgroup(kube, s.namespace, "gang", 3)
    members = [f"{member}-{i}" for i in range(3)]
    for name in members:
        pod(kube, s, name, group="gang")
    pod(kube, s, other[0], cpu=other[1])
    wait_cached(s, pods=[*members, other[0]], nodes=[big, small], groups=["gang"])
    return big, small


# -- a gang through gRPC alone --------------------------------------------------------------
def test_gang_admitted_through_grpc_calls_alone(kube: KubeClient, make_node: Any,
                                                served: Served) -> None:
    s, ns = served, served.namespace
    big, small = _gang_of_three(kube, make_node, s, "grpc", "g", ("solo", "500m"))

    stream = DecisionStream(s, group="gang")
    try:
        less = s.stub.Less(pb.LessRequest(a=s.ref("g-0"), b=s.ref("g-1"))).less
        assert less is True  # same priority and gang: the older pod first
        placed: dict[str, str] = {}
        for i in range(3):
            ref = s.ref(f"g-{i}")
            assert code_of(s.stub.PreFilter(pb.PreFilterRequest(pod=ref)).status) == Code.SUCCESS
            if i == 0:  # the first member's PreFilter claimed room for the whole gang
                group = s.stub.GetPodGroup(pb.GetPodGroupRequest(
                    group=pb.ObjectKey(namespace=ns, name="gang")))
                assert group.claimed == 3 and group.attempts == 1
            filtered = s.stub.Filter(pb.FilterRequest(pod=ref, node_names=[big, small]))
            feasible = [n.node_name for n in filtered.nodes if code_of(n.status) == Code.SUCCESS]
            assert feasible, filtered
            scores = s.stub.Score(pb.ScoreRequest(pod=ref, node_names=feasible)).scores
            best = max(scores, key=lambda sc: sc.score).node_name
            reserved = s.stub.Reserve(pb.ReserveRequest(pod=ref, node_name=best))
            assert code_of(reserved.status) == Code.SUCCESS
            permit = s.stub.Permit(pb.PermitRequest(pod=ref, node_name=best))
            placed[f"g-{i}"] = best
            if i < 2:
                assert permit.WhichOneof("result") == "wait", permit
                assert code_of(permit.status) == Code.WAIT
                assert 0 < permit.wait.timeout_seconds <= 60
                assert f"{i + 1}/3 ready" in permit.wait.reason
                # exactly as in process: the pod waits in the scheduler's own map
                assert all(s.scheduler.waiting_pods.get(f"{ns}/g-{j}") is not None
                           for j in range(i + 1)), "a member was decided before the gang was"
            else:
                assert permit.WhichOneof("result") == "allow", permit
        group = s.stub.GetPodGroup(pb.GetPodGroupRequest(
            group=pb.ObjectKey(namespace=ns, name="gang")))
        assert group.waiting == 0 and group.placed == 3 and group.phase == "Scheduled"
        assert {m.state for m in group.members} == {pb.MEMBER_STATE_ASSUMED}

        decisions = stream.take(2)  # the two waiting members, released together
        assert sorted(d.pod.name for d in decisions) == ["g-0", "g-1"]
        assert all(d.allowed and d.group.name == "gang" for d in decisions)
        assert all(d.node_name == placed[d.pod.name] for d in decisions)

        # The caller binds, then PostBind; the watch then sees every member bound.
        for name, node in placed.items():
            with pytest.raises(grpc.RpcError) as early:
                s.stub.Unreserve(pb.UnreserveRequest(pod=s.ref(name), node_name="elsewhere"))
            assert early.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            uid = s.scheduler.cache.pod(f"{ns}/{name}").uid  # type: ignore[union-attr]
            kube.bind(ns, name, uid, node)
            s.stub.PostBind(pb.PostBindRequest(pod=s.ref(name), node_name=node))
        wait_until(lambda: all(s.scheduler.cache.pod(f"{ns}/g-{i}").node_name  # type: ignore[union-attr]
                               for i in range(3)), timeout=20, what="the watch to see the binds")
        group = s.stub.GetPodGroup(pb.GetPodGroupRequest(
            group=pb.ObjectKey(namespace=ns, name="gang")))
        assert group.bound == 3
        assert [(m.name, m.node, m.state) for m in group.members] == [
            (n, placed[n], pb.MEMBER_STATE_BOUND) for n in sorted(placed)]

        # Reserve and Unreserve of a plain pod: its room is taken, then given back.
        solo = s.ref("solo")
        assert code_of(s.stub.Reserve(pb.ReserveRequest(pod=solo, node_name=small)).status) \
            == Code.SUCCESS
        assert s.scheduler.cache.assumed_node(f"{ns}/solo") == small
        assert s.stub.Unreserve(pb.UnreserveRequest(pod=solo, node_name=small)).unreserved
        assert not s.scheduler.cache.is_assumed(f"{ns}/solo")
        assert not s.stub.Unreserve(pb.UnreserveRequest(pod=solo, node_name=small)).unreserved
    finally:
        stream.close()
    s.sched.watcher.check_settled()


def test_gang_rejected_on_timeout_through_the_stream(kube: KubeClient, make_node: Any,
                                                     served: Served) -> None:
    s, ns = served, served.namespace
    node = node_name("grpc-timeout")
    make_node(node, cpu="8")
    create_podgroup(kube, ns, "late", 3, maxScheduleTime="2s")
    for i in range(3):
        pod(kube, s, f"l-{i}", group="late")
    wait_cached(s, pods=["l-0", "l-1", "l-2"], nodes=[node], groups=["late"])
    stream = DecisionStream(s)
    try:
        timeouts: dict[str, float] = {}
        for i in range(2):
            ref = s.ref(f"l-{i}")
            assert code_of(s.stub.PreFilter(pb.PreFilterRequest(pod=ref)).status) == Code.SUCCESS
            assert code_of(s.stub.Reserve(pb.ReserveRequest(pod=ref, node_name=node)).status) \
                == Code.SUCCESS
            permit = s.stub.Permit(pb.PermitRequest(pod=ref, node_name=node))
            assert permit.WhichOneof("result") == "wait"
            assert 0 < permit.wait.timeout_seconds <= 2.0
            timeouts[f"l-{i}"] = permit.wait.timeout_seconds
        decisions = stream.take(2, timeout=60)
        assert sorted(d.pod.name for d in decisions) == ["l-0", "l-1"]
        for d in decisions:
            assert not d.allowed and d.plugin == "Permit" and "timed out" in d.reason, d
            # decided by the gang's deadline, not before it (the scheduler's own clock)
            assert d.waited_seconds >= timeouts[d.pod.name], d
        # As the loop's binding cycle does on a rejection: Unreserve. The gang's attempt
        # fails as a whole, once, counted as a timeout, and the gang is frozen.
        for i in range(2):
            assert s.stub.Unreserve(pb.UnreserveRequest(pod=s.ref(f"l-{i}"), node_name=node)) \
                .unreserved
        group = s.stub.GetPodGroup(pb.GetPodGroupRequest(
            group=pb.ObjectKey(namespace=ns, name="late")))
        assert (group.timeouts, group.rejections) == (1, 1)
        assert "timed out" in group.last_rejection_reason
        assert group.frozen_until != 0  # frozen: 0 means not frozen
        assert group.waiting == 0 and group.placed == 0 and group.claimed == 0
        assert {m.state for m in group.members} == {pb.MEMBER_STATE_PENDING}
        status = s.stub.PreFilter(pb.PreFilterRequest(pod=s.ref("l-2"))).status
        assert code_of(status) == Code.UNSCHEDULABLE and "frozen" in status.reasons[0]
        assert not s.scheduler.cache.node(node).pods  # type: ignore[union-attr]
    finally:
        stream.close()


def test_a_gang_scheduled_with_one_call_per_member(kube: KubeClient, make_node: Any,
                                                   served: Served) -> None:
    """Schedule: the server chooses each member's node, reserves it and runs Permit; the
    caller binds. A pod no node fits gets each node's reasons and holds nothing."""
    s, ns = served, served.namespace
    big, small = _gang_of_three(kube, make_node, s, "sched", "s", ("huge", "64"))
    stream = DecisionStream(s, group="gang")
    try:
        placed: dict[str, str] = {}
        for i in range(3):
            answer = s.stub.Schedule(pb.ScheduleRequest(pod=s.ref(f"s-{i}")))
            assert answer.WhichOneof("result") == ("wait" if i < 2 else "allow"), answer
            assert answer.node_name in (big, small), answer
            assert s.scheduler.cache.assumed_node(f"{ns}/s-{i}") == answer.node_name
            placed[f"s-{i}"] = answer.node_name
        decisions = stream.take(2)  # the waiting members, released with the third
        assert sorted(d.pod.name for d in decisions) == ["s-0", "s-1"]
        assert all(d.allowed and d.node_name == placed[d.pod.name] for d in decisions)
        for name, node in placed.items():
            uid = s.scheduler.cache.pod(f"{ns}/{name}").uid  # type: ignore[union-attr]
            kube.bind(ns, name, uid, node)
            s.stub.PostBind(pb.PostBindRequest(pod=s.ref(name), node_name=node))
        wait_until(lambda: all(s.scheduler.cache.pod(f"{ns}/{n}").node_name  # type: ignore[union-attr]
                               for n in placed), timeout=20, what="the watch to see the binds")

        answer = s.stub.Schedule(pb.ScheduleRequest(pod=s.ref("huge")))
        assert (answer.WhichOneof("result"), answer.node_name) == ("unschedulable", "")
        assert answer.status.plugin == "Filter" and "nodes are available" in \
            answer.unschedulable.reason
        reasons = {n.node_name: list(n.status.reasons) for n in answer.nodes}
        assert reasons[big] == reasons[small] == ["Insufficient cpu"], reasons
        assert not s.scheduler.cache.is_assumed(f"{ns}/huge")
        assert not s.stub.Unreserve(pb.UnreserveRequest(pod=s.ref("huge"), node_name=big)) \
            .unreserved
    finally:
        stream.close()
    s.sched.watcher.check_settled()


# -- the same answers as in process -------------------------------------------------------
def _status(status: Any) -> tuple[int, tuple[str, ...], str]:
    return int(status.code), tuple(status.reasons), status.plugin


def test_grpc_answers_equal_in_process_answers(kube: KubeClient, make_node: Any,
                                               served: Served) -> None:
    s, ns = served, served.namespace
    nodes = [node_name("eq-a"), node_name("eq-b"), node_name("eq-c")]
    make_node(nodes[0], cpu="1", memory="2Gi")
    # room for every pod Permit is compared on below (Reserve filters: it never over-commits)
    make_node(nodes[1], cpu="8", memory="8Gi")
    make_node(nodes[2], cpu="16", memory="64Gi", taints=[
        {"key": "dedicated", "value": "x", "effect": "NoSchedule"}])
    for group in ("twin-a", "twin-b"):
        create_podgroup(kube, ns, group, 2)
    pods = {"small": pod(kube, s, "small", cpu="500m"), "big": pod(kube, s, "big", cpu="3"),
            "a-0": pod(kube, s, "a-0", group="twin-a"), "b-0": pod(kube, s, "b-0", group="twin-b"),
            "m-0": pod(kube, s, "m-0", group="missing"), "m-1": pod(kube, s, "m-1",
                                                                    group="missing")}
    wait_cached(s, pods=list(pods), nodes=nodes, groups=["twin-a", "twin-b"])
    sched = s.scheduler
    fw = sched.framework

    def refs(name: str) -> list[pb.PodRef]:
        # by reference, and as the JSON object the API server returned
        return [s.ref(name), pb.PodRef(pod_json=json.dumps(pods[name]).encode())]

    # Less
    for a in pods:
        for b in pods:
            with sched.cache.lock:
                expected = fw.queue_sort.less(sched.cache.pod(f"{ns}/{a}"),  # type: ignore[arg-type]
                                              sched.cache.pod(f"{ns}/{b}"))  # type: ignore[arg-type]
            for ra, rb in zip(refs(a), refs(b), strict=True):
                assert s.stub.Less(pb.LessRequest(a=ra, b=rb)).less is expected, (a, b)

    # Filter and Score, over every node and over a chosen few
    for name in ("small", "big"):
        with sched.cache.lock:
            p = sched.cache.pod(f"{ns}/{name}")
            assert p is not None
            state = CycleState()
            assert fw.run_pre_filter(state, p).ok
            every = list(sched.cache.nodes())
            filtered = {n.name: fw.run_filter(state, p, n) for n in every}
            feasible = [n for n in every if filtered[n.name].ok]
            scores = fw.run_score(state, p, feasible)
            ours = [n for n in every if n.name in nodes]
            ours_scores = fw.run_score(state, p, ours)
        for ref in refs(name):
            got = s.stub.Filter(pb.FilterRequest(pod=ref)).nodes
            assert [(n.node_name, _status(n.status)) for n in got] == [
                (k, _status(v)) for k, v in filtered.items()]
            got_scores = s.stub.Score(pb.ScoreRequest(pod=ref)).scores
            assert {sc.node_name: sc.score for sc in got_scores} == scores
            got_scores = s.stub.Score(pb.ScoreRequest(pod=ref, node_names=nodes)).scores
            assert {sc.node_name: sc.score for sc in got_scores} == ours_scores
        # the fixture's nodes do tell the pods apart
        assert [filtered[n].ok for n in nodes] == (
            [True, True, False] if name == "small" else [False, True, False])

    # Permit: in process for one twin, through gRPC for the other (same state, same answer)
    def in_process(name: str, node: str) -> tuple[int, tuple[str, ...], str]:
        with sched.cache.lock:
            p = sched.cache.pod(f"{ns}/{name}")
            assert p is not None
            state = CycleState()
            sched.cache.assume(p, node)
            assert fw.run_reserve(state, p, node).ok
            return _status(fw.run_permit(state, p, node))

    def remote(name: str, node: str) -> tuple[int, tuple[str, ...], str]:
        ref = s.ref(name)
        assert s.stub.Reserve(pb.ReserveRequest(pod=ref, node_name=node)).status.code == 0
        answer = s.stub.Permit(pb.PermitRequest(pod=ref, node_name=node))
        status = _status(answer.status)
        kind = {0: "allow", 4: "wait"}.get(status[0], "unschedulable")
        assert answer.WhichOneof("result") == kind
        return status

    waits = in_process("a-0", nodes[1])
    assert waits[0] == Code.WAIT
    got = remote("b-0", nodes[1])
    assert got == (waits[0], tuple(r.replace("twin-a", "twin-b") for r in waits[1]), waits[2])
    assert in_process("small", nodes[1]) == remote("big", nodes[1]) == (0, (), "")
    refused = in_process("m-0", nodes[1])
    assert refused[0] == Code.UNSCHEDULABLE
    assert remote("m-1", nodes[1]) == refused
    # leave nothing behind (the in-process ones are undone as the loop would)
    with sched.cache.lock:
        sched.reject_all_waiting("test over")
    for name in ("b-0", "big", "m-1"):
        assert s.stub.Unreserve(pb.UnreserveRequest(pod=s.ref(name), node_name=nodes[1])) \
            .unreserved


# -- bad requests -------------------------------------------------------------------------
def test_bad_requests_get_the_right_code_naming_the_field(kube: KubeClient, make_node: Any,
                                                          served: Served) -> None:
    s, ns = served, served.namespace
    node = node_name("grpc-bad")
    make_node(node)
    create_podgroup(kube, ns, "known", 2)
    pod(kube, s, "known", group="known")
    wait_cached(s, pods=["known"], nodes=[node], groups=["known"])
    ok = s.ref("known")

    def json_pod(body: Any) -> pb.PodRef:
        return pb.PodRef(pod_json=json.dumps(body).encode())

    good_meta = {"namespace": ns, "name": "x"}
    raw_filter = s.channel.unary_unary("/coscheduling.v1.Scheduling/Filter")
    cases: list[tuple[str, Callable[[], Any], grpc.StatusCode, str]] = [
        ("malformed JSON", lambda: s.stub.Filter(pb.FilterRequest(
            pod=pb.PodRef(pod_json=b'{"metadata": '))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json: not valid JSON"),
        ("not UTF-8", lambda: s.stub.PreFilter(pb.PreFilterRequest(
            pod=pb.PodRef(pod_json=b"\xff\xfe"))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json: not valid JSON"),
        ("a list, not a Pod", lambda: s.stub.Score(pb.ScoreRequest(pod=json_pod([1, 2]))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json: must be a JSON object, got list"),
        ("name of the wrong type", lambda: s.stub.Filter(pb.FilterRequest(
            pod=json_pod({"metadata": {"namespace": ns, "name": 5}}))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json.metadata.name: must be a string"),
        ("spec of the wrong type", lambda: s.stub.Filter(pb.FilterRequest(
            pod=json_pod({"metadata": good_meta, "spec": "big"}))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json.spec: must be a JSON object"),
        ("priority of the wrong type", lambda: s.stub.Filter(pb.FilterRequest(
            pod=json_pod({"metadata": good_meta, "spec": {"priority": "high"}}))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json.spec.priority: must be an integer"),
        ("a bad quantity", lambda: s.stub.Filter(pb.FilterRequest(pod=json_pod({
            "metadata": good_meta, "spec": {"containers": [
                {"name": "c", "resources": {"requests": {"cpu": "lots"}}}]}}))),
         grpc.StatusCode.INVALID_ARGUMENT,
         "pod.pod_json.spec.containers[0].resources.requests.cpu: 'lots' is not a quantity"),
        ("another kind", lambda: s.stub.Filter(pb.FilterRequest(
            pod=json_pod({"kind": "Node", "metadata": good_meta}))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json.kind: must be Pod"),
        ("bytes that are no request", lambda: raw_filter(b"\xff\xff\xff", timeout=5),
         grpc.StatusCode.INVALID_ARGUMENT, "request: not a valid coscheduling.v1.FilterRequest"),
        ("no pod", lambda: s.stub.Filter(pb.FilterRequest()),
         grpc.StatusCode.INVALID_ARGUMENT, "pod: required"),
        ("an empty pod ref", lambda: s.stub.PreFilter(pb.PreFilterRequest(pod=pb.PodRef())),
         grpc.StatusCode.INVALID_ARGUMENT, "pod: required"),
        ("second pod of Less missing", lambda: s.stub.Less(pb.LessRequest(a=ok)),
         grpc.StatusCode.INVALID_ARGUMENT, "b: required"),
        ("no namespace in the ref", lambda: s.stub.Filter(pb.FilterRequest(
            pod=pb.PodRef(key=pb.ObjectKey(name="known")))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.key.namespace: required"),
        ("no namespace in the JSON", lambda: s.stub.Filter(pb.FilterRequest(
            pod=json_pod({"metadata": {"name": "x"}}))),
         grpc.StatusCode.INVALID_ARGUMENT, "pod.pod_json.metadata.namespace: required"),
        ("Schedule without a pod", lambda: s.stub.Schedule(pb.ScheduleRequest()),
         grpc.StatusCode.INVALID_ARGUMENT, "pod: required"),
        ("unwatched JSON pod to Schedule", lambda: s.stub.Schedule(pb.ScheduleRequest(
            pod=json_pod({"metadata": good_meta}))),
         grpc.StatusCode.NOT_FOUND, f"pod.pod_json: pod {ns}/x is not in the server's watch"),
        ("no node", lambda: s.stub.Reserve(pb.ReserveRequest(pod=ok)),
         grpc.StatusCode.INVALID_ARGUMENT, "node_name: required"),
        ("no group", lambda: s.stub.GetPodGroup(pb.GetPodGroupRequest()),
         grpc.StatusCode.INVALID_ARGUMENT, "group: required"),
        ("a node named twice", lambda: s.stub.Filter(pb.FilterRequest(
            pod=ok, node_names=[node, node])),
         grpc.StatusCode.INVALID_ARGUMENT, "node_names[1]: node"),
        ("unknown node", lambda: s.stub.Reserve(pb.ReserveRequest(pod=ok, node_name="nope")),
         grpc.StatusCode.NOT_FOUND, 'node_name: node "nope" not found'),
        ("unknown node in a list", lambda: s.stub.Score(pb.ScoreRequest(
            pod=ok, node_names=[node, "nope"])),
         grpc.StatusCode.NOT_FOUND, 'node_names[1]: node "nope" not found'),
        ("unknown group", lambda: s.stub.GetPodGroup(pb.GetPodGroupRequest(
            group=pb.ObjectKey(namespace=ns, name="nope"))),
         grpc.StatusCode.NOT_FOUND, f"group: PodGroup {ns}/nope not found"),
        ("unknown pod ref", lambda: s.stub.Filter(pb.FilterRequest(pod=s.ref("nope"))),
         grpc.StatusCode.NOT_FOUND, f"pod.key: pod {ns}/nope is not in the server's watch"),
        ("unwatched JSON pod to Reserve", lambda: s.stub.Reserve(pb.ReserveRequest(
            pod=json_pod({"metadata": good_meta}), node_name=node)),
         grpc.StatusCode.NOT_FOUND, f"pod.pod_json: pod {ns}/x is not in the server's watch"),
        ("Permit before Reserve", lambda: s.stub.Permit(pb.PermitRequest(pod=ok, node_name=node)),
         grpc.StatusCode.FAILED_PRECONDITION, f"pod: pod {ns}/known is not reserved"),
        ("a pod larger than any Pod", lambda: s.stub.Filter(pb.FilterRequest(pod=pb.PodRef(
            pod_json=b'{"metadata": {"name": "' + b"x" * (4 << 20) + b'"}}'))),
         grpc.StatusCode.INVALID_ARGUMENT, "bytes is more than a Pod can be"),
        ("a message over the 16 MiB limit", lambda: s.stub.Filter(pb.FilterRequest(
            pod=pb.PodRef(pod_json=b"x" * (17 << 20)))),
         grpc.StatusCode.RESOURCE_EXHAUSTED, "larger than max"),
    ]
    for what, call, code, message in cases:
        with pytest.raises(grpc.RpcError) as err:
            call()
        assert (err.value.code(), what) == (code, what), err.value.details()
        assert message in err.value.details(), (what, err.value.details())
        # the server is still there, and still right
        assert s.health() == health_pb2.HealthCheckResponse.SERVING, what
        assert code_of(s.stub.PreFilter(pb.PreFilterRequest(pod=ok)).status) \
            == Code.UNSCHEDULABLE, what  # 1 of minMember 2 exists


# -- no caller over-commits a node; read-only calls leave nothing behind --------------------
def test_reserve_and_schedule_on_a_full_node_are_refused_with_filters_reason(
        kube: KubeClient, make_node: Any, served: Served) -> None:
    """A 4-cpu node holding a bound 4-cpu pod: Reserve of another 4-cpu pod there answers
    Filter's status and holds nothing; Schedule finds no node; the node stays at 4 cpu."""
    s, ns = served, served.namespace
    full = node_name("grpc-full")
    make_node(full, cpu="4")
    create_pod(kube, ns, pod_body("resident", scheduler=s.sched.name, cpu="4",
                                  node_name=full))
    pod(kube, s, "late", cpu="4")
    wait_cached(s, pods=["resident", "late"], nodes=[full])
    wait_until(lambda: s.scheduler.cache.pod(f"{ns}/resident").node_name == full,  # type: ignore[union-attr]
               timeout=20, what="the watch to see the resident pod bound")

    reserved = s.stub.Reserve(pb.ReserveRequest(pod=s.ref("late"), node_name=full))
    assert (code_of(reserved.status), list(reserved.status.reasons), reserved.status.plugin) \
        == (Code.UNSCHEDULABLE, ["Insufficient cpu"], "NodeResourcesFit")
    scheduled = s.stub.Schedule(pb.ScheduleRequest(pod=s.ref("late")))
    assert scheduled.WhichOneof("result") == "unschedulable" and not scheduled.node_name
    assert [n.node_name for n in scheduled.nodes if "Insufficient cpu" in n.status.reasons] \
        == [full]
    with s.scheduler.cache.lock:
        info = s.scheduler.cache.node(full)
        assert info is not None and info.requested["cpu"] == 4000
        assert not s.scheduler.cache.is_assumed(f"{ns}/late")
    with pytest.raises(grpc.RpcError) as err:
        s.stub.Permit(pb.PermitRequest(pod=s.ref("late"), node_name=full))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION  # nothing was reserved
    late = kube.get(f"/api/v1/namespaces/{ns}/pods/late")
    assert not late["spec"].get("nodeName")


def test_filter_and_score_with_invented_pods_leave_the_label_index_as_it_was(
        kube: KubeClient, make_node: Any, served: Served) -> None:
    """1,000 Filter and Score calls, each with a made-up pod whose anti-affinity names a
    label key of its own: no key is left in the index the scheduling loop keeps current."""
    s, ns = served, served.namespace
    nodes = [node_name("grpc-idx"), node_name("grpc-idx")]
    for name in nodes:
        make_node(name, cpu="4")
    create_pod(kube, ns, pod_body("labelled", scheduler=s.sched.name, node_name=nodes[0],
                                  labels={"app": "web"}))
    wait_cached(s, pods=["labelled"], nodes=nodes)
    with s.scheduler.cache.lock:
        before = s.scheduler.cache.label_keys()
    for i in range(1000):
        term = {"labelSelector": {"matchLabels": {f"invented-{i}": "x"}},
                "topologyKey": "kubernetes.io/hostname"}
        body = pod_body(f"invented-{i}", scheduler=s.sched.name)
        body["metadata"]["namespace"] = ns
        body["spec"]["affinity"] = {"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [term]}}
        ref = pb.PodRef(pod_json=json.dumps(body).encode())
        if i % 2:
            answer = s.stub.Filter(pb.FilterRequest(pod=ref, node_names=nodes))
            assert all(code_of(n.status) == Code.SUCCESS for n in answer.nodes)
        else:
            assert len(s.stub.Score(pb.ScoreRequest(pod=ref)).scores) >= 2
    with s.scheduler.cache.lock:
        assert s.scheduler.cache.label_keys() == before
