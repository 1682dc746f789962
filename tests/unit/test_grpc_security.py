"""The gRPC server's security (issue 13): loopback unless mutual TLS, per-RPC authorization
by client certificate, and reservations that expire when their caller goes quiet."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coscheduling.api.pods import parse_pod
from coscheduling.cli import main
from coscheduling.framework import waiting
from coscheduling.localcluster.certs import _self_or_ca_signed
from coscheduling.server import GrpcSettings, build_server
from coscheduling.server.auth import MUTATING_RPCS, READ_ONLY_RPCS, Authorizer, is_loopback
from coscheduling.server.convert import RequestError
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.gen import scheduling_pb2_grpc as pb_grpc
from coscheduling.server.servicer import SchedulingServicer
from tests.simulation import SimCluster

CA_EXT = ["basicConstraints = critical,CA:TRUE", "keyUsage = critical,keyCertSign,cRLSign"]
Pair = tuple[Path, Path]


def _leaf(usage: str, sans: str = "") -> list[str]:
    ext = ["basicConstraints = critical,CA:FALSE",
           "keyUsage = critical,digitalSignature,keyEncipherment",
           f"extendedKeyUsage = {usage}"]
    return ext + ([f"subjectAltName = {sans}"] if sans else [])


CertSpec = tuple[str, str, list[str], str]
"""A certificate to make: (name, common name, OpenSSL extensions, the name of its CA or "")."""


def make_certs(directory: Path, specs: list[CertSpec]) -> dict[str, Pair]:
    """Each certificate of ``specs``, in order (a CA before those it signs), in ``directory``."""
    made: dict[str, Pair] = {}
    for name, common_name, ext, ca in specs:
        made[name] = (directory / f"{name}.crt", directory / f"{name}.key")
        _self_or_ca_signed(*made[name], common_name, ext, made[ca] if ca else None)
    return made


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    """A CA, the server's certificate, and clients named by common name or by SAN."""
    return make_certs(tmp_path_factory.mktemp("certs"), [
        ("ca", "test-ca", CA_EXT, ""),
        ("server", "coscheduling", _leaf("serverAuth", "IP:127.0.0.1"), "ca"),
        ("reader", "dashboard", _leaf("clientAuth"), "ca"),
        ("writer", "ignored-cn", _leaf("clientAuth", "DNS:driver.example"), "ca"),
        ("stranger", "someone", _leaf("clientAuth"), "ca"),
    ])


@pytest.mark.parametrize(("address", "loopback"), [
    ("127.0.0.1:50051", True), ("127.3.4.5:1", True), ("[::1]:50051", True),
    ("localhost:50051", True), ("0.0.0.0:50051", False), ("[::]:50051", False),
    (":50051", False), ("10.1.2.3:50051", False), ("scheduler.example:50051", False),
])
def test_loopback_addresses(address: str, loopback: bool) -> None:
    assert is_loopback(address) is loopback


def test_every_rpc_is_either_read_only_or_mutating() -> None:
    rpcs = {m.name for m in pb.DESCRIPTOR.services_by_name["Scheduling"].methods}
    assert rpcs == READ_ONLY_RPCS | MUTATING_RPCS
    assert not READ_ONLY_RPCS & MUTATING_RPCS


@pytest.mark.parametrize(("settings", "message"), [
    ({"address": "0.0.0.0:50051"}, "needs mutual TLS (--tls-cert, --tls-key, --client-ca), "
                                   "or --insecure-expose-grpc-without-mtls"),
    ({"address": "10.0.0.5:50051", "tls_cert": "s.crt", "tls_key": "s.key"},
     "needs mutual TLS"),
    ({"tls_cert": "s.crt", "tls_key": "s.key", "client_ca": "ca.crt"},
     "no client may call: list certificate identities"),
    ({"read_only_clients": ("dashboard",)}, "they need mutual TLS"),
    ({"reservation_timeout": 0.0}, "reservation_timeout must be positive"),
])
def test_unsafe_settings_are_refused(settings: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError) as err:
        GrpcSettings(**settings).validate()
    assert message in str(err.value)


@pytest.mark.parametrize("settings", [
    {"address": "0.0.0.0:50051", "insecure_remote": True},
    {"address": "0.0.0.0:50051", "tls_cert": "s.crt", "tls_key": "s.key",
     "client_ca": "ca.crt", "mutating_clients": ("*",)},
    {"address": "127.0.0.1:0"},
])
def test_safe_settings_are_accepted(settings: dict[str, Any]) -> None:
    GrpcSettings(**settings).validate()


@pytest.mark.parametrize("command", ["run", "serve"])
def test_run_and_serve_refuse_an_open_address_without_mutual_tls(
        command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "--address", "0.0.0.0:50051"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err  # one clear line, no traceback
    assert "reachable from other machines" in err and "--insecure-expose-grpc-without-mtls" in err


def _channel(address: str, certs: dict[str, Pair], client: str) -> grpc.Channel:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs["ca"][0].read_bytes(),
        private_key=certs[client][1].read_bytes(),
        certificate_chain=certs[client][0].read_bytes())
    return grpc.secure_channel(address, credentials)


