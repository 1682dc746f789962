"""deploy/start.sh, the shipped RBAC, and leader election across two processes (issue 5)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.api.times import parse_rfc3339
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.config import parse_config
from coscheduling.localcluster import LocalCluster
from coscheduling.plugins.registry import default_registry
from coscheduling.service.wiring import SchedulerService
from tests.integration.fixtures import REPO, kubectl, released_by
from tests.integration.kube import (
    InvariantWatcher,
    bound_count,
    create_pod,
    create_podgroup,
    pod_body,
    wait_until,
)
from tests.integration.test_dra import Dra
from tests.integration.test_pod_constraints import _pool

START_SH = REPO / "deploy" / "start.sh"


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "COSCHEDULING_STATE_DIR": str(tmp_path / "state"),
            "COSCHEDULING_PYTHON": sys.executable}


def test_start_sh_schedules_a_gang(local_cluster: LocalCluster, kube: KubeClient,
                                   namespace: str, make_node: Any, tmp_path: Path) -> None:
    config = yaml.safe_load((REPO / "deploy" / "config.yaml").read_text())
    config["schedulerName"] = name = f"startsh-{uuid.uuid4().hex[:6]}"
    config["metricsBindAddress"] = "127.0.0.1:0"
    config_file = tmp_path / "config.yaml"
    config_file.write_text(yaml.safe_dump(config))
    env = _env(tmp_path)
    started = subprocess.run([str(START_SH), "--kubeconfig", str(local_cluster.kubeconfig),
                              "--config", str(config_file), "--background", "--",
                              "--address", "127.0.0.1:0"],
                             env=env, capture_output=True, text=True, timeout=120)
    assert started.returncode == 0, started.stderr
    try:
        make_node("startsh-a", cpu="4")
        create_podgroup(kube, namespace, "g", 3)
        for i in range(3):
            create_pod(kube, namespace, pod_body(f"m{i}", scheduler=name, group="g"))
        wait_until(lambda: bound_count(kube, namespace, "g") == 3, what="gang bound")
        log = (tmp_path / "state" / "scheduler.log").read_text()
        assert "caches synced" in log
    finally:
        stopped = subprocess.run([str(START_SH), "stop"], env=env, capture_output=True,
                                 text=True, timeout=60)
    assert "stopped scheduler" in stopped.stdout


def test_start_sh_refuses_bad_kubeconfigs_clearly(local_cluster: LocalCluster,
                                                  tmp_path: Path) -> None:
    env = _env(tmp_path)
    good = local_cluster.kubeconfig.read_text()
    cases = {
        "wrong-token": (yaml.safe_load(good), "refused the credentials"),
        "unreachable": (yaml.safe_load(good), "API server"),
    }
    cases["wrong-token"][0]["users"][0]["user"]["token"] = "not-a-token"
    cases["unreachable"][0]["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    for name, (doc, message) in cases.items():
        path = tmp_path / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        result = subprocess.run([str(START_SH), "--kubeconfig", str(path)], env=env,
                                capture_output=True, text=True, timeout=60)
        assert result.returncode == 2, (name, result.stderr)
        assert message in result.stderr, (name, result.stderr)
    missing = subprocess.run([str(START_SH), "--kubeconfig", str(tmp_path / "nope")], env=env,
                             capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2 and "does not exist" in missing.stderr
    env.pop("KUBECONFIG", None)
    none = subprocess.run([str(START_SH)], env=env, capture_output=True, text=True, timeout=60)
    assert none.returncode == 2 and "no kubeconfig" in none.stderr
    usage = subprocess.run([str(START_SH), "--help"], env=env, capture_output=True, text=True)
    assert usage.returncode == 0 and "Usage:" in usage.stdout


def _service_account_token(kube: KubeClient) -> str:
    answer = kube.create(
        "/api/v1/namespaces/coscheduling-system/serviceaccounts/coscheduling/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}})
    return str(answer["status"]["token"])


def test_shipped_rbac_is_enough_and_no_more(local_cluster: LocalCluster, kube: KubeClient,
                                            crd: None, namespace: str,
                                            make_node: Any) -> None:
    for manifest in ("00-namespace.yaml", "10-rbac.yaml"):
        kubectl(local_cluster, "apply", "-f", str(REPO / "deploy" / manifest))
    wait_until(lambda: _sa_exists(kube), what="the coscheduling ServiceAccount")
    token = _service_account_token(kube)
    name = f"rbac-{uuid.uuid4().hex[:6]}"
    service = _as_shipped_account(local_cluster, name, token)
    with InvariantWatcher(kube, [namespace], released_by(service)) as watcher:
        try:
            assert service.start(sync_timeout=30), "the ServiceAccount could not list and watch"
            make_node("rbac-a", cpu="6")
            create_podgroup(kube, namespace, "g", 3)
            for i in range(3):
                create_pod(kube, namespace, pod_body(f"m{i}", scheduler=name, group="g"))
            wait_until(lambda: bound_count(kube, namespace, "g") == 3, what="gang bound")
            status = wait_until(lambda: kube.get(
                f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups/g"
            ).get("status", {}).get("phase") == "Scheduled", what="status written as the SA")
            assert status
            # A plain Job's gang: its PodGroup derived and written as the ServiceAccount.
            kube.create(f"/apis/batch/v1/namespaces/{namespace}/jobs", {
                "apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "plain"},
                "spec": {"parallelism": 2, "template": {"spec": {
                    **pod_body("plain", scheduler=name)["spec"], "restartPolicy": "Never"}}}})
            wait_until(lambda: sum(1 for p in kube.get(
                f"/api/v1/namespaces/{namespace}/pods",
                labelSelector="batch.kubernetes.io/job-name=plain")["items"]
                if p["spec"].get("nodeName")) == 2, what="the derived gang bound")
            assert kube.get(f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}"
                            "/podgroups/job-plain")["spec"]["minMember"] == 2
        finally:
            service.stop()
        watcher.check_settled()
    as_sa = KubeClient(ClientSettings(kubeconfig=str(local_cluster.kubeconfig), token=token))
    refused = {
        "read secrets": lambda: as_sa.get(f"/api/v1/namespaces/{namespace}/secrets"),
        # It may delete pods (preemption evicts), not change them.
        "patch pods": lambda: as_sa.patch(f"/api/v1/namespaces/{namespace}/pods/m0",
                                          {"metadata": {"labels": {"x": "y"}}}),
        "create pods": lambda: create_pod(as_sa, namespace, pod_body("x", scheduler=name)),
        "update nodes": lambda: as_sa.patch("/api/v1/nodes/rbac-a",
                                            {"metadata": {"labels": {"x": "y"}}}),
        # It writes the PodGroups it derives from workloads, never the workloads.
        "edit a workload": lambda: as_sa.patch(
            f"/apis/batch/v1/namespaces/{namespace}/jobs/plain", {"spec": {"parallelism": 1}}),
        "edit another producer's podgroup": lambda: as_sa.patch(
            f"/apis/scheduling.x-k8s.io/v1alpha1/namespaces/{namespace}/podgroups/g",
            {"spec": {"minMember": 1}}),
        "another lease": lambda: as_sa.get(
            "/apis/coordination.k8s.io/v1/namespaces/coscheduling-system/leases/other"),
    }
    for what, call in refused.items():
        with pytest.raises(ApiError) as err:
            call()
        assert err.value.status == 403, f"{what}: {err.value}"
    as_sa.close()


def test_shipped_rbac_allocates_a_gangs_devices(local_cluster: LocalCluster,
                                                kube: KubeClient, crd: None, namespace: str,
                                                make_node: Any) -> None:
    """DRA's writes as the shipped ServiceAccount: since 1.34 the API server asks for
    resourceclaims/binding (at cluster scope) to set a claim's allocation and reservedFor,
    on top of resourceclaims/status (kube-scheduler's own role has both)."""
    for manifest in ("00-namespace.yaml", "10-rbac.yaml"):
        kubectl(local_cluster, "apply", "-f", str(REPO / "deploy" / manifest))
    wait_until(lambda: _sa_exists(kube), what="the coscheduling ServiceAccount")
    name = f"rbac-dra-{uuid.uuid4().hex[:6]}"
    service = _as_shipped_account(local_cluster, name, _service_account_token(kube))
    dra = Dra(kube, namespace, _pool())
    try:
        assert service.start(sync_timeout=30), "the ServiceAccount could not list and watch"
        node = f"rbac-dra-{dra.pool}"
        make_node(node, labels={"test-pool": dra.pool})
        dra.slice(node, [{"name": "gpu0"}, {"name": "gpu1"}])
        dra.template("one-gpu", dra.device_class())
        create_podgroup(kube, namespace, "train", 2)
        for i in range(2):
            dra.pod(f"train-{i}", name, template="one-gpu", group="train")
        wait_until(lambda: bound_count(kube, namespace, "train") == 2, timeout=60,
                   what="the gang bound with its devices, as the ServiceAccount")
        allocated = [c for c in dra.claims() if (c.get("status") or {}).get("allocation")]
        assert len(allocated) == 2, dra.claims()
    finally:
        service.stop()
        dra.cleanup()


def _as_shipped_account(local_cluster: LocalCluster, name: str,
                        token: str) -> SchedulerService:
    """A scheduler named ``name`` that reaches the API server as the shipped ServiceAccount
    (deploy/10-rbac.yaml), with leader election as deployed."""
    config = parse_config({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": name,
        "metricsBindAddress": "127.0.0.1:0",
        "clientConnection": {"kubeconfig": str(local_cluster.kubeconfig)},
        "leaderElection": {"leaderElect": True, "resourceNamespace": "coscheduling-system",
                           "resourceName": "batch-scheduler", "leaseDuration": "4s",
                           "renewDeadline": "3s", "retryPeriod": "1s"},
    }, default_registry())
    return SchedulerService(config, token=token)


def _sa_exists(kube: KubeClient) -> bool:
    try:
        kube.get("/api/v1/namespaces/coscheduling-system/serviceaccounts/coscheduling")
    except ApiError:
        return False
    return True


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Replica:
    """One `coscheduling run` process with leader election on."""

    def __init__(self, config: Path, kubeconfig: Path, log: Path) -> None:
        self.log = log
        self.process = subprocess.Popen(
            [sys.executable, "-m", "coscheduling", "run", "--kubeconfig", str(kubeconfig),
             "--config", str(config), "--address", "127.0.0.1:0"],
            stdout=log.open("w"), stderr=subprocess.STDOUT)

    def bound(self, port: int) -> float:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as r:
                text = r.read().decode()
        except OSError:
            return -1.0
        for line in text.splitlines():
            if line.startswith("coscheduling_pods_bound_total"):
                return float(line.split()[-1])
        return 0.0

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[list[Replica]]:
    started: list[Replica] = []
    yield started
    for replica in started:
        replica.kill()


def test_two_replicas_one_leader_binds_and_hands_over(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        make_node: Any, tmp_path: Path, replicas: list[Replica]) -> None:
    name = f"ha-{uuid.uuid4().hex[:6]}"
    lease = {"leaderElect": True, "resourceNamespace": namespace, "resourceName": name,
             "leaseDuration": "4s", "renewDeadline": "3s", "retryPeriod": "500ms"}
    ports = [_free_port(), _free_port()]
    make_node("ha-a", cpu="16")
    with InvariantWatcher(kube, [namespace]) as watcher:
        for index, port in enumerate(ports):
            config = tmp_path / f"config-{index}.yaml"
            config.write_text(yaml.safe_dump({
                "apiVersion": "config.batch.scheduler.tencent.com/v1",
                "kind": "SchedulerConfiguration", "schedulerName": name,
                "metricsBindAddress": f"127.0.0.1:{port}", "leaderElection": lease}))
            replicas.append(Replica(config, local_cluster.kubeconfig, tmp_path / f"{index}.log"))
        lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        wait_until(lambda: _holder(kube, lease_path), what="a leader")
        wait_until(lambda: all(r.bound(p) >= 0 for r, p in zip(replicas, ports, strict=True)),
                   what="both replicas serving metrics")
        create_podgroup(kube, namespace, "first", 4)
        for i in range(4):
            create_pod(kube, namespace, pod_body(f"first-{i}", scheduler=name, group="first"))
        wait_until(lambda: bound_count(kube, namespace, "first") == 4, what="first gang bound")
        counts = [r.bound(p) for r, p in zip(replicas, ports, strict=True)]
        assert sorted(counts) == [0, 4], f"exactly one replica binds: {counts}"
        leader = counts.index(4)
        follower = 1 - leader
        old_holder = _holder(kube, lease_path)
        replicas[leader].kill()
        last_renewal = parse_rfc3339(kube.get(lease_path)["spec"]["renewTime"])  # it is dead
        new_holder = wait_until(
            lambda: (h := _holder(kube, lease_path)) and h != old_holder and h,
            timeout=60, what="the follower to take the lease")
        acquired = parse_rfc3339(kube.get(lease_path)["spec"]["acquireTime"])
        # Safety, not speed: the lease of a dead leader is taken only once it has expired.
        assert acquired >= last_renewal + 4, (acquired, last_renewal)
        print(f"leader killed; {new_holder} took over {acquired - last_renewal:.1f}s after "
              "the last renewal")
        create_podgroup(kube, namespace, "second", 4)
        for i in range(4):
            create_pod(kube, namespace, pod_body(f"second-{i}", scheduler=name,
                                                 group="second"))
        wait_until(lambda: bound_count(kube, namespace, "second") == 4,
                   what="second gang bound by the new leader")
        assert replicas[follower].bound(ports[follower]) == 4
        watcher.check_settled()


def _holder(kube: KubeClient, path: str) -> str:
    try:
        return str(kube.get(path).get("spec", {}).get("holderIdentity") or "")
    except ApiError:
        return ""

