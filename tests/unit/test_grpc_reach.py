"""What a gRPC caller can reach: no node over-committed by Reserve or Schedule, typed
identities (an email SAN never authorizes), namespaces per identity, a reservation only its
own caller may undo, read-only calls that leave the label index as it was, and a what-if
that is refused early, parsed safely, rate-limited and shares the cache lock."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest
import yaml

from coscheduling.api.pods import parse_pod
from coscheduling.server import GrpcSettings, build_server
from coscheduling.server.auth import Authorizer
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.gen import scheduling_pb2_grpc as pb_grpc
from coscheduling.server.servicer import SchedulingServicer
from coscheduling.server.whatif import answer_pb
from coscheduling.whatif import derive as derive_module
from coscheduling.whatif.derive import MAX_DEPTH, MAX_PODS, derive
from coscheduling.whatif.simulate import Answer, simulate
from tests.simulation import SimCluster
from tests.unit.test_grpc_security import CA_EXT, Pair, _leaf, make_certs

UNSCHEDULABLE = pb.Code.Value("CODE_UNSCHEDULABLE")


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    """A CA, the server, and clients: two drivers (DNS SAN, common name), one limited to
    namespace a, and one whose only match is an email SAN."""
    return make_certs(tmp_path_factory.mktemp("reach"), [
        ("ca", "test-ca", CA_EXT, ""),
        ("server", "coscheduling", _leaf("serverAuth", "IP:127.0.0.1"), "ca"),
        ("driver", "ignored-cn", _leaf("clientAuth", "DNS:driver.example"), "ca"),
        ("other", "other-driver", _leaf("clientAuth"), "ca"),
        ("team-a", "cn-a", _leaf("clientAuth", "URI:spiffe://example/team-a"), "ca"),
        ("emailer", "someone", _leaf("clientAuth", "email:driver.example"), "ca"),
        # An email SAN equal to a name configured untyped.
        ("emailer-untyped", "someone", _leaf("clientAuth", "email:other-driver"), "ca"),
    ])


@pytest.fixture
def mutual(sim: SimCluster, certs: dict[str, Pair]) -> Iterator[str]:
    """Mutual TLS: driver.example (a DNS SAN) and other-driver (a common name, untyped as
    older configurations write it) act anywhere; spiffe://example/team-a only in a."""
    sim.add_node("n1", cpu="4")
    for namespace in ("a", "b"):
        sim.add_pod("p", cpu="1", namespace=namespace)
        sim.scheduler.queue.delete(f"{namespace}/p")  # the callers' pods, not the loop's
    server = build_server(sim.scheduler, lambda: True, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(certs["server"][0]),
        tls_key=str(certs["server"][1]), client_ca=str(certs["ca"][0]),
        mutating_clients=("DNS:driver.example", "other-driver",
                          "URI:spiffe://example/team-a"),
        client_namespaces={"URI:spiffe://example/team-a": ("a",)}))
    server.start()
    yield server.address
    server.stop(0).wait(10)


def _stub(address: str, certs: dict[str, Pair], client: str) -> Any:
    credentials = grpc.ssl_channel_credentials(
        root_certificates=certs["ca"][0].read_bytes(),
        private_key=certs[client][1].read_bytes(),
        certificate_chain=certs[client][0].read_bytes())
    return pb_grpc.SchedulingStub(  # type: ignore[no-untyped-call]
        grpc.secure_channel(address, credentials))


def _ref(namespace: str, name: str = "p") -> pb.PodRef:
    return pb.PodRef(key=pb.ObjectKey(namespace=namespace, name=name))


def _refusal(call: Any) -> tuple[str, str]:
    with pytest.raises(grpc.RpcError) as err:
        call()
    return err.value.code().name, err.value.details()


