"""The gRPC server's own logic on an in-memory cluster (tests/simulation.py): the API's
codes, pod parsing, decision routing, shutdown, and the generated code being current."""

from __future__ import annotations

import filecmp
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from coscheduling.framework.status import Code, Status
from coscheduling.server import GrpcSettings, PluginServer, build_server, polling
from coscheduling.server.commands import RPC_NAMES, _rpc_name
from coscheduling.server.convert import CODES, RequestError, pod_from_json
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.gen import scheduling_pb2_grpc as pb_grpc
from tests.simulation import SimCluster

REPO = Path(__file__).resolve().parents[2]


def test_status_codes_are_the_frameworks_numbers() -> None:
    assert {code.name: int(code) for code in Code} == {
        name.removeprefix("CODE_"): number for name, number in pb.Code.items()}
    assert all(int(CODES[code]) == int(code) for code in Code)


def test_generated_code_is_what_proto_generates(tmp_path: Path) -> None:
    generated = {"server/gen": tmp_path / "gen", "cluster/kubeproto": tmp_path / "kubeproto"}
    subprocess.run([sys.executable, str(REPO / "proto" / "generate.py"),
                    *map(str, generated.values())], check=True, cwd=REPO, capture_output=True)
    for package, made in generated.items():
        committed = REPO / "coscheduling" / package
        names = sorted(p.name for p in made.iterdir())
        assert names == sorted(p.name for p in committed.iterdir()
                               if p.suffix in (".py", ".pyi"))
        _, mismatch, errors = filecmp.cmpfiles(made, committed, names, shallow=False)
        assert not mismatch and not errors, f"run `make proto`: {mismatch or errors} differ"


@pytest.mark.parametrize(("raw", "field", "message"), [
    (b"", "pod.pod_json", "empty"),
    (b"{", "pod.pod_json", "not valid JSON"),
    (b'"a pod"', "pod.pod_json", "must be a JSON object, got str"),
    (b'{"metadata": []}', "pod.pod_json.metadata", "must be a JSON object, got list"),
    (b'{"metadata": {"name": "a"}}', "pod.pod_json.metadata.namespace", "required"),
    (b'{"metadata": {"name": "a", "namespace": "n", "labels": {"x": 1}}}',
     "pod.pod_json.metadata.labels", "values must be strings"),
    (b'{"metadata": {"name": "a", "namespace": "n"}, "spec": {"containers": 3}}',
     "pod.pod_json", ""),
    (b'{"metadata": {"name": "a", "namespace": "n"}, "spec": {"containers": '
     b'[{"resources": {"requests": {"memory": "-x"}}}]}}', "pod.pod_json.spec", ""),
])
def test_malformed_pod_json_names_the_field(raw: bytes, field: str, message: str) -> None:
    with pytest.raises(RequestError) as err:
        pod_from_json(raw, "pod")
    assert err.value.code == grpc.StatusCode.INVALID_ARGUMENT
    assert err.value.field.startswith(field) and message in str(err.value), str(err.value)


