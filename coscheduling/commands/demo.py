"""``make demo``: the seed examples on a local control plane, end to end, for a person.

Starts etcd + kube-apiserver + kube-controller-manager (built from Go modules on first use),
creates kubelet-less nodes, starts the scheduler through deploy/start.sh (as a user would),
applies examples/ with kubectl, prints where every pod went or why it waits, checks each
example's expected outcome, and stops everything it started.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import yaml

from coscheduling.api.pods import parse_pod
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.commands.explain import explain
from coscheduling.localcluster import LocalCluster, ensure_binaries
from coscheduling.localcluster.launcher import free_ports

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
NAMESPACES = ("demo-seed000", "demo-seed001", "demo-seed004", "demo-topology",
              "demo-kube-batch", "demo-roles", "demo-dra", "demo-derived")
DRA_DRIVER = "gpu.demo.example.com"
KUBE_BATCH_CRD = "podgroups.scheduling.incubator.k8s.io"
RACK = "example.com/rack"


def _say(text: str = "") -> None:
    print(text, flush=True)


_required: list[Callable[[], None]] = []
"""Checks that the processes the demo relies on still run (each raises if one died): a
wait fails at once with the reason, not a minute later with a timeout."""


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        result = condition()
        if result:
            return result
        for check in _required:
            check()
        time.sleep(0.3)
    raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")


def _node(kube: KubeClient, name: str, cpu: str, labels: dict[str, str],
          gpus: int = 0) -> None:
    resources = {"cpu": cpu, "memory": "64Gi", "pods": "110"}
    if gpus:
        resources["nvidia.com/gpu"] = str(gpus)
    node = kube.create("/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **labels}},
        "status": {"capacity": resources, "allocatable": resources,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "message": "demo node (no kubelet)"}]},
    })
    # No node-lifecycle controller runs (no kubelets), so lift the not-ready taint it would.
    taints = [t for t in (node.get("spec") or {}).get("taints") or ()
              if t.get("key") != "node.kubernetes.io/not-ready"]
    kube.patch(f"/api/v1/nodes/{name}", {"spec": {"taints": taints or None}})


def _apply_example(kubeconfig: Path, example: str) -> None:
    """Apply one file of examples/, saying so as a user would type it."""
    _say(f"== kubectl apply -f examples/{example}")
    _kubectl(kubeconfig, "apply", "-f", str(EXAMPLES / example))


def _kubectl(kubeconfig: Path, *args: str) -> None:
    subprocess.run(["kubectl", "--kubeconfig", str(kubeconfig), *args], check=True,
                   stdout=subprocess.DEVNULL)


def _pods(kube: KubeClient, namespace: str) -> list[dict[str, Any]]:
    items = kube.get(f"/api/v1/namespaces/{namespace}/pods").get("items") or []
    return sorted(items, key=lambda p: p["metadata"]["name"])


def _group_of(pod: dict[str, Any]) -> str:
    """The group a pod names, whichever marker it uses (coscheduling.groups)."""
    return parse_pod(pod).membership.name or "-"


def _job_bound(kube: KubeClient, namespace: str) -> list[str]:
    """The nodes of a namespace's bound pods (a derived gang's pods name no group)."""
    return [p["spec"]["nodeName"] for p in _pods(kube, namespace) if p["spec"].get("nodeName")]


def _bound(kube: KubeClient, namespace: str, group: str) -> list[str]:
    return [p["spec"]["nodeName"] for p in _pods(kube, namespace)
            if _group_of(p) == group and p["spec"].get("nodeName")]


def _why(pod: dict[str, Any]) -> str:
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return str(condition.get("message", ""))
    return "not tried yet"


def _print_state(kube: KubeClient, namespace: str) -> None:
    rows = [["POD", "GROUP", "NODE", "WHY PENDING"]]
    for pod in _pods(kube, namespace):
        group = _group_of(pod)
        node = pod["spec"].get("nodeName") or "-"
        why = "" if node != "-" else _why(pod)
        if len(why) > 110:
            why = why[:107] + "..."
        rows.append([pod["metadata"]["name"], group, node, why])
    api = "batch.scheduler.tencent.com/v1"
    if namespace == "demo-kube-batch":
        api = "scheduling.incubator.k8s.io/v1alpha1"
    groups = kube.get(f"/apis/{api}/namespaces/{namespace}/podgroups")
    _say(f"  pods in {namespace}:")
    _table(rows)
    grows = [["PODGROUP", "PHASE", "MINMEMBER", "SCHEDULED/RUNNING", "CONDITION"]]
    for group in groups.get("items") or ():
        status = group.get("status") or {}
        conditions = status.get("conditions") or []
        latest: dict[str, Any] = next(
            (c for c in conditions if c.get("status") == "True"), {})
        note = f"{latest.get('type')}: {latest.get('message', '')}" if latest else ""
        if len(note) > 100:
            note = note[:97] + "..."
        grows.append([group["metadata"]["name"], status.get("phase", "-"),
                      str(group["spec"]["minMember"]),
                      str(status.get("scheduled", status.get("running", 0))), note])
    _table(grows)
    _say()


def _table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        _say("    " + "  ".join(c.ljust(widths[i]) for i, c in enumerate(row)).rstrip())


class Demo:
    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.cluster = LocalCluster(workdir / "cluster", binaries=ensure_binaries(log=_say),
                                    log=_say)
        self.results: list[tuple[str, bool, str]] = []
        self.env = {**os.environ, "COSCHEDULING_STATE_DIR": str(workdir / "scheduler")}

    def check(self, name: str, ok: bool, detail: str) -> None:
        self.results.append((name, ok, detail))
        _say(f"  {'PASS' if ok else 'FAIL'}  {name}: {detail}")

    def run(self) -> int:
        _say("== starting a local control plane (etcd, kube-apiserver, kube-controller-manager)")
        self.cluster.start()
        kubeconfig = self.cluster.kubeconfig
        kube = KubeClient(ClientSettings(kubeconfig=str(kubeconfig), qps=100, burst=200))
        try:
            self._nodes(kube)
            _say(f"== kubectl apply -f crd/compat/{KUBE_BATCH_CRD}.yaml (kube-batch's PodGroup)")
            _kubectl(kubeconfig, "apply", "-f", str(REPO / "crd" / "compat" /
                                                    f"{KUBE_BATCH_CRD}.yaml"))
            _kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s",
                     f"crd/{KUBE_BATCH_CRD}")
            _say("== starting the scheduler: deploy/start.sh --background "
                 "--config examples/binpack-config.yaml (metrics on a free port, gRPC on a "
                 "Unix socket only this user can open)")
            config = self._config_on_a_free_port()
            subprocess.run([str(REPO / "deploy" / "start.sh"), "--kubeconfig", str(kubeconfig),
                            "--config", str(config), "--background",
                            "--grpc-socket", str(self.workdir / "grpc.sock")],
                           check=True, env=self.env)
            _required.append(self._scheduler_running)
            self._examples(kube, kubeconfig)
        finally:
            with contextlib.suppress(ValueError):
                _required.remove(self._scheduler_running)
            subprocess.run([str(REPO / "deploy" / "start.sh"), "stop"], env=self.env,
                           check=False)
            kube.close()
            self.cluster.stop()
        failed = [name for name, ok, _ in self.results if not ok]
        _say(f"== {len(self.results) - len(failed)}/{len(self.results)} expected outcomes seen"
             + (f"; FAILED: {', '.join(failed)}" if failed else ""))
        return 1 if failed else 0

    def _config_on_a_free_port(self) -> Path:
        """examples/binpack-config.yaml with its metrics on a free port: the default may be
        taken on a shared machine."""
        (metrics_port,) = free_ports(1)
        doc = yaml.safe_load((EXAMPLES / "binpack-config.yaml").read_text())
        doc["metricsBindAddress"] = f"127.0.0.1:{metrics_port}"
        config = self.workdir / "binpack-config.yaml"
        config.write_text(yaml.safe_dump(doc, sort_keys=False))
        return config

    def _scheduler_running(self) -> None:
        state = Path(self.env["COSCHEDULING_STATE_DIR"])
        # start.sh detached it, so it is not our child: /proc tells whether it still runs.
        pid = int((state / "scheduler.pid").read_text())
        if not Path(f"/proc/{pid}").exists() or \
                Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
            log = (state / "scheduler.log").read_text().strip().splitlines()[-5:]
            raise RuntimeError("the scheduler exited; the end of its log:\n  "
                               + "\n  ".join(log))

    def _nodes(self, kube: KubeClient) -> None:
        _say("== creating nodes (API objects, no kubelets)")
        _node(kube, "seed000-a", "3", {"demo": "seed000"})
        _node(kube, "seed000-b", "2", {"demo": "seed000"})
        _node(kube, "seed001-a", "8", {"demo": "seed001"})
        _node(kube, "kube-batch-a", "3", {"demo": "kube-batch"})
        _node(kube, "kube-batch-b", "2", {"demo": "kube-batch"})
        _node(kube, "seed004-a", "8", {"demo": "seed004"}, gpus=4)
        _node(kube, "seed004-b", "8", {"demo": "seed004"}, gpus=4)
        for name, cpu, rack in (("rack1-a", "4", "r1"), ("rack1-b", "4", "r1"),
                                ("rack2-a", "8", "r2"), ("rack2-b", "8", "r2")):
            _node(kube, name, cpu, {"demo": "topology", RACK: rack})
        _node(kube, "roles-a", "5", {"demo": "roles"})
        for name in ("dra-a", "dra-b"):
            _node(kube, name, "8", {"demo": "dra"})
        _node(kube, "derived-a", "2", {"demo": "derived"})
        _node(kube, "derived-b", "1", {"demo": "derived"})
        _say("   seed000-a 3 cpu, seed000-b 2 cpu (kube-batch-a/b the same) | "
             "seed001-a 8 cpu (0.9 used) | "
             "seed004-a/b 8 cpu + 4 nvidia.com/gpu each\n"
             f"   topology: {RACK}=r1 two 4-cpu nodes, {RACK}=r2 two 8-cpu nodes | "
             "roles-a 5 cpu | dra-a, dra-b 8 cpu (GPUs through DRA) | "
             "derived-a 2 cpu, derived-b 1 cpu")

    def _examples(self, kube: KubeClient, kubeconfig: Path) -> None:
        _kubectl(kubeconfig, "apply", "-f", str(EXAMPLES / "namespaces.yaml"))
        for namespace in NAMESPACES:
            _wait(partial(_has_default_sa, kube, namespace), 60,
                  f"the default ServiceAccount of {namespace}")
        kube.create("/api/v1/namespaces/demo-seed001/pods", {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "system-load"},
            "spec": {"nodeName": "seed001-a", "containers": [
                {"name": "load", "image": "pause",
                 "resources": {"requests": {"cpu": "900m", "memory": "140Mi"}}}]}})
        for example in ("seed000-job.yaml", "seed001-race.yaml", "seed004-binpack.yaml",
                        "seed000-kube-batch.yaml"):
            _apply_example(kubeconfig, example)

        _say("\n== seed 000: a Job of 6 pods, PodGroup minMember 6, 5 cpu in its nodes")
        _wait(lambda: len(_pods(kube, "demo-seed000")) == 6, 60, "the Job's 6 pods")
        _wait(lambda: all("cannot be placed" in _why(p) for p in _pods(kube, "demo-seed000"))
              and "cannot be placed" in _group_note(kube, "demo-seed000", "qj-1"),
              60, "the scheduler's verdict on the gang and every member")
        _print_state(kube, "demo-seed000")
        self.check("seed000 waits whole", not _bound(kube, "demo-seed000", "qj-1"),
                   f"{len(_bound(kube, 'demo-seed000', 'qj-1'))}/6 bound with room for 5")
        _say("   adding node seed000-c (1 cpu)...")
        _node(kube, "seed000-c", "1", {"demo": "seed000"})
        self._expect("seed000 runs whole once it fits",
                     lambda: len(_bound(kube, "demo-seed000", "qj-1")) == 6, "6/6 bound")
        _settled(kube, "demo-seed000", "qj-1", 6)
        _print_state(kube, "demo-seed000")

        _say("== seed 001: two gangs of 5 x 1 cpu race for 7.1 free cpu")
        self._expect("seed001 exactly one gang runs, whole",
                     lambda: sorted([len(_bound(kube, "demo-seed001", "group1")),
                                     len(_bound(kube, "demo-seed001", "group2"))]) == [0, 5],
                     "one gang 5/5 bound, the other 0/5")
        winner = "group1" if _bound(kube, "demo-seed001", "group1") else "group2"
        loser = "group2" if winner == "group1" else "group1"
        _settled(kube, "demo-seed001", winner, 5)
        _wait(lambda: "cannot be placed" in _group_note(kube, "demo-seed001", loser), 30,
              "the losing gang's verdict")
        _print_state(kube, "demo-seed001")

        _say("== seed 004: binpack (RequestedToCapacityRatio on cpu and nvidia.com/gpu)")
        self._expect("seed004 gang packed on one node",
                     lambda: len(_bound(kube, "demo-seed004", "tf-smoke-gpu")) == 5
                     and len(set(_bound(kube, "demo-seed004", "tf-smoke-gpu"))) == 1,
                     "5/5 bound on a single node")
        _settled(kube, "demo-seed004", "tf-smoke-gpu", 5)
        _print_state(kube, "demo-seed004")
        self._kube_batch(kube)
        self._topology(kube, kubeconfig)
        self._roles(kube, kubeconfig)
        self._dra(kube, kubeconfig)
        self._derived(kube, kubeconfig)

    def _derived(self, kube: KubeClient, kubeconfig: Path) -> None:
        """A plain Job, no PodGroup written: the gang is derived from it."""
        namespace, group = "demo-derived", "job-train"
        _say("== a plain Job of 4 pods, no PodGroup, no group label, room for 3: the gang is "
             "derived from the Job")
        _apply_example(kubeconfig, "derived-job.yaml")
        with contextlib.suppress(TimeoutError):  # the check below names what is missing
            _wait(lambda: len(_pods(kube, namespace)) == 4
                  and all("cannot be placed" in _why(p) for p in _pods(kube, namespace)),
                  60, "the verdict on every pod of the derived gang")
        path = f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups/{group}"
        try:
            owners = kube.get(path)["metadata"].get("ownerReferences") or [{}]
        except ApiError:  # not derived: the check below says so
            owners = [{}]
        self.check("a plain Job waits whole as the gang derived from it",
                   not _job_bound(kube, namespace)
                   and (owners[0].get("kind"), owners[0].get("name")) == ("Job", "train"),
                   f"{len(_job_bound(kube, namespace))}/4 bound with room for 3; PodGroup "
                   f"{group} owned by {owners[0].get('kind')} {owners[0].get('name')}")
        _print_state(kube, namespace)
        _say("   adding node derived-c (1 cpu)...")
        _node(kube, "derived-c", "1", {"demo": "derived"})
        self._expect("the derived gang runs whole once it fits",
                     lambda: len(_job_bound(kube, namespace)) == 4, "4/4 bound")
        _settled(kube, namespace, group, 4)
        _print_state(kube, namespace)

    def _dra(self, kube: KubeClient, kubeconfig: Path) -> None:
        """A gang of GPU workers on devices published through DRA (as a driver would)."""
        _say("== DRA: publishing ResourceSlices of gpu.demo.example.com (dra-a 3 GPUs of "
             "80Gi, dra-b 1), as a GPU driver would")
        for node, count in (("dra-a", 3), ("dra-b", 1)):
            kube.create("/apis/resource.k8s.io/v1/resourceslices", _gpu_slice(node, count))
        _apply_example(kubeconfig, "dra-gpu-gang.yaml")
        self._expect("DRA gang of 4 runs on 3 + 1 devices, one claim per worker",
                     lambda: sorted(_bound(kube, "demo-dra", "gpu-train"))
                     == ["dra-a", "dra-a", "dra-a", "dra-b"] and _allocated(kube) == 4,
                     "4/4 bound: 3 on dra-a, 1 on dra-b; 4 claims allocated, 4 devices")
        _settled(kube, "demo-dra", "gpu-train", 4)
        _say(explain(kube, "demo-dra", "gpu-train"))

    def _kube_batch(self, kube: KubeClient) -> None:
        namespace = "demo-kube-batch"
        _say("== seed 000 as kube-batch's tutorial wrote it: its PodGroup, the annotation "
             "scheduling.k8s.io/group-name, schedulerName kube-batch; 5 cpu for 6 pods")
        _wait(lambda: len(_pods(kube, namespace)) == 6, 60, "the Job's 6 pods")
        with contextlib.suppress(TimeoutError):  # the check below names what is missing
            _wait(lambda: all("cannot be placed" in _why(p) for p in _pods(kube, namespace)),
                  60, "the scheduler's verdict on every member")
        self.check("kube-batch gang waits whole", not _bound(kube, namespace, "qj-1")
                   and all("cannot be placed" in _why(p) for p in _pods(kube, namespace)),
                   f"{len(_bound(kube, namespace, 'qj-1'))}/6 bound with room for 5")
        _print_state(kube, namespace)
        _say("   adding node kube-batch-c (1 cpu)...")
        _node(kube, "kube-batch-c", "1", {"demo": "kube-batch"})
        self._expect("kube-batch gang runs whole once it fits, status in kube-batch's shape",
                     lambda: len(_bound(kube, namespace, "qj-1")) == 6
                     and _kube_batch_phase(kube, namespace, "qj-1") == "Running",
                     "6/6 bound; its PodGroup's phase Running")
        _print_state(kube, namespace)

    def _topology(self, kube: KubeClient, kubeconfig: Path) -> None:
        _say("== topology: gangs placed whole inside one rack (spec.topology, Required)")
        _apply_example(kubeconfig, "topology-train.yaml")
        self._expect("topology gang lands in the one rack that holds it",
                     lambda: len(_bound(kube, "demo-topology", "train")) == 4
                     and set(_bound(kube, "demo-topology", "train")) <= {"rack2-a", "rack2-b"},
                     f"4/4 bound, all in {RACK}=r2")
        _settled(kube, "demo-topology", "train", 4)
        _apply_example(kubeconfig, "topology-eval.yaml")
        with contextlib.suppress(TimeoutError):  # the check below names what is missing
            _wait(lambda: "topology Required" in _group_note(kube, "demo-topology", "eval")
                  and all("topology Required" in _why(p)
                          for p in _pods(kube, "demo-topology") if p["metadata"]["name"]
                          .startswith("eval-")),
                  60, "the verdict on the gang that fits no rack and on every member")
        note = _group_note(kube, "demo-topology", "eval")
        self.check("topology gang that fits no rack waits whole and says why",
                   not _bound(kube, "demo-topology", "eval") and "topology Required" in note,
                   f"{len(_bound(kube, 'demo-topology', 'eval'))}/5 bound; {note or 'no verdict'}")
        _print_state(kube, "demo-topology")

    def _roles(self, kube: KubeClient, kubeconfig: Path) -> None:
        namespace, group = "demo-roles", "tf-ps-worker"
        _say("== per-role minimums (spec.subGroups): ps 1 and worker 4, room for 5 pods, "
             "only 3 workers created")
        _apply_example(kubeconfig, "roles-ps-worker.yaml")
        with contextlib.suppress(TimeoutError):  # the check below names what is missing
            _wait(lambda: "worker 3/4" in _group_note(kube, namespace, group)
                  and len(_pods(kube, namespace)) == 4
                  and all("worker 3/4" in _why(p) for p in _pods(kube, namespace)),
                  60, "the verdict naming the short role, on the gang and every member")
        note = _group_note(kube, namespace, group)
        self.check("ps/worker gang waits for its 4th worker, naming the role",
                   not _bound(kube, namespace, group) and "worker 3/4" in note,
                   f"{len(_bound(kube, namespace, group))}/4 bound; {note or 'no verdict'}")
        _print_state(kube, namespace)
        _apply_example(kubeconfig, "roles-ps-worker-4th.yaml")
        self._expect("ps/worker gang runs whole once every role has its minimum",
                     lambda: len(_bound(kube, namespace, group)) == 5, "5/5 bound")
        _settled(kube, namespace, group, 5)
        _print_state(kube, namespace)

    def _expect(self, name: str, condition: Callable[[], bool], detail: str) -> None:
        try:
            _wait(condition, 60, name)
        except TimeoutError:
            self.check(name, False, f"not seen within 60s: {detail}")
            return
        self.check(name, True, detail)


def _gpu_slice(node: str, count: int) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-gpus"},
            "spec": {"driver": DRA_DRIVER, "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": f"gpu{i}", "attributes": {"model": {"string": "h100"}},
                                  "capacity": {"memory": {"value": "80Gi"}}}
                                 for i in range(count)]}}


def _allocated(kube: KubeClient) -> int:
    """Distinct devices allocated to the demo's claims."""
    claims = kube.get("/apis/resource.k8s.io/v1/namespaces/demo-dra/resourceclaims")
    devices = {(r["pool"], r["device"]) for c in claims.get("items") or ()
               for r in ((c.get("status") or {}).get("allocation") or {}).get(
                   "devices", {}).get("results", [])}
    return len(devices)


def _group_status(kube: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    path = f"/apis/batch.scheduler.tencent.com/v1/namespaces/{namespace}/podgroups/{name}"
    return dict(kube.get(path).get("status") or {})


def _group_note(kube: KubeClient, namespace: str, name: str) -> str:
    conditions = _group_status(kube, namespace, name).get("conditions") or []
    return " ".join(str(c.get("message", "")) for c in conditions)


def _settled(kube: KubeClient, namespace: str, name: str, scheduled: int) -> None:
    """PodGroup status is written at most once a second: wait for it to catch up."""
    _wait(lambda: _group_status(kube, namespace, name).get("scheduled") == scheduled, 30,
          f"the status of {namespace}/{name}")


def _kube_batch_phase(kube: KubeClient, namespace: str, name: str) -> str:
    path = f"/apis/scheduling.incubator.k8s.io/v1alpha1/namespaces/{namespace}/podgroups/{name}"
    return str((kube.get(path).get("status") or {}).get("phase") or "")


def _has_default_sa(kube: KubeClient, namespace: str) -> bool:
    try:
        kube.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
    except ApiError:
        return False
    return True


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="coscheduling-demo-") as tmp:
        return Demo(Path(tmp)).run()


if __name__ == "__main__":
    sys.exit(main())
