"""Pods that really run: kubelets on this machine (the `real_nodes` fixture) start the
containers bound to them, and the pods' phases come from the containers' exit codes.

Every node in this module is real: real-node-1 and real-node-2, labelled
coscheduling.local/real-node=true, each a kubelet over its own containerd and runc. The
pods select them by that label (or name one in spec.nodeName), so no kubelet-less node of
another test could take them.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from coscheduling import GROUP_LABEL
from coscheduling.cluster.client import ClientSettings, KubeClient
from coscheduling.localcluster import LocalCluster, stop_from_state
from coscheduling.localcluster.images import TEST_IMAGE
from coscheduling.localcluster.processes import process_start_time
from coscheduling.localcluster.realnodes import REAL_NODE_LABEL, RealNodes, node_versions
from tests.integration.fixtures import kubectl
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    exists,
    pod_condition,
    podgroups_path,
    wait_until,
)

POD_TIMEOUT = 90.0


def real_pod(name: str, *, exit_code: int, sleep: float, scheduler: str = "",
             node_name: str = "", group: str = "") -> dict[str, Any]:
    """A pod of the test image that sleeps, then exits with `exit_code`, on a real node."""
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "containers": [{
            "name": "main",
            "image": TEST_IMAGE,
            "command": ["sh", "-c", f"sleep {sleep}; exit {exit_code}"],
            "resources": {"requests": {"cpu": "100m", "memory": "16Mi"}},
        }],
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    if node_name:
        spec["nodeName"] = node_name
    labels = {GROUP_LABEL: group} if group else {}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels}, "spec": spec}


def _pod(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return kube.get(f"/api/v1/namespaces/{namespace}/pods/{name}")


def _phase(kube: KubeClient, namespace: str, name: str) -> str:
    return str((_pod(kube, namespace, name).get("status") or {}).get("phase", ""))


def _exit_code(pod: dict[str, Any]) -> int | None:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    terminated = (statuses[0].get("state") or {}).get("terminated") if statuses else None
    return None if terminated is None else int(terminated["exitCode"])


def test_real_nodes_become_ready(real_nodes: RealNodes, kube: KubeClient,
                                 capsys: pytest.CaptureFixture[str]) -> None:
    nodes = kube.get("/api/v1/nodes", labelSelector=f"{REAL_NODE_LABEL}=true")["items"]
    assert sorted(n["metadata"]["name"] for n in nodes) == real_nodes.names == [
        "real-node-1", "real-node-2"]
    versions = node_versions()
    for node in nodes:
        conditions = {c["type"]: c["status"] for c in node["status"]["conditions"]}
        assert conditions["Ready"] == "True", node["status"]["conditions"]
        info = node["status"]["nodeInfo"]
        assert versions["kubelet"].endswith(info["kubeletVersion"])
        assert info["containerRuntimeVersion"].startswith("containerd://")
        taints = [t["key"] for t in node["spec"].get("taints") or []]
        assert taints == [], f"{node['metadata']['name']} keeps taints {taints}"
    with capsys.disabled():
        print(f"\nreal nodes {', '.join(real_nodes.names)}: Ready "
              f"{real_nodes.startup_seconds:.1f}s after start; {versions}", file=sys.stderr)


@pytest.mark.parametrize(("exit_code", "phase"), [(0, "Succeeded"), (1, "Failed")])
def test_pod_phase_follows_the_container_exit_code(
    real_nodes: RealNodes, kube: KubeClient, namespace: str, exit_code: int, phase: str
) -> None:
    node = real_nodes.nodes[exit_code % len(real_nodes.nodes)]
    create_pod(kube, namespace, real_pod("sleeper", exit_code=exit_code, sleep=1,
                                         node_name=node.name))
    wait_until(lambda: _phase(kube, namespace, "sleeper") in ("Succeeded", "Failed"),
               timeout=POD_TIMEOUT, what=f"the pod on {node.name} to end")
    pod = _pod(kube, namespace, "sleeper")
    assert pod["status"]["phase"] == phase
    assert _exit_code(pod) == exit_code, pod["status"]
    address = ipaddress.IPv4Address(pod["status"]["podIP"])
    assert address in ipaddress.IPv4Network(node.subnet), "the pod had no address from CNI"


def _observe_gang(kube: KubeClient, namespace: str, names: list[str], group: str,
                  ) -> tuple[set[str], list[str]]:
    """Poll until every member has ended: the member phases seen together (e.g.
    "Running+Running") and the PodGroup phases in the order they appeared."""
    together: set[str] = set()
    group_phases: list[str] = []
    deadline = time.monotonic() + POD_TIMEOUT
    while time.monotonic() < deadline:
        phases = [_phase(kube, namespace, name) for name in names]
        together.add("+".join(phases))
        status = kube.get(f"{podgroups_path(namespace)}/{group}").get("status") or {}
        if status.get("phase") and status["phase"] not in group_phases[-1:]:
            group_phases.append(status["phase"])
        if all(p in ("Succeeded", "Failed") for p in phases) and group_phases[-1:] == [
                "Finished"]:
            break
        time.sleep(0.2)
    return together, group_phases


def _one_per_node(body: dict[str, Any], group: str) -> dict[str, Any]:
    """No two members of `group` on one node: a node is room for one member."""
    body["spec"]["affinity"] = {"podAntiAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {GROUP_LABEL: group}},
            "topologyKey": "kubernetes.io/hostname"}]}}
    return body


def test_gang_of_real_containers_runs_and_its_podgroup_follows(
    real_nodes: RealNodes, kube: KubeClient, namespace: str, start_scheduler: Any
) -> None:
    sched = start_scheduler()
    create_podgroup(kube, namespace, "pair", 2)
    names = ["pair-0", "pair-1"]
    for name in names:
        # One member per real node: the gang spans both kubelets.
        create_pod(kube, namespace, _one_per_node(
            real_pod(name, exit_code=0, sleep=6, scheduler=sched.name, group="pair"), "pair"))
    together, group_phases = _observe_gang(kube, namespace, names, "pair")
    placed = {_pod(kube, namespace, n)["spec"].get("nodeName") for n in names}
    assert len(placed) == 2 and placed <= set(real_nodes.names), placed
    assert "Running+Running" in together, together
    assert [_phase(kube, namespace, n) for n in names] == ["Succeeded", "Succeeded"]
    assert "Running" in group_phases and group_phases[-1] == "Finished", group_phases
    status = kube.get(f"{podgroups_path(namespace)}/pair")["status"]
    assert status.get("succeeded") == 2, status


def test_a_node_added_later_runs_pods_too(real_nodes: RealNodes, kube: KubeClient,
                                          namespace: str) -> None:
    """A running set of real nodes grows by one: real-node-3 is Ready and runs a pod."""
    [added] = real_nodes.add(1)
    assert added.name == "real-node-3"
    assert real_nodes.names == ["real-node-1", "real-node-2", "real-node-3"]
    create_pod(kube, namespace, real_pod("late", exit_code=0, sleep=0, node_name=added.name))
    wait_until(lambda: _phase(kube, namespace, "late") == "Succeeded", timeout=POD_TIMEOUT,
               what="the pod on the added node to succeed")


def test_a_gang_runs_all_or_nothing_then_all_once_a_node_is_added(
    real_nodes: RealNodes, kube: KubeClient, namespace: str, start_scheduler: Any
) -> None:
    """Room for 3 of 4 members (one per node, three real nodes): none is bound and no
    container starts; a fourth node is added: all four run, end, and the PodGroup's phase
    follows them to Finished."""
    if len(real_nodes.nodes) < 3:
        real_nodes.add(3 - len(real_nodes.nodes))
    assert len(real_nodes.nodes) == 3, real_nodes.names
    sched = start_scheduler()
    create_podgroup(kube, namespace, "four", 4)
    names = [f"four-{i}" for i in range(4)]
    for name in names:
        create_pod(kube, namespace, _one_per_node(
            real_pod(name, exit_code=0, sleep=3, scheduler=sched.name, group="four"), "four"))
    wait_until(lambda: all(pod_condition(kube, namespace, n, "PodScheduled").get("reason")
                           == "Unschedulable" for n in names),
               timeout=POD_TIMEOUT, what="every member to be found unschedulable")
    time.sleep(2)  # a partial bind or a started container would show by now
    assert [_pod(kube, namespace, n)["spec"].get("nodeName") for n in names] == [None] * 4
    assert {_phase(kube, namespace, n) for n in names} == {"Pending"}
    real_nodes.add(1)
    together, group_phases = _observe_gang(kube, namespace, names, "four")
    placed = {_pod(kube, namespace, n)["spec"].get("nodeName") for n in names}
    assert placed == set(real_nodes.names), placed
    assert "+".join(["Running"] * 4) in together, together
    assert [_phase(kube, namespace, n) for n in names] == ["Succeeded"] * 4
    assert group_phases[-1] == "Finished", group_phases


def _port_forward(cluster: LocalCluster, namespace: str, target: str, port: int,
                  ) -> Iterator[int]:
    """`kubectl port-forward` to `port` of `target` (pod/NAME, service/NAME) from a free
    local port, until closed."""
    process = subprocess.Popen(
        ["kubectl", "--kubeconfig", str(cluster.kubeconfig), "-n", namespace, "port-forward",
         target, f":{port}"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "Forwarding from 127.0.0.1:NNNNN -> 8080"
        assert line.startswith("Forwarding from 127.0.0.1:"), (
            line, process.stderr.read() if process.poll() is not None else "")
        yield int(line.split(":")[1].split()[0])
    finally:
        process.terminate()
        process.wait(timeout=10)


def test_logs_exec_and_port_forward_reach_a_container_on_a_real_node(
    real_nodes: RealNodes, local_cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """The API server dials the kubelet (at the node's InternalIP, checking its serving
    certificate) for the container's log, a command run in it, and a forwarded port."""
    body = real_pod("web", exit_code=0, sleep=0, node_name=real_nodes.names[-1])
    body["spec"]["containers"][0]["command"] = ["sh", "-c",
        "echo log line from a real node; mkdir /www; echo served by busybox > /www/index.html; "
        "exec httpd -f -p 8080 -h /www"]
    create_pod(kube, namespace, body)
    wait_until(lambda: _phase(kube, namespace, "web") == "Running", timeout=POD_TIMEOUT,
               what="the web server's container to run")
    logs = kubectl(local_cluster, "-n", namespace, "logs", "web")
    assert logs.stdout == "log line from a real node\n", logs
    executed = kubectl(local_cluster, "-n", namespace, "exec", "web", "--", "cat",
                       "/www/index.html")
    assert executed.stdout == "served by busybox\n", executed
    with contextlib.contextmanager(_port_forward)(local_cluster, namespace, "pod/web",
                                                  8080) as local_port:
        url = f"http://127.0.0.1:{local_port}/index.html"
        with urllib.request.urlopen(url, timeout=30) as response:
            assert response.read() == b"served by busybox\n"


