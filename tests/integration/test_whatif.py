"""What-if and kubectl gang against a running scheduler on the real control plane (issue 29).

The scheduler runs with its loop and its gRPC server; `kubectl gang whatif` asks it about a
job that fits, one that fits only by preempting, and one that never fits, and the cluster
and the scheduler are the same afterwards: no object written, no claim, no gang state.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from coscheduling import kubectl_gang
from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.server import GrpcSettings, build_server
from coscheduling.server.gen import scheduling_pb2 as pb
from tests.integration.fixtures import RunningScheduler
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    create_priority_class,
    pod_body,
    wait_until,
)
from tests.integration.test_grpc import Served, serve

StartScheduler = Callable[..., RunningScheduler]
LOW, HIGH = "cs-whatif-low", "cs-whatif-high"


@pytest.fixture
def served(start_scheduler: StartScheduler, namespace: str) -> Iterator[Served]:
    """A scheduler with its loop running, and its gRPC server on a loopback port."""
    sched = start_scheduler()
    s = serve(sched, namespace)
    try:
        yield s
    finally:
        s.channel.close()
        s.server.stop(0).wait(10)


def job(name: str, pods: int, requests: dict[str, str], priority_class: str = "",
        node_selector: dict[str, str] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "busybox",
                                            "resources": {"requests": requests}}],
                            "restartPolicy": "Never"}
    if priority_class:
        spec["priorityClassName"] = priority_class
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name},
            "spec": {"parallelism": pods, "template": {"spec": spec}}}


def whatif(s: Served, manifest: dict[str, Any], tmp_path: Path, kubeconfig: Path,
           capsys: pytest.CaptureFixture[str], *, output: str = "json") -> Any:
    """`kubectl gang whatif -f FILE` in this process (its exit code checked)."""
    path = tmp_path / f"{manifest['metadata']['name']}.yaml"
    path.write_text(yaml.safe_dump(manifest))
    capsys.readouterr()
    code = kubectl_gang.main(["--kubeconfig", str(kubeconfig), "-n", s.namespace, "whatif",
                              "-f", str(path), "--address", s.server.address, "-o", output])
    out = capsys.readouterr().out
    assert code == 0, out
    return json.loads(out) if output == "json" else out


def snapshot(kube: KubeClient, s: Served) -> dict[str, Any]:
    """What a what-if must not change: the namespace's objects, and the scheduler's state."""
    ns = s.namespace
    objects = {path: sorted((o["metadata"]["name"], o["metadata"]["resourceVersion"])
                            for o in kube.get(path).get("items") or ())
               for path in (f"/api/v1/namespaces/{ns}/pods", f"/api/v1/namespaces/{ns}/events",
                            f"/apis/batch.scheduler.tencent.com/v1/namespaces/{ns}/podgroups",
                            f"/apis/batch/v1/namespaces/{ns}/jobs")}
    scheduler = s.scheduler
    with scheduler.cache.lock:
        gang = scheduler.framework.instances["Coscheduling"]
        state = {
            "pods": sorted(p.key for p in scheduler.cache.pods()),
            "groups": sorted(scheduler.listers.groups),
            "claims": sorted((i.name, k) for i in scheduler.cache.nodes() for k in i.claims),
            "gangs": sorted(gang.manager.gangs),  # type: ignore[attr-defined]
            "frozen": sorted(gang.manager.frozen_keys()),  # type: ignore[attr-defined]
            "evicted": scheduler.metrics.preemption_attempts.value(),
        }
    return {"objects": objects, "scheduler": state}


def test_whatif_fits_preempts_never_and_changes_nothing(
        served: Served, kube: KubeClient, make_node: Any, local_cluster: LocalCluster,
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    s, ns = served, served.namespace
    tag = uuid.uuid4().hex[:6]
    nodes = [f"wi-{tag}-a", f"wi-{tag}-b"]
    for name in nodes:
        make_node(name, cpu="4", memory="16Gi", labels={"whatif": tag})
    make_node(f"wi-{tag}-gpu", cpu="16", memory="64Gi", labels={"whatif": tag},
              extended={"nvidia.com/gpu": "8"})
    create_priority_class(kube, LOW, 10)
    create_priority_class(kube, HIGH, 1000)
    wait_until(lambda: all(s.scheduler.cache.node(n) is not None for n in nodes)
               and s.scheduler.listers.priority_class(HIGH) is not None,
               what="the scheduler to see the nodes and classes")
    selector = {"whatif": tag}
    kubeconfig = local_cluster.kubeconfig

    # 1. Fits now: two 1-cpu pods on the empty cpu nodes.
    answer = whatif(s, job("small", 2, {"cpu": "1"}, node_selector=selector), tmp_path,
                    kubeconfig, capsys)
    assert answer["verdict"] == "FITS_NOW", answer
    assert sorted(p["pod"] for p in answer["placements"]) == ["small-0", "small-1"]
    assert {p["node"] for p in answer["placements"]} <= {*nodes, f"wi-{tag}-gpu"}

    # Fill the cpu nodes with low-priority pods bound where a kubelet would run them.
    for index, node in enumerate(nodes * 4):
        create_pod(kube, ns, pod_body(f"low-{index}", scheduler=s.sched.name, cpu="1",
                                      memory="1Gi", priority_class=LOW, node_name=node))
    gpu = f"wi-{tag}-gpu"
    for index in range(16):
        create_pod(kube, ns, pod_body(f"low-gpu-{index}", scheduler=s.sched.name, cpu="1",
                                      memory="1Gi", priority_class=LOW, node_name=gpu))
    wait_until(lambda: sum(1 for p in s.scheduler.cache.pods() if p.node_name) >= 24,
               what="the bound pods in the scheduler's cache")
    before = snapshot(kube, s)

    # 2. Fits only by preempting: a high-priority gang of two 3-cpu pods.
    answer = whatif(s, job("urgent", 2, {"cpu": "3"}, HIGH, selector), tmp_path, kubeconfig,
                    capsys)
    assert answer["verdict"] == "FITS_AFTER_PREEMPTION", answer
    victims = {v["name"] for v in answer["victims"]}
    assert victims and all(v.startswith("low-") for v in victims), answer
    assert "cannot be placed" in answer["reason"]

    # The same gang at low priority may evict nothing: it waits for room, and first in line
    # it would reserve the room that frees (no other gang reserves).
    answer = whatif(s, job("patient", 2, {"cpu": "3"}, LOW, selector), tmp_path, kubeconfig,
                    capsys)
    assert answer["verdict"] == "FITS_ONCE_RESERVED", answer
    assert answer["need"] == 2 and answer["fit_now"] == 0 and answer["fit_empty"] == 2
    assert answer["reserve_nodes"] and not answer.get("reservations_ahead"), answer

    # 3. Never: 3 pods of 8 GPUs on a cluster with one 8-GPU node; the shortfall says so.
    text = whatif(s, job("huge", 3, {"nvidia.com/gpu": "8", "cpu": "1"}, HIGH), tmp_path,
                  kubeconfig, capsys, output="text")
    assert "NEVER FITS" in text, text
    assert f"needs 2 more node(s) like {gpu}: 16 cpu, 8 nvidia.com/gpu each" in text, text
    assert "nvidia.com/gpu: needs 24, 8 free of 8" in text, text
    assert f"gang {ns}/huge-whatif, minMember 3" in text, text
    answer = whatif(s, job("huge", 3, {"nvidia.com/gpu": "8", "cpu": "1"}, HIGH), tmp_path,
                    kubeconfig, capsys)
    assert answer["verdict"] == "NEVER" and answer["fit_empty"] == 1, answer

    # Nothing changed: no object written, no claim, gang, freeze or eviction left behind.
    assert snapshot(kube, s) == before


def test_whatif_refuses_bad_input_naming_the_field(
        served: Served, local_cluster: LocalCluster, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    bad = job("bad", 2, {"cpu": "1"})
    bad["spec"]["parallelism"] = "two"
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(bad))
    code = kubectl_gang.main(["--kubeconfig", str(local_cluster.kubeconfig), "whatif", "-f",
                              str(path), "--address", served.server.address])
    err = capsys.readouterr().err
    assert code == 1
    assert "INVALID_ARGUMENT" in err and "spec.parallelism" in err, err
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Simulate(pb.SimulateRequest(manifest=yaml.safe_dump(job(
            "p", 1, {"cpu": "1"}, "no-such-class")).encode(), namespace=served.namespace))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "spec.priorityClassName" in (caught.value.details() or "")


class _Standby:
    """A replica that does not hold the lease (leader election itself is tested in
    test_leadership.py)."""

    def leading(self) -> bool:
        return False

    def leader(self) -> str:
        return "replica-a"


def test_a_standby_refuses_simulate_naming_the_leader(served: Served) -> None:
    server = build_server(served.scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"),
                          _Standby())
    server.start()
    try:
        with grpc.insecure_channel(server.address) as channel:
            stub = type(served.stub)(channel)
            with pytest.raises(grpc.RpcError) as caught:
                stub.Simulate(pb.SimulateRequest(manifest=yaml.safe_dump(
                    job("j", 1, {"cpu": "1"})).encode()))
            assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
            assert "replica-a" in (caught.value.details() or "")
    finally:
        server.stop(0).wait(10)


def test_kubectl_gang_list_and_explain(
        served: Served, kube: KubeClient, make_node: Any, local_cluster: LocalCluster,
        tmp_path: Path) -> None:
    """`kubectl gang` as kubectl runs a plugin: the executable on PATH, credentials from
    $KUBECONFIG and the namespace from the context."""
    s, ns = served, served.namespace
    make_node(f"wi-{uuid.uuid4().hex[:6]}", cpu="4")
    create_podgroup(kube, ns, "waits", 3)
    for index in range(3):
        create_pod(kube, ns, pod_body(f"waits-{index}", scheduler=s.sched.name, cpu="500",
                                      group="waits"))
    wait_until(lambda: "Insufficient cpu" in _why(kube, ns, "waits"), timeout=60,
               what="the scheduler to say why the gang waits")
    config = yaml.safe_load(local_cluster.kubeconfig.read_text())
    config["contexts"][0]["context"]["namespace"] = ns
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(config))
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "KUBECONFIG": str(kubeconfig),
           "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}"}
    listed = subprocess.run(["kubectl", "gang", "list"], env=env, capture_output=True,
                            text=True, timeout=60, check=True).stdout
    row = next(line for line in listed.splitlines() if line.startswith("waits "))
    assert "0/3" in row and "default" in row and "cpu" in row, listed
    explained = subprocess.run(["kubectl", "gang", "explain", "waits"], env=env,
                               capture_output=True, text=True, timeout=60, check=True).stdout
    assert f"{ns}/waits: phase Pending, minMember 3" in explained, explained
    assert "Insufficient cpu" in explained, explained


def _why(kube: KubeClient, namespace: str, group: str) -> str:
    obj = kube.get(f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups/"
                   f"{group}")
    return json.dumps((obj.get("status") or {}).get("conditions") or [])


def test_a_200000_replica_manifest_is_refused_before_anything_is_made(served: Served) -> None:
    """A StatefulSet of 207 bytes asking for 200,000 replicas: refused by its count, before
    a pod is expanded, in well under 100 ms, and the server answers the next call."""
    manifest = yaml.safe_dump({"apiVersion": "apps/v1", "kind": "StatefulSet",
                               "metadata": {"name": "huge"},
                               "spec": {"replicas": 200_000, "template": {"spec": {
                                   "containers": [{"name": "c", "image": "x"}]}}}}).encode()
    started = time.perf_counter()
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Simulate(pb.SimulateRequest(manifest=manifest, namespace=served.namespace))
    took = time.perf_counter() - started
    print(f"200,000-replica StatefulSet ({len(manifest)} bytes) refused in "
          f"{took * 1000:.1f} ms")
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert caught.value.details() == ("manifest: spec.replicas: 200000 pods, more than the "
                                      "10000 a what-if places")
    assert took < 0.1
    deep = ("apiVersion: v1\nkind: Pod\nmetadata: {name: deep}\nspec:\n  x: "
            + "[" * 3000 + "]" * 3000 + "\n").encode()
    with pytest.raises(grpc.RpcError) as caught:
        served.stub.Simulate(pb.SimulateRequest(manifest=deep, namespace=served.namespace))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
