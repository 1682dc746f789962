"""Security: no cross-namespace groups, the occupiedBy rule, no secrets in logs (issue 8);
busy ports, abandoned gRPC reservations (issue 13)."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.server.gen import scheduling_pb2 as pb
from tests.integration.kube import (
    PG_API,
    bound_count,
    create_pod,
    create_podgroup,
    events_for,
    pod_body,
    pod_condition,
    wait_until,
)
from tests.integration.test_grpc import serve, wait_cached


def test_a_pod_cannot_join_a_podgroup_in_another_namespace(
        kube: KubeClient, namespace: str, make_namespace: Any, make_node: Any,
        start_scheduler: Any) -> None:
    sched = start_scheduler()
    other = make_namespace()
    make_node("xns-a", cpu="4")
    create_podgroup(kube, namespace, "g", 1)
    create_pod(kube, other, pod_body("intruder", scheduler=sched.name, group="g"))
    condition = wait_until(lambda: pod_condition(kube, other, "intruder", "PodScheduled"),
                           what="the intruder's condition")
    assert f'PodGroup (batch.scheduler.tencent.com/v1) "{other}/g" not found' in \
        condition["message"]
    create_pod(kube, namespace, pod_body("member", scheduler=sched.name, group="g"))
    wait_until(lambda: bound_count(kube, namespace, "g") == 1, what="the real member bound")
    assert bound_count(kube, other, "g") == 0


def _job(name: str, scheduler: str, group: str, count: int) -> dict[str, Any]:
    template = pod_body(name, scheduler=scheduler, group=group)
    template["spec"]["restartPolicy"] = "Never"
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": count, "completions": count,
                     "template": {"metadata": template["metadata"],
                                  "spec": template["spec"]}}}


def test_pods_of_another_owner_cannot_take_over_an_occupied_group(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any) -> None:
    sched = start_scheduler()
    make_node("occ-a", cpu="8")
    create_podgroup(kube, namespace, "shared", 2)
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", _job("owner", sched.name,
                                                                    "shared", 2))
    wait_until(lambda: bound_count(kube, namespace, "shared") == 2, what="the owner's gang")
    path = f"/apis/{PG_API}/namespaces/{namespace}/podgroups/shared"
    occupant = wait_until(lambda: kube.get(path).get("status", {}).get("occupiedBy"),
                          what="occupiedBy written")
    assert occupant.startswith("Job/owner/")
    kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", _job("thief", sched.name,
                                                                    "shared", 1))
    thief = wait_until(lambda: next(
        (p["metadata"]["name"] for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")[
            "items"] if p["metadata"]["name"].startswith("thief")), None), what="thief pod")
    wait_until(lambda: any("is occupied by Job/owner/" in e.get("message", "")
                           for e in events_for(kube, namespace, thief)),
               what="an event saying the group is occupied")
    # A bare pod (no controller) may not join an occupied group either (issue 13).
    create_pod(kube, namespace, pod_body("bare", scheduler=sched.name, group="shared"))
    wait_until(lambda: any("belongs to no controller" in e.get("message", "")
                           for e in events_for(kube, namespace, "bare")),
               what="an event refusing the bare pod")
    assert bound_count(kube, namespace, "shared") == 2


def test_no_credential_appears_in_the_logs(local_cluster: LocalCluster, kube: KubeClient,
                                          crd: None, namespace: str, make_node: Any,
                                          tmp_path: Path) -> None:
    """Run the scheduler at debug verbosity through errors (a bad group, an unreachable
    server for a moment) and search its log for any piece of the kubeconfig's secrets."""
    kubeconfig = yaml.safe_load(local_cluster.kubeconfig.read_text())
    user = kubeconfig["users"][0]["user"]
    cluster = kubeconfig["clusters"][0]["cluster"]
    secrets = [v for v in (user.get("token"), user.get("client-key-data"),
                           user.get("client-certificate-data"),
                           cluster.get("certificate-authority-data")) if v]
    assert secrets
    name = f"logs-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": name,
        "metricsBindAddress": "127.0.0.1:0"}))
    log = tmp_path / "scheduler.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "run", "--kubeconfig",
         str(local_cluster.kubeconfig), "--config", str(config), "-v", "1",
         "--address", "127.0.0.1:0"],
        stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        make_node("logs-a", cpu="2")
        create_pod(kube, namespace, pod_body("orphan", scheduler=name, group="missing"))
        create_podgroup(kube, namespace, "big", 3)
        for i in range(3):
            create_pod(kube, namespace, pod_body(f"big-{i}", scheduler=name, group="big"))
        wait_until(lambda: pod_condition(kube, namespace, "big-0", "PodScheduled"),
                   what="the scheduler at work")
        local_cluster.pause_component("kube-apiserver")  # errors get logged now
        time.sleep(8)
        local_cluster.resume_component("kube-apiserver")
        time.sleep(2)
    finally:
        process.terminate()
        process.wait(timeout=20)
    text = log.read_text()
    assert "caches synced" in text
    for secret in secrets:
        for piece in (secret, secret[:24], secret[-24:]):
            assert piece not in text, "a credential leaked into the log"
    assert "BEGIN" not in text and "PRIVATE KEY" not in text