def test_pod_json_is_parsed_as_the_watch_parses_it() -> None:
    pod = pod_from_json(json.dumps({
        "kind": "Pod", "metadata": {"namespace": "n", "name": "a", "uid": "u",
                                    "labels": {"group.batch.scheduler.tencent.com": "g"}},
        "spec": {"priority": 5, "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "250m"}}}]}}).encode(), "pod")
    assert (pod.key, pod.uid, pod.group_key, pod.priority, pod.requests["cpu"]) == \
        ("n/a", "u", "n/g", 5, 250)


@pytest.mark.parametrize(("before", "after"), [
    (None, "-event_engine_listener,-event_engine_client"),
    ("", "-event_engine_listener,-event_engine_client"),
    ("event_engine_listener", "event_engine_listener,-event_engine_client"),  # theirs wins
    ("-event_engine_client,other", "-event_engine_client,other,-event_engine_listener"),
])
def test_grpc_polls_inline_unless_the_environment_says_otherwise(
        before: str | None, after: str) -> None:
    environ = {} if before is None else {polling.VARIABLE: before}
    polling.poll_inline(environ)
    assert environ == {polling.VARIABLE: after}


def test_the_pinned_grpc_knows_the_experiments_turned_off() -> None:
    """grpc logs an error for an experiment it does not know (and ignores it): a grpcio
    upgrade that drops them must show here, not as a quiet loss of latency."""
    serve = ("import coscheduling.server, grpc, concurrent.futures as f; "
             "s = grpc.server(f.ThreadPoolExecutor(1)); s.add_insecure_port('127.0.0.1:0'); "
             "s.start(); s.stop(0).wait()")
    env = {k: v for k, v in os.environ.items() if k != polling.VARIABLE}
    done = subprocess.run([sys.executable, "-c", serve], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=60, check=True)
    assert "experiment" not in done.stderr.lower(), done.stderr


def test_call_accepts_rpc_names_in_any_case() -> None:
    assert {_rpc_name(n) for n in ("less", "PreFilter", "post-bind", "WATCH", "podgroup")} == \
        {"Less", "PreFilter", "PostBind", "WatchDecisions", "GetPodGroup"}
    rpcs = {m.name for m in pb.DESCRIPTOR.services_by_name["Scheduling"].methods}
    assert rpcs <= set(RPC_NAMES.values())
    with pytest.raises(Exception, match="unknown RPC"):
        _rpc_name("bind")


# -- a server on the in-memory cluster -------------------------------------------------------


@pytest.fixture
def server(sim: SimCluster) -> Iterator[PluginServer]:
    srv = build_server(sim.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"))
    srv.start()
    yield srv
    srv.stop(0).wait(10)


@pytest.fixture
def stub(server: PluginServer) -> Iterator[Any]:
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]


def ref(name: str) -> pb.PodRef:
    return pb.PodRef(key=pb.ObjectKey(namespace="ns", name=name))


def test_remote_pods_are_never_bound_by_the_scheduler(sim: SimCluster, stub: Any) -> None:
    """A gang with one member placed by the loop and one by a caller: the release lets the
    loop bind its own member, and leaves the caller's to the caller."""
    sim.add_node("n1", cpu="4")
    sim.add_group("g", 2)
    sim.add_pod("loop", group="g")
    remote = sim.add_pod("remote", group="g")
    sim.scheduler.queue.delete(remote.key)  # the caller's member is not the loop's to place
    result = sim.scheduler.schedule_one(timeout=1)
    assert result is not None and result.pod_key == "ns/loop" and result.status.code == Code.WAIT
    assert stub.Reserve(pb.ReserveRequest(pod=ref("remote"), node_name="n1")).status.code == 0
    assert stub.Permit(pb.PermitRequest(pod=ref("remote"), node_name="n1")) \
        .WhichOneof("result") == "allow"
    sim.settle()
    assert sim.bound == {"ns/loop": "n1"}  # the loop's member; never the caller's
    assert sim.scheduler.cache.assumed_node("ns/remote") == "n1"


def test_a_remote_rejection_is_left_to_the_caller(sim: SimCluster, stub: Any) -> None:
    sim.add_node("n1")
    sim.add_group("g", 3)
    for name in ("a", "b", "c"):
        sim.add_pod(name, group="g")
    assert stub.PreFilter(pb.PreFilterRequest(pod=ref("a"))).status.code == 0
    for name in ("a", "b"):
        assert stub.Reserve(pb.ReserveRequest(pod=ref(name), node_name="n1")).status.code == 0
        assert stub.Permit(pb.PermitRequest(pod=ref(name), node_name="n1")) \
            .WhichOneof("result") == "wait"
    with sim.scheduler.cache.lock:
        sim.scheduler.reject_all_waiting("test")
    sim.settle()
    # Rejected, but still assumed: the scheduler did not undo them, the caller will.
    assert all(sim.scheduler.cache.is_assumed(f"ns/{n}") for n in ("a", "b"))
    with pytest.raises(grpc.RpcError) as err:
        stub.PostBind(pb.PostBindRequest(pod=ref("a"), node_name="n1"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "was not permitted" in err.value.details()
    for name in ("a", "b"):
        assert stub.Unreserve(pb.UnreserveRequest(pod=ref(name), node_name="n1")).unreserved
    group = stub.GetPodGroup(pb.GetPodGroupRequest(group=pb.ObjectKey(namespace="ns",
                                                                      name="g")))
    assert (group.rejections, group.claimed, group.placed) == (1, 0, 0)
    assert group.last_rejection_reason == "test"


def test_reserve_is_idempotent_and_refuses_a_second_node(sim: SimCluster, stub: Any) -> None:
    sim.add_node("n1")
    sim.add_node("n2")
    sim.add_pod("p")
    for _ in range(2):
        assert stub.Reserve(pb.ReserveRequest(pod=ref("p"), node_name="n1")).status.code == 0
    with pytest.raises(grpc.RpcError) as err:
        stub.Reserve(pb.ReserveRequest(pod=ref("p"), node_name="n2"))
    assert err.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert "reserved on node n1: Unreserve it first" in err.value.details()
    assert stub.Permit(pb.PermitRequest(pod=ref("p"), node_name="n1")).WhichOneof("result") \
        == "allow"
    with pytest.raises(grpc.RpcError) as err:
        stub.Permit(pb.PermitRequest(pod=ref("p"), node_name="n1"))
    assert "Permit was already called" in err.value.details()


def test_an_unexpected_error_is_internal_and_the_server_lives_on(
        sim: SimCluster, stub: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    sim.add_pod("p")
    sorter = sim.scheduler.framework.queue_sort

    def broken(a: Any, b: Any) -> bool:
        raise KeyError("boom")

    monkeypatch.setattr(sorter, "less", broken)
    with pytest.raises(grpc.RpcError) as err:
        stub.Less(pb.LessRequest(a=ref("p"), b=ref("p")))
    assert err.value.code() == grpc.StatusCode.INTERNAL
    assert err.value.details() == "Less: internal error: KeyError: 'boom'"
    monkeypatch.undo()
    assert stub.Less(pb.LessRequest(a=ref("p"), b=ref("p"))).less is False


def test_the_last_server_to_stop_undoes_the_cycles_left_open(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_group("g", 2)
    sim.add_pod("a", group="g")
    sim.add_pod("b", group="g")
    first = build_server(sim.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"))
    second = build_server(sim.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"))
    first.start()
    second.start()
    with grpc.insecure_channel(first.address) as channel:
        stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
        stub.Reserve(pb.ReserveRequest(pod=ref("a"), node_name="n1"))
        assert stub.Permit(pb.PermitRequest(pod=ref("a"), node_name="n1")) \
            .WhichOneof("result") == "wait"
    assert first.stop(0).wait(10)
    # the other server still serves this scheduler: the cycle is its callers' to finish
    assert sim.scheduler.waiting_pods.get("ns/a") is not None
    assert second.stop(0).wait(10)
    assert sim.scheduler.waiting_pods.get("ns/a") is None
    assert not sim.scheduler.cache.is_assumed("ns/a")
    sim.settle()
    assert sim.bound == {}


def test_decision_streams_are_capped_and_end_at_shutdown(sim: SimCluster) -> None:
    srv = build_server(sim.scheduler, lambda: True,
                       GrpcSettings(address="127.0.0.1:0", max_workers=4, max_streams=1))
    srv.start()
    with grpc.insecure_channel(srv.address) as channel:
        stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
        first = stub.WatchDecisions(pb.WatchDecisionsRequest())
        first.initial_metadata()
        with pytest.raises(grpc.RpcError) as err:
            next(iter(stub.WatchDecisions(pb.WatchDecisionsRequest(), timeout=5)))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert "1 WatchDecisions streams are open" in err.value.details()
        assert stub.Less(pb.LessRequest(
            a=pb.PodRef(pod_json=b'{"metadata": {"namespace": "a", "name": "b"}}'),
            b=pb.PodRef(pod_json=b'{"metadata": {"namespace": "a", "name": "c"}}'))).less
        stopped = srv.stop(10)
        assert list(first) == [] and first.code() == grpc.StatusCode.OK  # ended, not cut
        assert stopped.wait(5)


# -- Schedule: the whole cycle in one call ---------------------------------------------------


def _held(sim: SimCluster, key: str) -> tuple[str | None, int]:
    """What the scheduler holds for a pod: the node it is assumed on, and requested cpu
    (millicores) on every node together."""
    cpu = sum(info.requested.get("cpu", 0) for info in sim.scheduler.cache.nodes())
    return sim.scheduler.cache.assumed_node(key) if sim.scheduler.cache.is_assumed(key) \
        else None, cpu


INSUFFICIENT = [("n1", ["Insufficient cpu"]), ("n2", ["Insufficient cpu"])]


@pytest.mark.parametrize(("pods", "calls"), [
    # Pods to create (name, cpu, group; group g has minMember 2, nodes n1 and n2 have 2 and
    # 4 cpu), then each Schedule call in order: the pod, then what it answers: result,
    # node ("" when nothing is held), the deciding status' plugin and a fragment of its
    # reasons, and each node's Filter status when no node fits.
    ([("p", "1", "")], [("p", "allow", "n2", "", "", [])]),  # the emptier node scores best
    ([("a", "1", "g"), ("b", "1", "g")],
     [("a", "wait", "n2", "Coscheduling", "1/2", []), ("b", "allow", "n2", "", "", [])]),
    ([("a", "1", "g")], [("a", "unschedulable", "", "Coscheduling", "", [])]),  # 1 of 2 exist
    ([("big", "16", "")], [("big", "unschedulable", "", "Filter",
                            "0/2 nodes are available: 2 Insufficient cpu", INSUFFICIENT)]),
])
def test_schedule_runs_the_loops_cycle_and_holds_nothing_on_failure(
        sim: SimCluster, stub: Any, pods: list[tuple[str, str, str]],
        calls: list[tuple[str, str, str, str, str, list[Any]]]) -> None:
    sim.add_node("n1", cpu="2")
    sim.add_node("n2", cpu="4")
    sim.add_group("g", 2)
    for name, cpu, group in pods:
        sim.add_pod(name, cpu=cpu, group=group)
    for name, result, node, plugin, reason, nodes in calls:
        answer = stub.Schedule(pb.ScheduleRequest(pod=ref(name)))
        assert (answer.WhichOneof("result"), answer.node_name) == (result, node), answer
        assert answer.status.plugin == plugin and reason in " ".join(answer.status.reasons)
        assert [(n.node_name, list(n.status.reasons)) for n in answer.nodes] == nodes
        assert _held(sim, f"ns/{name}")[0] == (node or None)  # reserved there, or nothing
        if result == "wait":
            assert answer.wait.timeout_seconds > 0 and answer.wait.reason
        elif result == "unschedulable":
            assert answer.unschedulable.reason == ", ".join(answer.status.reasons)
            assert _held(sim, f"ns/{name}") == (None, 0)
    last, result, node = calls[-1][:3]
    if result == "allow":  # the caller binds, then PostBind ends the cycle
        stub.PostBind(pb.PostBindRequest(pod=ref(last), node_name=node))


@pytest.mark.parametrize(("step", "refusal"), [("run_reserve", "Reserve"),
                                               ("run_permit", "Permit")])
def test_a_refused_reserve_or_permit_leaves_nothing_held(
        sim: SimCluster, stub: Any, monkeypatch: pytest.MonkeyPatch, step: str,
        refusal: str) -> None:
    sim.add_node("n1", cpu="4")
    sim.add_pod("p")
    refuse = Status(Code.UNSCHEDULABLE, (f"{refusal} refused",), "Test")
    monkeypatch.setattr(sim.scheduler.framework, step, lambda *args: refuse)
    answer = stub.Schedule(pb.ScheduleRequest(pod=ref("p")))
    assert answer.WhichOneof("result") == "unschedulable" and answer.node_name == ""
    assert (answer.unschedulable.reason, answer.status.plugin) == (f"{refusal} refused", "Test")
    assert _held(sim, "ns/p") == (None, 0)
    monkeypatch.undo()  # nothing was left behind that would stop the next attempt
    assert stub.Schedule(pb.ScheduleRequest(pod=ref("p"))).WhichOneof("result") == "allow"


def test_schedule_refuses_what_reserve_refuses(sim: SimCluster, stub: Any) -> None:
    sim.add_node("n1")
    sim.add_pod("p")
    sim.add_pod("q")
    assert stub.Reserve(pb.ReserveRequest(pod=ref("p"), node_name="n1")).status.code == 0
    with sim.scheduler.cache.lock:
        sim.scheduler.cache.assume(sim.scheduler.cache.pod("ns/q"), "n1")  # type: ignore[arg-type]
    cases: list[tuple[Any, grpc.StatusCode, str]] = [
        (pb.ScheduleRequest(), grpc.StatusCode.INVALID_ARGUMENT,
         "pod: required: set pod_json or key"),
        (pb.ScheduleRequest(pod=pb.PodRef(pod_json=b"{")), grpc.StatusCode.INVALID_ARGUMENT,
         "pod.pod_json: not valid JSON"),
        (pb.ScheduleRequest(pod=ref("nope")), grpc.StatusCode.NOT_FOUND,
         "pod.key: pod ns/nope is not in the server's watch cache"),
        (pb.ScheduleRequest(pod=ref("p")), grpc.StatusCode.FAILED_PRECONDITION,
         "pod: pod ns/p is reserved on node n1: Unreserve it first"),
        (pb.ScheduleRequest(pod=ref("q")), grpc.StatusCode.FAILED_PRECONDITION,
         "pod: pod ns/q is assumed on node n1 by the scheduler's own loop"),
    ]
    for request, code, message in cases:
        with pytest.raises(grpc.RpcError) as err:
            stub.Schedule(request)
        assert err.value.code() == code and err.value.details().startswith(message), message
    assert sim.scheduler.cache.assumed_node("ns/p") == "n1"  # the reservation is untouched


class Standby:
    """A replica that does not hold the lease."""

    def leading(self) -> bool:
        return False

    def leader(self) -> str:
        return "replica-a"


def test_a_standby_refuses_schedule_and_holds_nothing(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_pod("p")
    srv = build_server(sim.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"),
                       Standby())
    srv.start()
    try:
        with grpc.insecure_channel(srv.address) as channel:
            stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
            with pytest.raises(grpc.RpcError) as err:
                stub.Schedule(pb.ScheduleRequest(pod=ref("p")))
    finally:
        srv.stop(0).wait(10)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    assert "not the leader; the leader is replica-a" in err.value.details()
    assert _held(sim, "ns/p") == (None, 0)


def test_schedule_preempts_as_the_loop_does(sim: SimCluster, stub: Any) -> None:
    """No node fits: Schedule runs PostFilter, as the loop's cycle does, so a caller's pod of
    higher priority gets the lower pod evicted and is nominated; it holds nothing yet and
    is placed on the freed node once the victim is gone."""
    sim.add_node("n", cpu="2")
    sim.add_pod("low", cpu="2", priority=10)
    sim.run()
    sim.add_pod("high", cpu="2", priority=1000)
    answer = stub.Schedule(pb.ScheduleRequest(pod=ref("high")))
    assert answer.WhichOneof("result") == "unschedulable", answer
    assert "preempt" in answer.unschedulable.reason, answer.unschedulable.reason
    assert sim.evictions.victims == ["ns/low"]
    assert sim.evictions.nominated.get("ns/high") == "n"
    assert _held(sim, "ns/high") == (None, 2000)  # the victim's room only: nothing assumed
    sim.evictions.finish()  # the victim is gone
    answer = stub.Schedule(pb.ScheduleRequest(pod=ref("high")))
    assert (answer.WhichOneof("result"), answer.node_name) == ("allow", "n"), answer
