"""Only the watched pod and only the leader (issue 27): over mutual TLS, a pod a caller
invents changes nothing; negative amounts are refused naming the field; a standby replica
answers NOT_SERVING and refuses what would change state; after a leader change the API
server's policy refuses the deposed leader's evictions and status writes."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.server import GrpcSettings, build_server
from coscheduling.server.gen import scheduling_pb2 as pb
from tests.integration.kube import (
    PG_API,
    create_pod,
    create_podgroup,
    events_for,
    list_pods,
    pod_body,
    wait_until,
)
from tests.integration.test_fencing import (
    VAP_API,
    WRITES_POLICY,
    apply_policy,
    token_for,
    writes_policy,
)
from tests.integration.test_grpc import stub_for
from tests.integration.test_grpc_server import _certs


def _channel(address: str, certs: dict[str, tuple[Path, Path]]) -> grpc.Channel:
    client = certs["client"]
    return grpc.secure_channel(address, grpc.ssl_channel_credentials(
        root_certificates=certs["server-ca"][0].read_bytes(),
        private_key=client[1].read_bytes(), certificate_chain=client[0].read_bytes()))


def _pod_json(namespace: str, name: str, *, cpu: str, group: str = "",
              priority: int = 0) -> pb.PodRef:
    body = pod_body(name, scheduler="batch-scheduler", cpu=cpu, group=group)
    body["metadata"]["namespace"] = namespace
    body["spec"]["priority"] = priority
    return pb.PodRef(pod_json=json.dumps(body).encode())


def _code(call: Any) -> tuple[str, str]:
    try:
        call()
    except grpc.RpcError as err:
        return err.code().name, str(err.details())
    return "OK", ""


@pytest.fixture
def mutual(tmp_path: Path) -> dict[str, tuple[Path, Path]]:
    return _certs(tmp_path)


def test_a_pod_the_caller_invents_evicts_and_nominates_nothing(
        kube: KubeClient, namespace: str, make_namespace: Any, make_node: Any,
        start_scheduler: Any, mutual: dict[str, tuple[Path, Path]]) -> None:
    """A made-up high-priority gang member through PreFilter, with the mutating client's
    certificate: refused, naming the field; the real pod it would have evicted still runs."""
    sched = start_scheduler()
    node = f"forge-{uuid.uuid4().hex[:6]}"
    make_node(node, cpu="4")
    victim = create_pod(kube, namespace, pod_body("victim", scheduler=sched.name, cpu="4",
                                                  node_name=node))
    other = make_namespace()
    create_podgroup(kube, other, "g", 1)
    wait_until(lambda: sched.service.scheduler.listers.podgroup(f"{other}/g") is not None,
               what="the group in the watch cache")
    server = build_server(sched.service.scheduler, lambda: sched.service.synced, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(mutual["server"][0]),
        tls_key=str(mutual["server"][1]), client_ca=str(mutual["client-ca"][0]),
        mutating_clients=("client",)))
    server.start()
    try:
        with _channel(server.address, mutual) as channel:
            stub = stub_for(channel)
            ghost = _pod_json(other, "ghost", cpu="4", group="g", priority=2_000_000_000)
            code, details = _code(lambda: stub.PreFilter(pb.PreFilterRequest(pod=ghost),
                                                         timeout=10))
    finally:
        server.stop(0).wait(10)
    assert code == "NOT_FOUND" and details.startswith("pod.pod_json:"), (code, details)
    assert "not in the server's watch cache" in details
    time.sleep(10)  # what an eviction would take: nothing may have happened meanwhile
    pod = kube.get(f"/api/v1/namespaces/{namespace}/pods/victim")
    assert pod["metadata"]["uid"] == victim["metadata"]["uid"]
    assert not pod["metadata"].get("deletionTimestamp")
    assert not any(c.get("type") == "DisruptionTarget"
                   for c in pod.get("status", {}).get("conditions") or ())
    assert not any(e.get("reason") == "Preempted" for e in events_for(kube, namespace, "victim"))
    assert not any(p.get("status", {}).get("nominatedNodeName")
                   for p in list_pods(kube, other))


def test_negative_cpu_is_refused_and_no_node_is_over_committed(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any,
        mutual: dict[str, tuple[Path, Path]]) -> None:
    sched = start_scheduler()
    node = f"neg-{uuid.uuid4().hex[:6]}"
    make_node(node, cpu="4")
    server = build_server(sched.service.scheduler, lambda: sched.service.synced, GrpcSettings(
        address="127.0.0.1:0", tls_cert=str(mutual["server"][0]),
        tls_key=str(mutual["server"][1]), client_ca=str(mutual["client-ca"][0]),
        mutating_clients=("client",)))
    server.start()
    negative = _pod_json(namespace, "negative", cpu="-4")
    field = "pod.pod_json.spec.containers[0].resources.requests.cpu"
    try:
        with _channel(server.address, mutual) as channel:
            stub = stub_for(channel)
            for name, call in (
                    ("PreFilter", lambda: stub.PreFilter(pb.PreFilterRequest(pod=negative))),
                    ("Filter", lambda: stub.Filter(pb.FilterRequest(pod=negative,
                                                                    node_names=[node]))),
                    ("Reserve", lambda: stub.Reserve(pb.ReserveRequest(pod=negative,
                                                                       node_name=node)))):
                code, details = _code(call)
                assert code == "INVALID_ARGUMENT", (name, code, details)
                assert details.startswith(f"{field}:") and "negative" in details, \
                    (name, details)
    finally:
        server.stop(0).wait(10)
    create_pod(kube, namespace, pod_body("big", scheduler=sched.name, cpu="6"))
    create_pod(kube, namespace, pod_body("fits", scheduler=sched.name, cpu="3"))
    wait_until(lambda: any(p["metadata"]["name"] == "fits" and p["spec"].get("nodeName")
                           for p in list_pods(kube, namespace)), what="the pod that fits")
    bound = {p["metadata"]["name"] for p in list_pods(kube, namespace)
             if p["spec"].get("nodeName")}
    assert bound == {"fits"}  # 6 cpu never lands on a 4-cpu node


# -- two replicas ------------------------------------------------------------------------------
def _replica_config(path: Path, namespace: str, lease: str, scheduler: str) -> Path:
    path.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": scheduler,
        "metricsBindAddress": "127.0.0.1:0",
        "grpc": {"mutatingClients": ["client"]},
        "leaderElection": {"leaderElect": True, "resourceNamespace": namespace,
                           "resourceName": lease, "leaseDuration": "10s",
                           "renewDeadline": "8s", "retryPeriod": "1s"}}))
    return path


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def replicas(local_cluster: LocalCluster, kube: KubeClient, namespace: str, crd: None,
             tmp_path: Path, mutual: dict[str, tuple[Path, Path]]
             ) -> Iterator[tuple[str, dict[str, str], dict[str, Path]]]:
    """Two `coscheduling run` replicas electing a leader, each serving gRPC under mutual
    TLS; yields the scheduler name, identity -> gRPC address, identity -> log."""
    lease = f"lead-{uuid.uuid4().hex[:6]}"
    scheduler = f"lead-{uuid.uuid4().hex[:6]}"
    config = _replica_config(tmp_path / "config.yaml", namespace, lease, scheduler)
    addresses, logs, processes = {}, {}, []
    try:
        for identity in ("replica-a", "replica-b"):
            addresses[identity] = f"127.0.0.1:{_free_port()}"
            logs[identity] = tmp_path / f"{identity}.log"
            processes.append(subprocess.Popen(
                [sys.executable, "-m", "coscheduling", "run", "--kubeconfig",
                 str(local_cluster.kubeconfig), "--config", str(config),
                 "--address", addresses[identity],
                 "--tls-cert", str(mutual["server"][0]), "--tls-key", str(mutual["server"][1]),
                 "--client-ca", str(mutual["client-ca"][0])],
                stdout=logs[identity].open("w"), stderr=subprocess.STDOUT,
                env={**os.environ, "POD_NAME": identity}))
        yield scheduler, addresses, logs
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(20)
            except subprocess.TimeoutExpired:
                process.kill()


def _health(address: str, certs: dict[str, tuple[Path, Path]]) -> str:
    with _channel(address, certs) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        try:
            answer = stub.Check(health_pb2.HealthCheckRequest(
                service="coscheduling.v1.Scheduling"), timeout=5)
        except grpc.RpcError as err:
            return err.code().name
    return health_pb2.HealthCheckResponse.ServingStatus.Name(answer.status)


def test_the_standby_is_not_serving_and_refuses_what_changes_state(
        kube: KubeClient, namespace: str, make_node: Any,
        replicas: tuple[str, dict[str, str], dict[str, Path]],
        mutual: dict[str, tuple[Path, Path]]) -> None:
    scheduler, addresses, logs = replicas
    node = f"lead-{uuid.uuid4().hex[:6]}"
    make_node(node, cpu="4")
    create_podgroup(kube, namespace, "w", 2)  # one member only: it stays pending
    create_pod(kube, namespace, pod_body("real", scheduler=scheduler, group="w"))
    states = wait_until(
        lambda: (s := {who: _health(a, mutual) for who, a in addresses.items()})
        and sorted(s.values()) == ["NOT_SERVING", "SERVING"] and s, timeout=60,
        what="one replica SERVING (the leader) and the other NOT_SERVING")
    leader = next(who for who, state in states.items() if state == "SERVING")
    standby = next(who for who in addresses if who != leader)
    real = pb.PodRef(key=pb.ObjectKey(namespace=namespace, name="real"))
    with _channel(addresses[standby], mutual) as channel:
        stub = stub_for(channel)
        for call in (lambda: stub.PreFilter(pb.PreFilterRequest(pod=real), timeout=10),
                     lambda: stub.Reserve(pb.ReserveRequest(pod=real, node_name=node),
                                          timeout=10)):
            code, details = _code(call)
            assert code == "UNAVAILABLE", (code, details)
            # Named once the standby has read the Lease the leader holds (within a retry).
            wait_until(lambda c=call: f"not the leader; the leader is {leader}" in _code(c)[1],
                       timeout=10, what="the standby naming the leader")
        # Read-only calls are answered from the standby's cache.
        assert _code(lambda: stub.Filter(pb.FilterRequest(pod=real, node_names=[node]),
                                         timeout=10))[0] == "OK"
    with _channel(addresses[leader], mutual) as channel:
        stub = stub_for(channel)
        wait_until(lambda: _code(lambda: stub.PreFilter(pb.PreFilterRequest(pod=real),
                                                        timeout=10))[0] == "OK",
                   what="the leader answering PreFilter for the watched pod")
        # A JSON document nested 100k deep: refused as the request's fault, no traceback.
        deep = b'{"metadata":' * 100_000 + b"{}" + b"}" * 100_000
        code, details = _code(lambda: stub.Filter(pb.FilterRequest(
            pod=pb.PodRef(pod_json=deep)), timeout=30))
        assert code == "INVALID_ARGUMENT" and "nested too deeply" in details, (code, details)
    for log in logs.values():
        assert "Traceback" not in log.read_text(), log.read_text()[-3000:]


# -- the API server's fencing of every write -------------------------------------------------
def _allow_writes(kube: KubeClient, namespace: str, account: str) -> None:
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "writes"},
        "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["delete", "get"]},
                  {"apiGroups": [""], "resources": ["pods/status"], "verbs": ["patch"]},
                  {"apiGroups": [PG_API.split("/")[0]], "resources": ["podgroups/status"],
                   "verbs": ["patch"]}]})
    kube.create(f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "writes"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writes"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})


def test_the_deposed_leaders_evictions_and_status_writes_are_refused(
        local_cluster: LocalCluster, kube: KubeClient, namespace: str, crd: None,
        tmp_path: Path) -> None:
    account, lease = "sched", f"fence-{uuid.uuid4().hex[:6]}"
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    _allow_writes(kube, namespace, account)
    binding = apply_policy(local_cluster, kube, writes_policy(
        f"system:serviceaccount:{namespace}:{account}"), namespace, lease, tmp_path)
    try:
        _check_fencing(local_cluster, kube, namespace, account, lease)
    finally:
        kube.delete(f"{VAP_API}/validatingadmissionpolicybindings/{binding}")


def _check_fencing(local_cluster: LocalCluster, kube: KubeClient, namespace: str,
                   account: str, lease: str) -> None:
    replicas = {}
    for name in ("replica-a", "replica-b"):  # the replicas' pods (never run: no kubelet)
        body = pod_body(name, scheduler="nobody")
        body["spec"]["serviceAccountName"] = account
        replicas[name] = create_pod(kube, namespace, body)
    clients = {name: KubeClient(ClientSettings(
        kubeconfig=str(local_cluster.kubeconfig),
        token=token_for(kube, namespace, account, pod))) for name, pod in replicas.items()}
    create_pod(kube, namespace, pod_body("victim", scheduler="nobody"))
    create_podgroup(kube, namespace, "g", 1)
    lease_body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                  "metadata": {"name": lease},
                  "spec": {"holderIdentity": "replica-a", "leaseDurationSeconds": 15}}
    leases = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
    kube.create(leases, lease_body)
    status_path = f"/apis/{PG_API}/namespaces/{namespace}/podgroups/g/status"
    status = {"status": {"phase": "Pending"}}
    wait_until(lambda: _written(clients["replica-a"], status_path, status),
               what="the leader's status write admitted (the policy in force)")
    kube.patch(f"{leases}/{lease}", {"spec": {"holderIdentity": "replica-b"}})  # a new leader
    a = clients["replica-a"]
    wait_until(lambda: not _written(a, status_path, status), what="the Lease change seen")
    refusals = []
    for what, call in (
            ("PodGroup status", lambda: a.patch(status_path, status)),
            ("nomination", lambda: a.patch(
                f"/api/v1/namespaces/{namespace}/pods/victim/status",
                {"status": {"nominatedNodeName": "n"}})),
            ("eviction", lambda: a.request("DELETE",
                                           f"/api/v1/namespaces/{namespace}/pods/victim"))):
        with pytest.raises(ApiError) as err:
            call()
        refusals.append((what, err.value.status, str(err.value)))
    for what, code, message in refusals:
        assert code == 403 and WRITES_POLICY in message and "held by replica-b" in message, \
            (what, message)
    assert kube.get(f"/api/v1/namespaces/{namespace}/pods/victim")["metadata"].get(
        "deletionTimestamp") is None
    assert _written(clients["replica-b"], status_path, status)  # the leader's are admitted


def _written(client: KubeClient, path: str, body: dict[str, Any]) -> bool:
    try:
        client.patch(path, body)
    except ApiError as err:
        if err.status == 403:
            return False
        raise
    return True