# -- issue 13 -------------------------------------------------------------------------------
def _listening_socket() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    return sock


@pytest.mark.parametrize("taken", ["metrics", "grpc"])
def test_a_busy_port_is_one_clear_line_and_exit_code_2(
        local_cluster: LocalCluster, crd: None, tmp_path: Path, taken: str) -> None:
    with _listening_socket() as busy:
        address = f"127.0.0.1:{busy.getsockname()[1]}"
        config = tmp_path / "config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.batch.scheduler.tencent.com/v1",
            "kind": "SchedulerConfiguration", "schedulerName": "busy-port",
            "metricsBindAddress": address if taken == "metrics" else "127.0.0.1:0"}))
        result = subprocess.run(
            [sys.executable, "-m", "coscheduling", "run", "--kubeconfig",
             str(local_cluster.kubeconfig), "--config", str(config), "--address",
             address if taken == "grpc" else "127.0.0.1:0"],
            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    expected = ("cannot serve /metrics, /healthz and /readyz on" if taken == "metrics"
                else "cannot serve gRPC: cannot listen on")
    assert expected in lines[0] and address in lines[0], lines[0]


def test_an_abandoned_grpc_reservation_expires_with_an_event(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any) -> None:
    """A caller reserves room and goes away: after grpc.reservationTimeout the room is
    released as Unreserve would, and the pod gets an event saying so."""
    sched = start_scheduler(start=False)
    served = serve(sched, namespace, reservation_timeout=1.0)
    try:
        sched.start(loops=False)
        node = f"expiry-{uuid.uuid4().hex[:6]}"
        make_node(node, cpu="2")
        create_pod(kube, namespace, pod_body("held", scheduler=sched.name, cpu="2"))
        wait_cached(served, pods=["held"], nodes=[node])
        reserved = served.stub.Reserve(pb.ReserveRequest(pod=served.ref("held"),
                                                         node_name=node))
        assert reserved.status.code == 0
        cache = served.scheduler.cache
        wait_until(lambda: any("gRPC reservation" in e.get("message", "")
                               and "expired" in e.get("message", "")
                               for e in events_for(kube, namespace, "held")),
                   what="an event about the expired reservation")
        assert not cache.is_assumed(f"{namespace}/held")
        assert not served.stub.Unreserve(pb.UnreserveRequest(
            pod=served.ref("held"), node_name=node)).unreserved  # nothing left to release
        info = cache.node(node)
        assert info is not None and not info.pods
    finally:
        served.channel.close()
        served.server.stop(0).wait(10)
