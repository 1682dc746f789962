"""The gRPC server's own logic on an in-memory cluster (tests/simulation.py): the API's
codes, pod parsing, decision routing, shutdown, and the generated code being current."""

from __future__ import annotations

import filecmp
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from coscheduling.framework.status import Code
from coscheduling.server import GrpcSettings, PluginServer, build_server
from coscheduling.server.cli import RPC_NAMES, _rpc_name
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.gen import scheduling_pb2_grpc as pb_grpc
from coscheduling.server.wire import CODES, RequestError, pod_from_json
from tests.simulation import SimCluster

REPO = Path(__file__).resolve().parents[2]


def test_status_codes_are_the_frameworks_numbers() -> None:
    assert {code.name: int(code) for code in Code} == {
        name.removeprefix("CODE_"): number for name, number in pb.Code.items()}
    assert all(int(CODES[code]) == int(code) for code in Code)


def test_generated_code_is_what_proto_generates(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(REPO / "proto" / "generate.py"), str(tmp_path)],
                   check=True, cwd=REPO)
    committed = REPO / "coscheduling" / "server" / "gen"
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi"))
    _, mismatch, errors = filecmp.cmpfiles(tmp_path, committed, names, shallow=False)
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