# -- no over-commit ---------------------------------------------------------------------------
def test_reserve_on_a_full_node_is_refused_with_filters_reason(sim: SimCluster) -> None:
    sim.add_node("n1", cpu="4")
    sim.add_pod("bound", cpu="4")
    sim.run()
    assert sim.bound == {"ns/bound": "n1"}
    sim.add_pod("p", cpu="4")
    sim.scheduler.queue.delete("ns/p")
    servicer = SchedulingServicer(sim.scheduler)
    answer = servicer.Reserve(pb.ReserveRequest(pod=_ref("ns"), node_name="n1"), None)
    assert (answer.status.code, list(answer.status.reasons), answer.status.plugin) == (
        UNSCHEDULABLE, ["Insufficient cpu"], "NodeResourcesFit")
    info = sim.scheduler.cache.node("n1")
    assert info is not None and info.requested["cpu"] == 4000  # the bound pod's, no more
    assert not sim.scheduler.cache.is_assumed("ns/p")
    scheduled = servicer.Schedule(pb.ScheduleRequest(pod=_ref("ns")), None)
    assert scheduled.WhichOneof("result") == "unschedulable" and not scheduled.node_name
    assert "Insufficient cpu" in scheduled.status.reasons[0]
    assert info.requested["cpu"] == 4000 and not sim.scheduler.cache.is_assumed("ns/p")


# -- typed identities and their reach ------------------------------------------------------
@pytest.mark.parametrize("holder", ["emailer", "emailer-untyped"])
def test_an_email_san_never_authorizes(mutual: str, certs: dict[str, Pair],
                                       holder: str) -> None:
    stub = _stub(mutual, certs, holder)
    code, details = _refusal(lambda: stub.Reserve(
        pb.ReserveRequest(pod=_ref("a"), node_name="n1"), timeout=5))
    assert code == "PERMISSION_DENIED"
    assert details == ("certificate: CN:someone may not call Reserve: not in "
                       "grpc.mutatingClients")
    code, _ = _refusal(lambda: stub.Filter(pb.FilterRequest(pod=_ref("a")), timeout=5))
    assert code == "PERMISSION_DENIED"


def test_an_identity_limited_to_a_namespace_is_refused_elsewhere(
        mutual: str, certs: dict[str, Pair], sim: SimCluster) -> None:
    stub = _stub(mutual, certs, "team-a")
    assert stub.Filter(pb.FilterRequest(pod=_ref("a")), timeout=5).nodes
    for call in (lambda: stub.Reserve(pb.ReserveRequest(pod=_ref("b"), node_name="n1"),
                                      timeout=5),
                 lambda: stub.Filter(pb.FilterRequest(pod=_ref("b")), timeout=5),
                 lambda: stub.GetPodGroup(pb.GetPodGroupRequest(
                     group=pb.ObjectKey(namespace="b", name="g")), timeout=5)):
        code, details = _refusal(call)
        assert code == "PERMISSION_DENIED"
        assert "may not act in namespace 'b'" in details, details
        assert "URI:spiffe://example/team-a" in details
    code, details = _refusal(lambda: stub.Simulate(pb.SimulateRequest(
        manifest=_job(1), namespace="b"), timeout=30))
    assert (code, "may not act in namespace 'b'" in details) == ("PERMISSION_DENIED", True)
    assert stub.Simulate(pb.SimulateRequest(manifest=_job(1), namespace="a"), timeout=30) \
        .verdict == pb.Verdict.Value("FITS_NOW")
    assert not sim.scheduler.cache.is_assumed("b/p")
    answer = stub.Reserve(pb.ReserveRequest(pod=_ref("a"), node_name="n1"), timeout=5)
    assert answer.status.code == 0 and sim.scheduler.cache.is_assumed("a/p")
    # the other drivers were given no namespaces: they act in every one
    assert _stub(mutual, certs, "other").Filter(pb.FilterRequest(pod=_ref("b")),
                                                timeout=5).nodes


def test_only_the_caller_that_reserved_may_undo_it(
        mutual: str, certs: dict[str, Pair], sim: SimCluster) -> None:
    driver, other = _stub(mutual, certs, "driver"), _stub(mutual, certs, "other")
    assert driver.Reserve(pb.ReserveRequest(pod=_ref("b"), node_name="n1"),
                          timeout=5).status.code == 0
    for call in (lambda: other.Unreserve(pb.UnreserveRequest(pod=_ref("b"), node_name="n1"),
                                         timeout=5),
                 lambda: other.Permit(pb.PermitRequest(pod=_ref("b"), node_name="n1"),
                                      timeout=5),
                 lambda: other.Reserve(pb.ReserveRequest(pod=_ref("b"), node_name="n1"),
                                       timeout=5)):
        code, details = _refusal(call)
        assert code == "PERMISSION_DENIED"
        assert details.startswith("pod: pod b/p was reserved by CN:ignored-cn,"
                                  "DNS:driver.example: CN:other-driver may not call"), details
    assert sim.scheduler.cache.assumed_node("b/p") == "n1"
    assert driver.Unreserve(pb.UnreserveRequest(pod=_ref("b"), node_name="n1"),
                            timeout=5).unreserved
    assert not sim.scheduler.cache.is_assumed("b/p")


