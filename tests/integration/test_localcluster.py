"""The local control plane itself: reachable, current, running controllers, and leak-free."""

from __future__ import annotations

import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import textwrap
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import Binaries, LocalCluster, ensure_binaries
from coscheduling.localcluster.build import KUBERNETES_VERSION
from coscheduling.localcluster.launcher import ClusterStartError

pytestmark = pytest.mark.integration

WaitFor = Callable[..., Any]

COMPONENT_NAMES = {"etcd", "kube-apiserver", "kube-controller-manager"}


def _get(cluster: LocalCluster, path: str, timeout: float = 5) -> tuple[int, str]:
    context = ssl.create_default_context(cafile=str(cluster.ca_file))
    request = urllib.request.Request(cluster.server + path)
    request.add_header("Authorization", f"Bearer {cluster.admin_token}")
    with urllib.request.urlopen(request, context=context, timeout=timeout) as response:
        return response.status, response.read().decode()


def _answers(cluster: LocalCluster) -> bool:
    try:
        return _get(cluster, "/readyz", timeout=1)[0] == 200
    except OSError:
        return False


def _alive(pid: int) -> bool:
    """Alive and not a zombie (killed children may wait unreaped for a moment)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def _state_pids(workdir: Path) -> dict[str, int]:
    state = json.loads((workdir / "cluster.json").read_text())
    return {name: record["pid"] for name, record in state["components"].items()}


def _assert_all_gone(wait_for: WaitFor, pids: dict[str, int], timeout: float = 15) -> None:
    wait_for(
        lambda: not any(_alive(pid) for pid in pids.values()),
        timeout=timeout,
        what=f"processes {pids} to exit",
    )


def _kill_leftovers(pids: dict[str, int]) -> None:
    """Never leave a control plane behind, even when the test failed."""
    for pid in pids.values():
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_apiserver_ready_and_version(local_cluster: LocalCluster) -> None:
    assert _get(local_cluster, "/readyz") == (200, "ok")
    _, body = _get(local_cluster, "/version")
    assert json.loads(body)["gitVersion"] == f"v{KUBERNETES_VERSION}"


def test_kube_scheduler_is_built_for_the_same_release() -> None:
    """The native contender of the benchmark: the same release as the control plane."""
    result = subprocess.run([str(ensure_binaries().kube_scheduler), "--version"],
                            capture_output=True, text=True, timeout=60, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["Kubernetes", f"v{KUBERNETES_VERSION}"]


# What discovery must list for the native gang API of each release.
NATIVE_RESOURCES = {
    "scheduling.k8s.io/v1alpha1": {"workloads"},
    "scheduling.k8s.io/v1beta1": {"workloads", "podgroups", "podgroups/status"},
}


def test_native_workload_api_is_served(local_cluster: LocalCluster, kube: KubeClient) -> None:
    api = local_cluster.workload_api
    served = {r["name"] for r in kube.get(f"/apis/{api.group_version}")["resources"]}
    assert NATIVE_RESOURCES[api.group_version] <= served


def test_pod_names_its_native_podgroup_and_status_is_writable(
    local_cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """The gate is on for pods too: the apiserver would drop spec.schedulingGroup otherwise."""
    api = local_cluster.workload_api
    assert api.group_version == "scheduling.k8s.io/v1beta1", (
        f"the native group source needs PodGroup objects (v1.36 on); this control plane "
        f"serves {api.group_version}: run the tests on the default release")
    groups = f"/apis/{api.group_version}/namespaces/{namespace}/podgroups"
    kube.create(groups, {"apiVersion": api.group_version, "kind": "PodGroup",
                         "metadata": {"name": "gang"},
                         "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}}})
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "member"},
           "spec": {"schedulingGroup": {"podGroupName": "gang"},
                    "containers": [{"name": "main", "image": "busybox"}]}}
    created = kube.create(f"/api/v1/namespaces/{namespace}/pods", pod)
    assert created["spec"]["schedulingGroup"] == {"podGroupName": "gang"}
    group = kube.get(f"{groups}/gang")
    group["status"] = {"conditions": [{
        "type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
        "message": "2 of 3", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}
    kube.request("PUT", f"{groups}/gang/status", body=group)
    stored = kube.get(f"{groups}/gang")
    assert [(c["type"], c["reason"]) for c in stored["status"]["conditions"]] == [
        ("PodGroupInitiallyScheduled", "Unschedulable")]
    assert stored["spec"]["schedulingPolicy"] == {"gang": {"minCount": 3}}


def test_kubectl_apply_configmap(
    local_cluster: LocalCluster, kube_api: client.ApiClient, namespace: str, tmp_path: Path
) -> None:
    kubectl = shutil.which("kubectl")
    assert kubectl is not None, "kubectl is not on PATH"
    manifest = tmp_path / "cm.yaml"
    manifest.write_text(
        textwrap.dedent(
            f"""\
            apiVersion: v1
            kind: ConfigMap
            metadata:
              name: greeting
              namespace: {namespace}
            data:
              hello: world
            """
        )
    )
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(local_cluster.kubeconfig), "apply", "-f", str(manifest)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    config_map = client.CoreV1Api(kube_api).read_namespaced_config_map("greeting", namespace)
    assert config_map.data == {"hello": "world"}


def test_job_pods_created_by_controller_manager(
    kube_api: client.ApiClient, namespace: str, wait_for: WaitFor
) -> None:
    container = client.V1Container(name="main", image="busybox", command=["true"])
    job = client.V1Job(
        metadata=client.V1ObjectMeta(name="probe"),
        spec=client.V1JobSpec(
            parallelism=2,
            completions=2,
            template=client.V1PodTemplateSpec(
                spec=client.V1PodSpec(containers=[container], restart_policy="Never")
            ),
        ),
    )
    client.BatchV1Api(kube_api).create_namespaced_job(namespace, job)
    core = client.CoreV1Api(kube_api)
    wait_for(
        lambda: (
            len(core.list_namespaced_pod(namespace, label_selector="job-name=probe").items) == 2
        ),
        what="the job controller to create 2 pods",
    )


def test_make_node_is_ready_with_capacity(
    make_node: Callable[..., client.V1Node], kube_api: client.ApiClient
) -> None:
    taint = client.V1Taint(key="dedicated", value="gang", effect="NoSchedule")
    make_node("fake-node-a", cpu="4", extended={"example.com/gpu": "2"}, taints=[taint])
    node = client.CoreV1Api(kube_api).read_node("fake-node-a")
    assert node.status is not None and node.spec is not None
    assert node.status.allocatable == {
        "cpu": "4",
        "memory": "32Gi",
        "pods": "110",
        "example.com/gpu": "2",
    }
    assert [(c.type, c.status) for c in node.status.conditions or []] == [("Ready", "True")]
    assert [(t.key, t.effect) for t in node.spec.taints or []] == [("dedicated", "NoSchedule")]


def test_failed_component_reports_its_log(tmp_path: Path) -> None:
    failing = tmp_path / "failing"
    failing.write_text('#!/bin/sh\necho "unknown flag: $1" >&2\nexit 3\n')
    failing.chmod(0o755)
    broken = Binaries(etcd=failing, kube_apiserver=failing, kube_controller_manager=failing,
                      kube_scheduler=failing)
    cluster = LocalCluster(tmp_path / "cluster", binaries=broken, log=lambda _: None)
    with pytest.raises(ClusterStartError, match=r"(?s)etcd exited with code 3.*unknown flag: --"):
        cluster.start()
    assert cluster.pids == {}


def test_component_control_and_stop(
    tmp_path: Path, wait_for: WaitFor, api_client_for: Callable[[Path], client.ApiClient]
) -> None:
    cluster = LocalCluster(tmp_path, binaries=ensure_binaries(), log=lambda _: None)
    with cluster:
        pids = cluster.pids
        assert set(pids) == COMPONENT_NAMES
        assert _state_pids(tmp_path) == pids
        core = client.CoreV1Api(api_client_for(cluster.kubeconfig))
        survivor = client.V1ConfigMap(
            metadata=client.V1ObjectMeta(name="survivor"), data={"k": "v"}
        )
        core.create_namespaced_config_map("default", survivor)

        cluster.pause_component("kube-apiserver")
        assert not _answers(cluster)
        cluster.resume_component("kube-apiserver")
        wait_for(lambda: _answers(cluster), what="apiserver to answer after SIGCONT")

        cluster.stop_component("etcd", graceful=False)
        assert not _alive(pids["etcd"])
        cluster.start_component("etcd")
        server = cluster.server
        cluster.stop_component("kube-apiserver")
        assert not _alive(pids["kube-apiserver"])
        assert set(_state_pids(tmp_path)) == {"etcd", "kube-controller-manager"}
        cluster.start_component("kube-apiserver")
        assert cluster.server == server and _answers(cluster)
        assert core.read_namespaced_config_map("survivor", "default").data == {"k": "v"}
        pids = cluster.pids
    assert cluster.pids == {}
    _assert_all_gone(wait_for, pids, timeout=0)


_ORPHAN_SCRIPT = """
import sys, time
from pathlib import Path
from coscheduling.localcluster import LocalCluster
LocalCluster(Path(sys.argv[1]), die_with_parent=True).start()
print("READY", flush=True)
time.sleep(600)
"""


def test_killed_parent_leaves_no_processes(tmp_path: Path, wait_for: WaitFor) -> None:
    ensure_binaries()
    workdir = tmp_path / "cluster"
    with (tmp_path / "parent.log").open("w") as stderr:
        parent = subprocess.Popen(
            [sys.executable, "-c", _ORPHAN_SCRIPT, str(workdir)],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    pids: dict[str, int] = {}
    try:
        assert parent.stdout is not None
        line = parent.stdout.readline()
        assert line.strip() == "READY", (tmp_path / "parent.log").read_text()
        pids = _state_pids(workdir)
        assert set(pids) == COMPONENT_NAMES
        assert all(_alive(pid) for pid in pids.values())
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        _assert_all_gone(wait_for, pids)
    finally:
        parent.kill()
        parent.wait()
        _kill_leftovers(pids)


_CLI_SCRIPT = """
import argparse, sys
from coscheduling.localcluster.commands import add_parser
parser = argparse.ArgumentParser()
add_parser(parser.add_subparsers(required=True))
args = parser.parse_args(sys.argv[1:])
sys.exit(args.func(args))
"""


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run the `localcluster` subcommands as the top-level CLI would, in their own process."""
    return subprocess.run(
        [sys.executable, "-c", _CLI_SCRIPT, "localcluster", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_up_then_down(tmp_path: Path, wait_for: WaitFor) -> None:
    ensure_binaries()
    workdir = tmp_path / "cluster"
    # `up` returns while the cluster keeps running; `down` from another process stops it.
    up = _cli("up", "--workdir", str(workdir))
    pids = _state_pids(workdir) if (workdir / "cluster.json").exists() else {}
    try:
        assert up.returncode == 0, up.stderr
        assert up.stdout.splitlines()[-1] == str(workdir / "kubeconfig")
        assert set(pids) == COMPONENT_NAMES
        assert all(_alive(pid) for pid in pids.values())
        assert _cli("up", "--workdir", str(workdir)).returncode == 1  # already running
        assert _state_pids(workdir) == pids
        down = _cli("down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stderr
        _assert_all_gone(wait_for, pids)
        assert _cli("down", "--workdir", str(tmp_path / "nothing")).returncode == 1
    finally:
        _kill_leftovers(pids)