def _coscheduling(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "coscheduling", *argv], capture_output=True,
                          text=True, timeout=300, check=False)


def test_localcluster_up_with_a_real_node_then_down() -> None:
    """The command line: `up --real-nodes 1` leaves a Ready kubelet running (recorded in
    cluster.json) after it returns; `down`, from another process, stops it with the rest."""
    workdir = Path(tempfile.mkdtemp(prefix="cs-rn-", dir="/tmp"))  # short socket paths
    try:
        up = _coscheduling("localcluster", "up", "--workdir", str(workdir), "--real-nodes", "1")
        assert up.returncode == 0, up.stderr
        [node] = json.loads((workdir / "cluster.json").read_text())["real_nodes"]
        pids = [record["pid"] for record in node["processes"].values()]
        assert sorted(node["processes"]) == ["containerd", "kubelet"]
        assert all(process_start_time(pid) is not None for pid in pids)
        client = KubeClient(ClientSettings(kubeconfig=str(workdir / "kubeconfig")))
        try:
            conditions = client.get("/api/v1/nodes/real-node-1")["status"]["conditions"]
        finally:
            client.close()
        assert {c["type"]: c["status"] for c in conditions}["Ready"] == "True"
        down = _coscheduling("localcluster", "down", "--workdir", str(workdir))
        assert down.returncode == 0, down.stderr
        assert "stopped real node real-node-1" in down.stderr
        assert [pid for pid in pids if process_start_time(pid) is not None] == []
        assert str(workdir) not in Path("/proc/self/mountinfo").read_text()
    finally:
        if (workdir / "cluster.json").is_file():
            stop_from_state(workdir)
        shutil.rmtree(workdir, ignore_errors=True)