@pytest.mark.parametrize(("identity", "message"), [
    ("email:driver@example.com", "'email' names never authorize a client"),
    ("IP:10.0.0.1", "'IP' names never authorize a client"),
    ("spiffe://example/x", "write DNS:<name>, URI:<uri> or CN:<name>"),
    ("DNS:", "'DNS' names never authorize"),
])
def test_identities_of_other_types_are_refused_in_the_configuration(
        identity: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        GrpcSettings(tls_cert="s", tls_key="k", client_ca="c",
                     mutating_clients=(identity,)).validate()
    assert message in str(err.value)


# -- read-only calls leave the label index as it was -----------------------------------------
def _invented(index: int) -> bytes:
    """A pod nobody created, whose anti-affinity asks for a label key of its own."""
    term = {"labelSelector": {"matchLabels": {f"invented-{index}": "x"}},
            "topologyKey": "kubernetes.io/hostname"}
    return json.dumps({"metadata": {"namespace": "ns", "name": f"invented-{index}"},
                       "spec": {"affinity": {"podAntiAffinity": {
                           "requiredDuringSchedulingIgnoredDuringExecution": [term]}},
                           "containers": [{"name": "c"}]}}).encode()


def test_a_thousand_filter_calls_with_invented_pods_leave_the_label_index_as_it_was(
        sim: SimCluster) -> None:
    sim.add_node("n1")
    sim.add_node("n2")
    sim.add_pod("web", labels={"app": "web"})
    sim.run()
    cache = sim.scheduler.cache
    before = cache.label_keys()
    server = build_server(sim.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"))
    server.start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
            for i in range(1000):
                call = stub.Filter if i % 2 else stub.Score
                request = (pb.FilterRequest if i % 2 else pb.ScoreRequest)(
                    pod=pb.PodRef(pod_json=_invented(i)))
                call(request, timeout=5)
    finally:
        server.stop(0).wait(10)
    assert cache.label_keys() == before
    # a key the loop asked for stays: a real pod's selector is indexed for good
    sim.add_pod("spread", spec={"affinity": {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "web"}},
             "topologyKey": "kubernetes.io/hostname"}]}}})
    sim.run()
    assert cache.label_keys() == before | {"app"}


# -- what-if: refused early, parsed safely, rate-limited, sharing the lock -----------------
def _statefulset(replicas: int) -> bytes:
    return yaml.safe_dump({"apiVersion": "apps/v1", "kind": "StatefulSet",
                           "metadata": {"name": "huge"},
                           "spec": {"replicas": replicas, "template": {"spec": {
                               "containers": [{"name": "c", "image": "x"}]}}}}).encode()


def _job(pods: int, cpu: str = "1") -> bytes:
    return yaml.safe_dump({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                           "spec": {"parallelism": pods, "template": {"spec": {"containers": [
                               {"name": "c", "image": "x",
                                "resources": {"requests": {"cpu": cpu}}}]}}}}).encode()


@pytest.fixture
def plain(sim: SimCluster) -> Iterator[Any]:
    sim.add_node("n1")
    server = build_server(sim.scheduler, lambda: True, GrpcSettings(
        address="127.0.0.1:0", simulates_per_minute=60))
    server.start()
    with grpc.insecure_channel(server.address) as channel:
        yield pb_grpc.SchedulingStub(channel)  # type: ignore[no-untyped-call]
    server.stop(0).wait(10)


def test_a_200000_replica_manifest_is_refused_at_once(plain: Any) -> None:
    started = time.perf_counter()
    code, details = _refusal(lambda: plain.Simulate(
        pb.SimulateRequest(manifest=_statefulset(200_000), namespace="ns"), timeout=30))
    took = time.perf_counter() - started
    print(f"200,000-replica StatefulSet refused in {took * 1000:.1f} ms")
    assert code == "INVALID_ARGUMENT"
    assert details == f"manifest: spec.replicas: 200000 pods, more than the {MAX_PODS} " \
                      "a what-if places"
    assert took < 0.1


def _nested(depth: int) -> bytes:
    return ("apiVersion: v1\nkind: Pod\nmetadata: {name: deep}\nspec:\n  x: "
            + "[" * depth + "]" * depth + "\n").encode()


