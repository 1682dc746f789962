"""The election thread fails safe: an exception in it (here OverflowError, which a huge
Content-Length once raised in the client) ends leadership and the `coscheduling run`
process, which exits 1 with its pod's leader label removed and the Lease handed back, so
the pod restarts and the gRPC Service stops routing to it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import yaml

from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.service.wiring import LEADER_LABEL
from tests.integration.kube import create_pod, pod_body, wait_until


def _labels(kube: KubeClient, namespace: str, pod: str) -> dict[str, str]:
    return dict(kube.get(f"/api/v1/namespaces/{namespace}/pods/{pod}")["metadata"]
                .get("labels") or {})


def _holder(kube: KubeClient, path: str) -> str:
    try:
        return str(kube.get(path).get("spec", {}).get("holderIdentity") or "")
    except ApiError:
        return ""


def test_an_overflow_error_in_the_election_thread_ends_leadership_and_the_process(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        tmp_path: Path) -> None:
    replica = "replica-a"  # its pod (never run: no kubelet); the Lease identity is its name
    create_pod(kube, namespace, pod_body(replica, scheduler="nobody"))
    lease = f"elect-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": lease,
        "metricsBindAddress": "127.0.0.1:0",
        "leaderElection": {"leaderElect": True, "resourceNamespace": namespace,
                           "resourceName": lease, "leaseDuration": "10s",
                           "renewDeadline": "8s", "retryPeriod": "500ms"}}))
    log = tmp_path / "replica.log"
    # It leads from its first round on; every round then reads and writes the Lease: the
    # 40th request fails, about 10 s into its term (time to label its pod, even when the
    # machine is loaded).
    process = subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "run", "--kubeconfig",
         str(local_cluster.kubeconfig), "--config", str(config), "--no-grpc"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "COSCHEDULING_FAULT": "election-error:40", "POD_NAME": replica,
             "POD_NAMESPACE": namespace})
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}"
    seen: dict[str, Any] = {}
    try:
        def labelled_then_exited() -> bool:
            if _labels(kube, namespace, replica).get(LEADER_LABEL) == "true":
                seen["label"] = True
            if _holder(kube, lease_path) == replica:
                seen["holder"] = True
            return process.poll() is not None

        wait_until(labelled_then_exited, timeout=90, interval=0.1,
                   what="the replica to exit after its election thread failed")
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)
    text = log.read_text()
    assert seen == {"label": True, "holder": True}, (seen, text[-3000:])
    assert process.returncode == 1, text[-3000:]
    assert "leader election failed (OverflowError: fault election-error:40)" in text, \
        text[-3000:]
    assert "Traceback" in text  # the log says where it failed
    assert LEADER_LABEL not in _labels(kube, namespace, replica)
    assert _holder(kube, lease_path) == ""  # handed back: a follower need not wait it out