def _processes_naming(text: str) -> list[int]:
    """Pids of live processes whose command line holds `text` (a node's socket names its
    shims; a container's command names its processes)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if text.encode() in (entry / "cmdline").read_bytes() \
                        and process_start_time(int(entry.name)) is not None:
                    found.append(int(entry.name))
    return found


def test_stopping_real_nodes_leaves_nothing_behind(
    real_nodes: RealNodes, local_cluster: LocalCluster, kube: KubeClient, namespace: str
) -> None:
    """Last in this module on purpose: it stops the module's nodes while a container runs,
    then finds no process, shim, mount, log link or Node object of theirs."""
    create_pod(kube, namespace, real_pod("long", exit_code=0, sleep=600,
                                         node_name=real_nodes.names[0]))
    wait_until(lambda: _phase(kube, namespace, "long") == "Running", timeout=POD_TIMEOUT,
               what="a long-running container")
    records = real_nodes.records()
    pids = [p["pid"] for r in records for p in r["processes"].values()]
    assert len(pids) == 2 * len(records), records
    assert _processes_naming(records[0]["socket"]), "no shim runs the container"
    assert _processes_naming("sleep 600; exit 0"), "the container's process is not running"
    local_cluster.stop_real_nodes()
    assert [pid for pid in pids if process_start_time(pid) is not None] == []
    assert _processes_naming("sleep 600; exit 0") == [], "a container outlived its node"
    mounts = Path("/proc/self/mountinfo").read_text()
    for record in records:
        assert _processes_naming(record["socket"]) == [], "a shim outlived its node"
        assert record["directory"] not in mounts
        assert not exists(kube, f"/api/v1/nodes/{record['name']}")
    links = [os.readlink(link) for link in Path("/var/log/containers").iterdir()]
    assert not [t for t in links if any(t.startswith(r["directory"]) for r in records)]