@pytest.mark.parametrize(("manifest", "message"), [
    (_nested(MAX_DEPTH), f"nested more than {MAX_DEPTH} levels deep"),
    (_nested(5000), "not YAML or JSON: while increasing flow level"),
    (b"a: &a [1,2,3,4,5,6,7,8,9]\nb: &b [" + b",".join([b"*a"] * 100) + b"]\nc: &c ["
     + b",".join([b"*b"] * 100) + b"]\nd: [" + b",".join([b"*c"] * 100) + b"]\n",
     "more than 1000000 values once its aliases are expanded"),
    (b"- 1\n- [", "not YAML or JSON"),
    (b"\xff\xfe\x00", "not YAML or JSON"),
    (b"kind: Job\napiVersion: batch/v1\nmetadata: {name: j}\nspec: {template: {metadata: [1],"
     b" spec: {containers: [{name: c}]}}}", "manifest: malformed"),
    (b"kind: Pod\nmetadata: {name: p, labels: [1]}\nspec: {containers: [{name: c}]}",
     "manifest: malformed"),
    (b"kind: Pod\nmetadata: {name: p}\nspec: {containers: [{name: c, resources: "
     b"{requests: {cpu: [1]}}}]}", ""),
    (b"kind: [Pod]\nmetadata: {name: p}", ""),
    (b"kind: RayCluster\napiVersion: ray.io/v1\nmetadata: {name: r}\nspec: {headGroupSpec: "
     b"{template: {spec: {containers: [{name: c}]}}}, workerGroupSpecs: 3}",
     "spec.workerGroupSpecs: must be a list"),
])
def test_every_malformed_manifest_is_invalid_argument(plain: Any, manifest: bytes,
                                                      message: str) -> None:
    code, details = _refusal(lambda: plain.Simulate(
        pb.SimulateRequest(manifest=manifest, namespace="ns"), timeout=30))
    assert code == "INVALID_ARGUMENT", details
    assert message in details and "Traceback" not in details


def test_simulate_has_a_rate_per_caller(sim: SimCluster) -> None:
    sim.add_node("n1")
    servicer = SchedulingServicer(sim.scheduler, simulates_per_minute=12)  # bursts of 2
    request = pb.SimulateRequest(manifest=_job(1), namespace="ns")
    assert servicer.Simulate(request, None).verdict == pb.Verdict.Value("FITS_NOW")
    assert servicer.Simulate(request, None).verdict == pb.Verdict.Value("FITS_NOW")
    with pytest.raises(Exception) as err:
        servicer.Simulate(request, None)
    assert getattr(err.value, "code", None) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "more often than 12 times a minute (grpc.simulatesPerMinute)" in str(err.value)