def _outcome(call: Any) -> str:
    try:
        call()
    except grpc.RpcError as err:
        return str(err.code().name)
    return "ok"


@pytest.fixture
def mutual(sim: SimCluster, certs: dict[str, Pair]) -> Iterator[str]:
    """A mutual-TLS server: 'dashboard' may read, 'driver.example' may also change state."""
    sim.add_node("n1")
    sim.add_pod("p")
    server = build_server(sim.scheduler, lambda: True, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(certs["server"][0]),
        tls_key=str(certs["server"][1]), client_ca=str(certs["ca"][0]),
        read_only_clients=("dashboard",), mutating_clients=("driver.example",)))
    server.start()
    yield server.address
    server.stop(0).wait(10)


def _calls(stub: Any) -> dict[str, Any]:
    ref = pb.PodRef(key=pb.ObjectKey(namespace="ns", name="p"))
    return {
        "Less": lambda: stub.Less(pb.LessRequest(a=ref, b=ref), timeout=5),
        "Filter": lambda: stub.Filter(pb.FilterRequest(pod=ref), timeout=5),
        "PreFilter": lambda: stub.PreFilter(pb.PreFilterRequest(pod=ref), timeout=5),
        "Schedule": lambda: stub.Schedule(pb.ScheduleRequest(pod=ref), timeout=5),  # on n1
        "Reserve": lambda: stub.Reserve(pb.ReserveRequest(pod=ref, node_name="n1"), timeout=5),
        "Unreserve": lambda: stub.Unreserve(pb.UnreserveRequest(pod=ref, node_name="n1"),
                                            timeout=5),
    }


@pytest.mark.parametrize(("client", "expected"), [
    ("reader", {"Less": "ok", "Filter": "ok", "PreFilter": "PERMISSION_DENIED",
                "Schedule": "PERMISSION_DENIED", "Reserve": "PERMISSION_DENIED",
                "Unreserve": "PERMISSION_DENIED"}),
    ("writer", {"Less": "ok", "Filter": "ok", "PreFilter": "ok", "Schedule": "ok",
                "Reserve": "ok", "Unreserve": "ok"}),
    ("stranger", {"Less": "PERMISSION_DENIED", "Filter": "PERMISSION_DENIED",
                  "PreFilter": "PERMISSION_DENIED", "Schedule": "PERMISSION_DENIED",
                  "Reserve": "PERMISSION_DENIED", "Unreserve": "PERMISSION_DENIED"}),
])
def test_each_rpc_is_authorized_by_the_client_certificate(
        mutual: str, certs: dict[str, Pair], client: str, expected: dict[str, str],
        sim: SimCluster) -> None:
    with _channel(mutual, certs, client) as channel:
        stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
        got = {name: _outcome(call) for name, call in _calls(stub).items()}
        assert got == expected
        # health is for anyone the CA signed (probes), and says nothing about gangs
        health = health_pb2_grpc.HealthStub(channel)
        assert health.Check(health_pb2.HealthCheckRequest(), timeout=5).status in (
            health_pb2.HealthCheckResponse.SERVING, health_pb2.HealthCheckResponse.NOT_SERVING)
    # the writer reserved (Schedule chose n1; Reserve there again is its retry), then
    # unreserved
    assert not sim.scheduler.cache.is_assumed("ns/p")


def test_a_refusal_names_the_caller_and_the_list(mutual: str, certs: dict[str, Pair]) -> None:
    with _channel(mutual, certs, "reader") as channel:
        stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
        with pytest.raises(grpc.RpcError) as err:
            _calls(stub)["Reserve"]()
    assert err.value.details() == ("certificate: CN:dashboard may not call Reserve: not in "
                                   "grpc.mutatingClients")


# -- reservations expire ----------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _ref(name: str) -> pb.PodRef:
    return pb.PodRef(key=pb.ObjectKey(namespace="ns", name=name))


def test_a_reservation_nobody_calls_about_expires_cleanly(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="2")
    sim.add_pod("p", cpu="2")
    sim.scheduler.queue.delete("ns/p")  # the caller's pod, not the loop's
    clock = Clock()
    servicer = SchedulingServicer(sim.scheduler, reservation_timeout=30, clock=clock)
    assert servicer.Reserve(pb.ReserveRequest(pod=_ref("p"), node_name="n1"), None) \
        .status.code == 0
    clock.now += 20
    servicer.Reserve(pb.ReserveRequest(pod=_ref("p"), node_name="n1"), None)  # a retry touches it
    clock.now += 29.9
    assert servicer.expire_reservations() == []
    assert sim.scheduler.cache.assumed_node("ns/p") == "n1"
    clock.now += 0.1
    assert servicer.expire_reservations() == ["ns/p"]
    assert not sim.scheduler.cache.is_assumed("ns/p")  # the room is free again
    info = sim.scheduler.cache.node("n1")
    assert info is not None and info.requested.get("cpu", 0) == 0
    queued = sim.scheduler.queue.get("ns/p")  # back to this scheduler's queue, with the reason
    assert queued is not None
    assert servicer.Unreserve(pb.UnreserveRequest(pod=_ref("p"), node_name="n1"), None) \
        .unreserved is False  # already released: a late caller learns it


