"""The plugin server as a server: health, reflection, port reuse, graceful shutdown, TLS and
mutual TLS, and the `serve` / `call` commands, on the real control plane (issue 4)."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)

from coscheduling.cli import main
from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.certs import _self_or_ca_signed
from coscheduling.server import GrpcSettings, build_server
from coscheduling.server.gen import scheduling_pb2 as pb
from tests.integration.kube import create_podgroup, pod_body, wait_until
from tests.integration.test_grpc import (
    Served,
    StartScheduler,
    node_name,
    pod,
    serve,
    serving,
    stub_for,
    wait_cached,
)

SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING
SERVICE = "coscheduling.v1.Scheduling"


@pytest.fixture
def served(start_scheduler: StartScheduler, namespace: str) -> Iterator[Served]:
    yield from serving(start_scheduler, namespace)


def test_health_reflection_port_reuse_and_graceful_shutdown(
        start_scheduler: StartScheduler, namespace: str) -> None:
    sched = start_scheduler(start=False)
    s = serve(sched, namespace, reflection=True)
    try:
        # Not synced yet (the watches have not even started): NOT_SERVING, for the server
        # and for the service by name.
        health = health_pb2_grpc.HealthStub(s.channel)
        for service in ("", SERVICE):
            assert health.Check(health_pb2.HealthCheckRequest(service=service),
                                timeout=5).status == NOT_SERVING
        sched.start(loops=False)
        wait_until(lambda: s.health() == SERVING, timeout=10, what="SERVING once synced")
        assert health.Check(health_pb2.HealthCheckRequest(service=SERVICE),
                            timeout=5).status == SERVING

        # Reflection, since it was asked for.
        services = set(ProtoReflectionDescriptorDatabase(s.channel).get_services())
        assert {SERVICE, "grpc.health.v1.Health"} <= services

        # Port reuse is off: a second server cannot take the same port...
        with pytest.raises(RuntimeError, match="cannot listen on"):
            build_server(s.scheduler, lambda: True, GrpcSettings(address=s.server.address))
        # ...and the first one is unharmed.
        assert s.health() == SERVING

        # Without the flag, no reflection.
        plain = serve(sched, namespace)
        try:
            with pytest.raises(grpc.RpcError) as err:
                ProtoReflectionDescriptorDatabase(plain.channel).get_services()
            assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        finally:
            plain.channel.close()
            plain.server.stop(0).wait(10)

        # Graceful shutdown: NOT_SERVING at once, and the call in flight still finishes.
        watch = health.Watch(health_pb2.HealthCheckRequest())
        assert next(watch).status == SERVING
        answers: list[Any] = []
        with s.scheduler.cache.lock:  # the call below blocks on it, in flight
            caller = threading.Thread(target=lambda: answers.append(_try_less(s)))
            caller.start()
            time.sleep(0.3)
            stopped = s.server.stop(5)
            assert next(watch).status == NOT_SERVING
            watch.cancel()
            time.sleep(0.3)
            assert not stopped.is_set()
        caller.join(10)
        assert answers == ["ok"]
        assert stopped.wait(10)
        with pytest.raises(grpc.RpcError) as err:
            s.health()
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        s.channel.close()
        s.server.stop(0).wait(10)


def _try_less(s: Served) -> str:
    """A call whose answer needs the cache lock: 'ok', or the code it failed with."""
    json_pod = pb.PodRef(pod_json=json.dumps({"metadata": {"namespace": "a", "name": "b"}})
                         .encode())
    try:
        s.stub.Less(pb.LessRequest(a=json_pod, b=json_pod), timeout=10)
    except grpc.RpcError as err:
        return str(err.code())
    return "ok"


# -- TLS ----------------------------------------------------------------------------------
CA_EXT = ["basicConstraints = critical,CA:TRUE", "keyUsage = critical,keyCertSign,cRLSign"]


def _leaf(usage: str, sans: str = "") -> list[str]:
    ext = ["basicConstraints = critical,CA:FALSE",
           "keyUsage = critical,digitalSignature,keyEncipherment",
           f"extendedKeyUsage = {usage}"]
    return ext + ([f"subjectAltName = {sans}"] if sans else [])


def _certs(directory: Path) -> dict[str, tuple[Path, Path]]:
    """Two CAs (the server's, the clients'), a rogue CA, and leaves signed by each."""
    made: dict[str, tuple[Path, Path]] = {}

    def make(name: str, ext: list[str], ca: str = "") -> None:
        made[name] = (directory / f"{name}.crt", directory / f"{name}.key")
        _self_or_ca_signed(*made[name], name, ext, made[ca] if ca else None)

    for ca in ("server-ca", "client-ca", "rogue-ca"):
        make(ca, CA_EXT)
    make("server", _leaf("serverAuth", "IP:127.0.0.1,DNS:localhost"), "server-ca")
    make("client", _leaf("clientAuth"), "client-ca")
    make("rogue-client", _leaf("clientAuth"), "rogue-ca")
    return made


def _secure_call(address: str, ca: Path, client: tuple[Path, Path] | None = None) -> str:
    """Less over TLS: 'ok', or the status code the client got."""
    credentials = grpc.ssl_channel_credentials(
        root_certificates=ca.read_bytes(),
        private_key=client[1].read_bytes() if client else None,
        certificate_chain=client[0].read_bytes() if client else None)
    with grpc.secure_channel(address, credentials) as channel:
        stub = stub_for(channel)
        ref = pb.PodRef(pod_json=b'{"metadata": {"namespace": "a", "name": "b"}}')
        try:
            stub.Less(pb.LessRequest(a=ref, b=ref), timeout=5)
        except grpc.RpcError as err:
            return str(err.code().name)
    return "ok"


def test_tls_and_mutual_tls_refuse_clients_without_the_right_certificate(
        served: Served, tmp_path: Path) -> None:
    certs = _certs(tmp_path)
    server_cert, server_key = certs["server"]

    tls = build_server(served.scheduler, lambda: True, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(server_cert), tls_key=str(server_key)))
    tls.start()
    try:
        assert _secure_call(tls.address, certs["server-ca"][0]) == "ok"
        # A client that does not trust the server's CA refuses it.
        assert _secure_call(tls.address, certs["rogue-ca"][0]) == "UNAVAILABLE"
        # Nor does the server speak plaintext.
        with grpc.insecure_channel(tls.address) as channel:
            with pytest.raises(grpc.RpcError) as err:
                health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(),
                                                          timeout=5)
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE
    finally:
        tls.stop(0).wait(10)

    mutual = build_server(served.scheduler, lambda: True, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(server_cert), tls_key=str(server_key),
        client_ca=str(certs["client-ca"][0]), read_only_clients=("client",)))
    mutual.start()
    try:
        server_ca = certs["server-ca"][0]
        assert _secure_call(mutual.address, server_ca) == "UNAVAILABLE"  # no client cert
        assert _secure_call(mutual.address, server_ca, certs["rogue-client"]) == "UNAVAILABLE"
        assert _secure_call(mutual.address, server_ca, certs["client"]) == "ok"
    finally:
        mutual.stop(0).wait(10)

    with pytest.raises(ValueError, match="both a certificate and its key"):
        build_server(served.scheduler, lambda: True, GrpcSettings(tls_cert=str(server_cert)))
    with pytest.raises(ValueError, match="needs the server's own certificate"):
        build_server(served.scheduler, lambda: True,
                     GrpcSettings(client_ca=str(certs["client-ca"][0])))


# -- the commands -------------------------------------------------------------------------
def _call(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, Any, str]:
    code = main(["call", *args])
    out, err = capsys.readouterr()
    return code, json.loads(out) if out.strip() and code == 0 else out, err


def test_call_prints_each_answer_as_json(kube: KubeClient, make_node: Any, served: Served,
                                         capsys: pytest.CaptureFixture[str],
                                         tmp_path: Path) -> None:
    s, ns = served, served.namespace
    node = node_name("grpc-call")
    make_node(node, cpu="2")
    create_podgroup(kube, ns, "pair", 2)
    body = pod(kube, s, "p-0", group="pair")
    pod(kube, s, "p-1", group="pair")
    wait_cached(s, pods=["p-0", "p-1"], nodes=[node], groups=["pair"])
    address = ["--address", s.server.address]
    pod_file = tmp_path / "pod.json"
    pod_file.write_text(json.dumps(body))

    code, answer, _ = _call(capsys, "health", *address)
    assert (code, answer) == (0, {"status": "SERVING"})
    code, answer, _ = _call(capsys, "less", *address, "--pod", f"{ns}/p-0", "--pod-file",
                            str(pod_file))
    assert (code, answer) == (0, {"less": False})  # a pod is not before itself
    code, answer, _ = _call(capsys, "filter", *address, "--pod", f"{ns}/p-0", "--nodes", node)
    assert code == 0 and answer["nodes"] == [
        {"node_name": node, "status": {"code": "CODE_SUCCESS", "reasons": [], "plugin": ""}}]
    code, answer, _ = _call(capsys, "Score", *address, "--pod-file", str(pod_file),
                            "--nodes", node)
    assert code == 0 and [sc["node_name"] for sc in answer["scores"]] == [node]
    code, answer, _ = _call(capsys, "prefilter", *address, "--pod", f"{ns}/p-0")
    assert code == 0 and answer["status"]["code"] == "CODE_SUCCESS"

    watcher = subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "call", "watch", *address, "--group",
         f"{ns}/pair", "--count", "1", "--timeout", "30"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert watcher.stderr is not None
        assert "watching decisions" in watcher.stderr.readline()  # subscribed
        for name in ("p-0", "p-1"):
            code, answer, _ = _call(capsys, "reserve", *address, "--pod", f"{ns}/{name}",
                                    "--node", node)
            assert code == 0 and answer["status"]["code"] == "CODE_SUCCESS"
            code, answer, _ = _call(capsys, "permit", *address, "--pod", f"{ns}/{name}",
                                    "--node", node)
            assert code == 0 and ("wait" if name == "p-0" else "allow") in answer, answer
        out, err = watcher.communicate(timeout=30)
    finally:
        watcher.kill()
    assert watcher.returncode == 0, err
    decision = json.loads(out.splitlines()[0])
    assert decision["pod"] == {"namespace": ns, "name": "p-0"} and decision["allowed"] is True

    code, answer, _ = _call(capsys, "podgroup", *address, "--group", f"{ns}/pair")
    assert code == 0 and answer["placed"] == 2 and answer["min_member"] == 2
    assert [m["state"] for m in answer["members"]] == ["MEMBER_STATE_ASSUMED"] * 2
    for name in ("p-0", "p-1"):
        code, answer, _ = _call(capsys, "unreserve", *address, "--pod", f"{ns}/{name}",
                                "--node", node)
        assert (code, answer) == (0, {"unreserved": True})
    code, answer, _ = _call(capsys, "postbind", *address, "--pod", f"{ns}/p-0", "--node", node)
    assert (code, answer) == (0, {})

    code, _, err = _call(capsys, "podgroup", *address, "--group", f"{ns}/nope")
    assert code == 1 and f"NOT_FOUND: group: PodGroup {ns}/nope not found" in err
    code, _, err = _call(capsys, "reserve", *address, "--pod", f"{ns}/p-0")
    assert code == 2 and "Reserve needs --node" in err


def test_serve_command_serves_until_terminated(local_cluster: LocalCluster, crd: None,
                                               tmp_path: Path) -> None:
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": "grpc-serve-test",
        "metricsBindAddress": "127.0.0.1:0",
        "clientConnection": {"kubeconfig": str(local_cluster.kubeconfig)}}))
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "coscheduling", "serve", "--config",
                             str(config), "--address", "127.0.0.1:0", "--grace", "2"],
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stderr is not None
        address = ""
        deadline = time.monotonic() + 30
        lines = []
        while not address and time.monotonic() < deadline:
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            found = re.search(r"serving gRPC on (\S+) for schedulerName=grpc-serve-test", line)
            address = found.group(1) if found else ""
        assert address, "".join(lines)
        with grpc.insecure_channel(address) as channel:
            health = health_pb2_grpc.HealthStub(channel)
            wait_until(lambda: health.Check(health_pb2.HealthCheckRequest(), timeout=5)
                       .status == SERVING, timeout=5, what="the served caches to sync")
            stub = stub_for(channel)
            body = pod_body("x", scheduler="grpc-serve-test")
            body["metadata"]["namespace"] = "default"
            answer = stub.Filter(pb.FilterRequest(pod=pb.PodRef(pod_json=json.dumps(body)
                                                                .encode())), timeout=5)
            assert all(n.node_name for n in answer.nodes)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        proc.kill()
        proc.wait(5)