class TimedLock:
    """The cache's lock, measuring how long each outermost hold lasts (same lock inside,
    so whoever took the lock before it was wrapped still excludes the holders)."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._local = threading.local()
        self.holds: list[float] = []

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        taken = bool(self._inner.acquire(blocking, timeout))
        if taken:
            depth = getattr(self._local, "depth", 0)
            if depth == 0:
                self._local.since = time.perf_counter()
            self._local.depth = depth + 1
        return taken

    def release(self) -> None:
        self._local.depth -= 1
        if self._local.depth == 0:
            self.holds.append(time.perf_counter() - self._local.since)
        self._inner.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


@pytest.mark.parametrize(("nodes", "cpu", "verdict"), [
    (20, "64", "NEVER"), (500, "2", "NEVER"), (500, "8", "FITS_NOW")])
def test_the_longest_cache_lock_hold_of_a_2000_pod_simulate(
        sim: SimCluster, nodes: int, cpu: str, verdict: str) -> None:
    """Measured, and printed: the cache lock is taken once, to take the what-if's view
    (every step then runs on the view), and the live cache holds nothing of it after."""
    for index in range(nodes):  # 1280, 1000 or 4000 cpu for 2000 pods of 1
        sim.add_node(f"n{index}", cpu=cpu, memory="256Gi", pods=300)
    lock = TimedLock(sim.scheduler.cache.lock)
    sim.scheduler.cache.lock = lock  # type: ignore[assignment]
    started = time.perf_counter()
    answer = simulate(sim.scheduler, derive(_job(2000), "ns"))
    took = time.perf_counter() - started
    longest = max(lock.holds)
    print(f"2,000-pod Simulate on {nodes} nodes ({answer.verdict}): {took:.2f} s in all, "
          f"{len(lock.holds)} lock hold(s), the longest {longest * 1000:.2f} ms")
    assert answer.verdict == verdict and answer.pods == 2000
    assert len(lock.holds) == 1  # the view; nothing of the what-if runs under the lock
    assert not sim.scheduler.cache.group_pods("ns/j-whatif~whatif")
    assert not any(info.claims for info in sim.scheduler.cache.nodes())


def test_a_manifest_is_read_with_libyaml_when_present() -> None:
    assert derive_module._LOADER is getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    assert yaml.__with_libyaml__  # the pinned wheels carry it
    assert derive(_job(3)).source == "Job default/j (3 pods at once)"


@pytest.mark.parametrize(("mutating", "namespaces", "uri", "reach"), [
    (["*"], {}, "spiffe://x/a", None),
    (["*"], {"*": ["a"]}, "spiffe://x/a", {"a"}),
    (["*", "URI:spiffe://x/a"], {"*": ["a"]}, "spiffe://x/a", None),  # named: everywhere
    (["URI:spiffe://x/a", "URI:spiffe://x/b"], {"URI:spiffe://x/a": ["a"]}, "spiffe://x/b",
     None),
])
def test_a_callers_reach_is_what_its_granting_entries_give(
        mutating: list[str], namespaces: dict[str, list[str]], uri: str,
        reach: set[str] | None) -> None:
    authorizer = Authorizer.of([], mutating, enforced=True, namespaces=namespaces)
    caller = authorizer.caller("Reserve", _Context(uri))
    assert caller.namespaces == (None if reach is None else frozenset(reach))


class _Context:
    """What WatchDecisions reads of a call: the caller's certificate names."""

    def __init__(self, uri: str) -> None:
        self._uri = uri

    def auth_context(self) -> dict[str, list[bytes]]:
        return {"peer_uri": [self._uri.encode()]}

    def add_callback(self, callback: Any) -> None:
        return None

    def send_initial_metadata(self, metadata: Any) -> None:
        return None


def test_a_decision_stream_carries_only_the_callers_namespaces(sim: SimCluster) -> None:
    authorizer = Authorizer.of([], ["URI:spiffe://x/a"], enforced=True,
                               namespaces={"URI:spiffe://x/a": ["a"]})
    servicer = SchedulingServicer(sim.scheduler, authorizer=authorizer)
    stream = servicer.WatchDecisions(pb.WatchDecisionsRequest(), _Context("spiffe://x/a"))
    seen: list[str] = []
    reader = threading.Thread(target=lambda: seen.extend(
        f"{d.pod.namespace}/{d.pod.name}" for d in stream), daemon=True)
    reader.start()
    deadline = time.monotonic() + 10
    while not servicer._streams and time.monotonic() < deadline:
        time.sleep(0.005)
    waiting = sim.scheduler.waiting_pods
    for namespace in ("b", "a"):
        pod = parse_pod({"metadata": {"namespace": namespace, "name": "p", "uid": namespace}})
        waiting.add(pod, "n1", 60.0, {"Coscheduling"})
        waiting.allow(pod.key, "Coscheduling")
    while not seen and time.monotonic() < deadline:
        time.sleep(0.005)
    servicer.close()
    reader.join(5)
    assert seen == ["a/p"]
    with pytest.raises(Exception) as err:
        next(servicer.WatchDecisions(pb.WatchDecisionsRequest(
            group=pb.ObjectKey(namespace="b", name="g")), _Context("spiffe://x/a")))
    assert "may not act in namespace 'b'" in str(err.value)


def test_victims_outside_the_callers_reach_are_counted_not_named() -> None:
    """A caller limited to some namespaces asks a what-if that would preempt elsewhere: it
    learns that victims exist there, not which pods they are."""
    answer = Answer("FITS_AFTER_PREEMPTION", "Job a/j", "a/j", 2, 2,
                    victims=["a/low-0", "b/secret-0", "b/secret-1"])
    limited = answer_pb(answer, lambda namespace: namespace == "a")
    assert [(v.namespace, v.name) for v in limited.victims] == [("a", "low-0")]
    assert "2 more victim(s) in namespaces outside this caller's reach" in limited.notes
    assert len(answer_pb(answer).victims) == 3