def test_a_member_waiting_at_permit_is_left_to_its_gang_timeout(sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_group("g", 2)
    sim.add_pod("a", group="g")
    sim.add_pod("b", group="g")
    clock = Clock()
    servicer = SchedulingServicer(sim.scheduler, reservation_timeout=5, clock=clock)
    servicer.PreFilter(pb.PreFilterRequest(pod=_ref("a")), None)
    servicer.Reserve(pb.ReserveRequest(pod=_ref("a"), node_name="n1"), None)
    assert servicer.Permit(pb.PermitRequest(pod=_ref("a"), node_name="n1"), None) \
        .WhichOneof("result") == "wait"
    clock.now += 3600
    assert servicer.expire_reservations() == []
    assert sim.scheduler.waiting_pods.get("ns/a") is not None
    with sim.scheduler.cache.lock:  # the gang is rejected: now the caller has 5 s to act
        sim.scheduler.reject_all_waiting("test")
    clock.now += 4
    assert servicer.expire_reservations() == []
    clock.now += 1
    assert servicer.expire_reservations() == ["ns/a"]
    assert not sim.scheduler.cache.is_assumed("ns/a")


# -- decision streams are bounded ------------------------------------------------------------
class StreamContext:
    """What WatchDecisions reads of a call: the caller's certificate names."""

    def __init__(self, identity: str) -> None:
        self.identity = identity
        self.callbacks: list[Any] = []

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"x509_common_name": [self.identity.encode()]}

    def add_callback(self, callback: Any) -> None:
        self.callbacks.append(callback)

    def send_initial_metadata(self, metadata: Any) -> None:
        return None


def _open(servicer: SchedulingServicer, identity: str) -> str:
    """Open a stream as ``identity`` (in a thread: an open stream blocks for decisions):
    "open" once it is registered, or why it was refused."""
    stream = servicer.WatchDecisions(pb.WatchDecisionsRequest(), StreamContext(identity))
    before = len(servicer._streams)
    errors: list[RequestError] = []

    def run() -> None:
        try:
            list(stream)
        except RequestError as err:
            errors.append(err)

    threading.Thread(target=run, daemon=True).start()
    deadline = time.monotonic() + 10
    while not errors and len(servicer._streams) == before and time.monotonic() < deadline:
        time.sleep(0.005)
    return str(errors[0]) if errors else "open"


@pytest.mark.parametrize(("opened", "caller", "expected"), [
    # 16 streams in all; 4 kept for callers that may mutate; at most 8 for one caller.
    ([("dash-1", 6), ("dash-2", 6)], "dash-3", "read-only callers hold 12"),
    ([("dash-1", 6), ("dash-2", 6)], "driver", "open"),
    ([("driver", 8)], "driver", "driver holds 8 WatchDecisions streams"),
    ([("dash-1", 8), ("driver", 8)], "driver", "16 WatchDecisions streams are open"),
    ([("dash-1", 7)], "dash-1", "open"),
])
def test_decision_streams_are_shared_fairly(sim: SimCluster, opened: list[tuple[str, int]],
                                            caller: str, expected: str) -> None:
    authorizer = Authorizer.of(["dash-1", "dash-2", "dash-3"], ["driver"], enforced=True)
    servicer = SchedulingServicer(sim.scheduler, 16, authorizer=authorizer)
    try:
        for identity, count in opened:
            for _ in range(count):
                assert _open(servicer, identity) == "open"
        assert expected in _open(servicer, caller)
    finally:
        servicer.close()


def test_a_reader_that_falls_behind_is_cut_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(waiting, "MAX_UNREAD", 3)
    pods = waiting.WaitingPods(lambda w: None)
    try:
        slow, fast = pods.subscribe(), pods.subscribe()
        for index in range(5):
            pod = parse_pod({"metadata": {"namespace": "ns", "name": f"p{index}", "uid": "u"}})
            pods.add(pod, "n1", 60.0, {"Coscheduling"})
            pods.allow(pod.key, "Coscheduling")
            while not fast.empty():
                fast.get()
        received = []
        while (decision := slow.get()) is not None:
            received.append(decision.pod_key)
        assert received == ["ns/p0", "ns/p1", "ns/p2"]  # then None: cut off, not grown
        assert pods.unsubscribe(slow) is True
        assert pods.unsubscribe(fast) is False
    finally:
        pods.stop()
