"""Faults: crash recovery, API server and etcd loss, frozen connections, watch expiry,
object churn (issue 8). Every scenario ends with the invariants checked."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import yaml

from coscheduling import GROUP_LABEL
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient, endpoint_for
from coscheduling.cluster.informer import Informer
from coscheduling.localcluster import LocalCluster, ensure_binaries
from tests.integration.kube import (
    PG_API,
    InvariantWatcher,
    bound_count,
    create_pod,
    create_podgroup,
    delete_pod,
    delete_podgroup,
    events_for,
    exists,
    placement,
    pod_body,
    start_waiting_gang,
    wait_until,
)
from tests.integration.proxy import CuttableProxy

# Outage length for the API server and etcd tests (the issue asks for 30 s).
OUTAGE_SECONDS = float(os.environ.get("COSCHEDULING_OUTAGE_SECONDS", "30"))
KILL_POINTS = int(os.environ.get("COSCHEDULING_KILL_POINTS", "20"))
# Releases cut off by COSCHEDULING_FAULT=after-bind:K (`make chaos`: 100).
FAULT_POINTS = int(os.environ.get("COSCHEDULING_FAULT_POINTS", "3"))


def _scheduler_process(kubeconfig: Path, config: Path, log: Path,
                       fault: str = "") -> subprocess.Popen[bytes]:
    env = {**os.environ, "COSCHEDULING_FAULT": fault}
    return subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "run", "--kubeconfig", str(kubeconfig),
         "--config", str(config), "--address", "127.0.0.1:0"], stdout=log.open("ab"),
        stderr=subprocess.STDOUT, env=env)


def _fault_points(count: int) -> list[tuple[int, int]]:
    """(gang size, binds before the crash): a few fixed points, then seeded random ones."""
    fixed = [(2, 1), (4, 2), (5, 4)]
    rng = random.Random(13)
    extra = [(size, rng.randint(1, size - 1)) for size in
             (rng.randint(2, 8) for _ in range(max(0, count - len(fixed))))]
    return (fixed + extra)[:count]


def test_a_release_killed_after_k_binds_is_completed_before_any_other_gang(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        make_node: Any, tmp_path: Path) -> None:
    """COSCHEDULING_FAULT=after-bind:K kills the scheduler right after the K-th bind of a
    gang's release (binding one at a time). The API server then holds a partially bound
    gang. A rival gang that sorts first (same age, earlier name) arrives, on a node with room
    for either the victim's rest or the rival but not both: the restarted scheduler must
    complete the victim, so the rival stays pending."""
    name = f"fault-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": name, "bindingParallelism": 1,
        "metricsBindAddress": "127.0.0.1:0", "podInitialBackoffSeconds": 0.2,
        "podMaxBackoffSeconds": 1}))
    log = tmp_path / "scheduler.log"
    met = repaired = 0
    points = _fault_points(FAULT_POINTS)
    for index, (size, k) in enumerate(points):
        node, victim, rival = f"fault-{index}", f"b-victim-{index}", f"a-rival-{index}"
        make_node(node, cpu=str(size + 1))  # room for the victim and 1 cpu; the rival needs 2
        create_podgroup(kube, namespace, rival, 2)
        create_podgroup(kube, namespace, victim, size)
        for i in range(size):
            create_pod(kube, namespace, pod_body(f"{victim}-{i}", scheduler=name, group=victim))
        crashed = _scheduler_process(local_cluster.kubeconfig, config, log, f"after-bind:{k}")
        try:
            code = crashed.wait(timeout=120)
        finally:
            crashed.kill()
            crashed.wait(10)
        assert code == 137, _diagnose(kube, namespace, {victim: size}, log)
        bound = bound_count(kube, namespace, victim)
        assert bound == k, f"point {index}: {bound}/{size} bound after a crash at bind {k}"
        met += 1
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"{rival}-{i}", scheduler=name, group=rival))
        restarted = _scheduler_process(local_cluster.kubeconfig, config, log)
        try:
            try:
                wait_until(lambda v=victim, n=size: bound_count(kube, namespace, v) == n,
                           timeout=120, what=f"point {index}: the partial gang completed")
            except AssertionError:
                raise AssertionError(_diagnose(kube, namespace, {victim: size, rival: 2},
                                               log)) from None
        finally:
            restarted.kill()
            restarted.wait(10)
        assert bound_count(kube, namespace, rival) == 0, f"point {index}: the rival went first"
        repaired += 1
        for pod in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]:
            delete_pod(kube, namespace, pod["metadata"]["name"])
        kube.delete(f"/api/v1/nodes/{node}")
    print(f"\nfault points: {len(points)}; partial gangs met: {met}; completed first: "
          f"{repaired}")
    assert met == repaired == len(points)


def test_kill_minus_nine_at_random_moments_leaves_no_partial_gang(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        make_node: Any, tmp_path: Path) -> None:
    """Kill the scheduler with SIGKILL at KILL_POINTS random moments while gangs are being
    admitted, waiting and bound; restart it each time. At the end every gang is whole."""
    rng = random.Random(8)
    name = f"crash-{uuid.uuid4().hex[:6]}"
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({
        "apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration", "schedulerName": name,
        "metricsBindAddress": "127.0.0.1:0", "podInitialBackoffSeconds": 0.2,
        "podMaxBackoffSeconds": 1}))
    gangs = {f"g{i}": rng.randint(2, 8) for i in range(2 * KILL_POINTS)}
    per_node = -(-sum(gangs.values()) // 4)  # 1-cpu members: 4 nodes hold every gang
    for i in range(4):  # (and as many pods: 100 kill points make ~1000 of them)
        make_node(f"crash-{i}", cpu=str(per_node), pods=max(110, per_node))
    log = tmp_path / "scheduler.log"
    partial_seen = 0
    with InvariantWatcher(kube, [namespace]) as watcher:
        process = _scheduler_process(local_cluster.kubeconfig, config, log)
        try:
            pending = list(gangs.items())
            for _ in range(KILL_POINTS):
                for group, size in pending[:2]:  # keep work arriving between kills
                    create_podgroup(kube, namespace, group, size)
                    for i in range(size):
                        create_pod(kube, namespace, pod_body(f"{group}-{i}", scheduler=name,
                                                             group=group, cpu="1"))
                pending = pending[2:]
                time.sleep(rng.uniform(0.3, 2.0))
                process.send_signal(signal.SIGKILL)
                process.wait(timeout=10)
                bound = _bound_per_group(kube, namespace)  # one LIST, not one per gang
                partial_seen += sum(1 for g, b in bound.items() if 0 < b < gangs[g])
                process = _scheduler_process(local_cluster.kubeconfig, config, log)
            try:
                wait_until(lambda: _bound_per_group(kube, namespace) == gangs,
                           timeout=120, interval=1,
                           what="every gang bound whole after the crashes")
            except AssertionError:
                raise AssertionError(_diagnose(kube, namespace, gangs, log)) from None
        finally:
            process.send_signal(signal.SIGKILL)
            process.wait(timeout=10)
        watcher.check_settled()
    pods = placement(kube, namespace)
    assert len(pods) == sum(gangs.values()) and all(pods.values())
    print(f"{KILL_POINTS} kills; gangs found partially bound right after a kill: "
          f"{partial_seen}; all {len(gangs)} gangs whole at the end; violations: 0")


def _bound_per_group(kube: KubeClient, namespace: str) -> Counter[str]:
    """Bound members per group of the namespace, from one LIST."""
    return Counter(p["metadata"]["labels"][GROUP_LABEL]
                   for p in kube.get(f"/api/v1/namespaces/{namespace}/pods")["items"]
                   if p["spec"].get("nodeName") and GROUP_LABEL in
                   (p["metadata"].get("labels") or {}))


def _diagnose(kube: KubeClient, namespace: str, gangs: dict[str, int], log: Path) -> str:
    lines = ["gangs not whole after the crashes:"]
    for group, size in gangs.items():
        bound = bound_count(kube, namespace, group)
        if bound != size:
            lines.append(f"  {group}: {bound}/{size} bound")
            for pod in kube.get(f"/api/v1/namespaces/{namespace}/pods",
                                labelSelector=f"group.batch.scheduler.tencent.com={group}"
                                )["items"]:
                conds = [c.get("message", "") for c in pod["status"].get("conditions") or ()
                         if c.get("type") == "PodScheduled"]
                lines.append(f"    {pod['metadata']['name']} node={pod['spec'].get('nodeName')}"
                             f" {conds}")
    lines.append("scheduler log tail:")
    lines += log.read_text(errors="replace").splitlines()[-30:]
    return "\n".join(lines)


def _outage_run(kube: KubeClient, namespace: str, sched: Any, prefix: str,
                during: Any) -> None:
    """Pending gangs, then an outage (``during``), then room: everything gets placed."""
    create_podgroup(kube, namespace, f"{prefix}-g", 3)
    for i in range(3):
        create_pod(kube, namespace, pod_body(f"{prefix}-{i}", scheduler=sched.name,
                                             group=f"{prefix}-g"))
    wait_until(lambda: len(sched.service.scheduler.cache.group_pods(
        f"{namespace}/{prefix}-g")) == 3, what="members seen")
    during()
    assert sched.service.scheduler.alive(), "a scheduler thread died during the outage"


def test_apiserver_and_etcd_outages_and_a_frozen_apiserver(
        local_cluster: LocalCluster, kube: KubeClient, namespace: str, make_node: Any,
        start_scheduler: Any) -> None:
    sched = start_scheduler()
    scheduler = sched.service.scheduler
    for component in ("kube-apiserver", "etcd"):
        prefix = "api" if component == "kube-apiserver" else "etcd"

        def outage(component: str = component) -> None:
            local_cluster.stop_component(component)
            time.sleep(OUTAGE_SECONDS)
            local_cluster.start_component(component)

        _outage_run(kube, namespace, sched, prefix, outage)
        wait_until(lambda: _readyz(local_cluster), timeout=60, what="apiserver ready again")
        make_node(f"outage-{prefix}", cpu="3")
        wait_until(lambda p=prefix: bound_count(kube, namespace, f"{p}-g") == 3, timeout=90,
                   what=f"gang placed after the {component} outage")
    errors_before = sum(i.errors + i.reconnects for i in sched.service.informers)

    def frozen() -> None:
        local_cluster.pause_component("kube-apiserver")
        time.sleep(40)  # longer than the watch read timeout (30 s): the client must notice
        local_cluster.resume_component("kube-apiserver")

    _outage_run(kube, namespace, sched, "frozen", frozen)
    make_node("outage-frozen", cpu="3")
    wait_until(lambda: bound_count(kube, namespace, "frozen-g") == 3, timeout=90,
               what="gang placed after the frozen connection")
    assert sum(i.errors + i.reconnects for i in sched.service.informers) > errors_before, \
        "the dead watches were not noticed"
    sched.watcher.check_settled()
    assert len(scheduler.waiting_pods) == 0


def _readyz(cluster: LocalCluster) -> bool:
    try:
        kube = KubeClient(ClientSettings(kubeconfig=str(cluster.kubeconfig)))
        kube.get("/readyz")
        kube.close()
    except ApiError:
        return False
    return True


class Seen:
    def __init__(self) -> None:
        self.added: list[str] = []
        self.deleted: list[str] = []
        self.updated: list[str] = []

    def on_add(self, pod: Pod) -> None:
        self.added.append(pod.name)

    def on_update(self, old: Pod, new: Pod) -> None:
        self.updated.append(new.name)

    def on_delete(self, pod: Pod) -> None:
        self.deleted.append(pod.name)


def test_watch_expiry_410_relists_and_repairs_the_cache(tmp_path: Path) -> None:
    """A watch resumed from a compacted resourceVersion gets 410 Gone; the informer lists
    again and sends exactly the differences: nothing lost, nothing duplicated."""
    cluster = LocalCluster(tmp_path / "cluster", binaries=ensure_binaries(),
                           controller_manager=False, apiserver_args=["--watch-cache=false"])
    cluster.start()
    try:
        admin = KubeClient(ClientSettings(kubeconfig=str(cluster.kubeconfig)))
        admin.create("/api/v1/namespaces", {"metadata": {"name": "w"}})
        wait_until(lambda: exists(admin, "/api/v1/namespaces/w/serviceaccounts/default")
                   or _create_default_sa(admin), what="default ServiceAccount")
        for name in ("keep", "gone", "changed"):
            create_pod(admin, "w", pod_body(name, scheduler="none"))
        proxy = CuttableProxy(int(admin.host.rsplit(":", 1)[1]))
        settings = ClientSettings(kubeconfig=str(cluster.kubeconfig))
        through = KubeClient(settings, replace(endpoint_for(settings),
                                               host=f"https://127.0.0.1:{proxy.port}"))
        seen = Seen()
        informer = Informer[Pod](through, "/api/v1/namespaces/w/pods", parse_pod,
                                 lambda p: p.key, seen, watch_read_timeout=5, name="w")
        informer.start()
        assert informer.synced.wait(30)
        assert sorted(seen.added) == ["changed", "gone", "keep"]
        proxy.cut()
        delete_pod(admin, "w", "gone")
        admin.patch("/api/v1/namespaces/w/pods/changed", {"metadata": {"labels": {"v": "2"}}})
        for i in range(3):
            create_pod(admin, "w", pod_body(f"new-{i}", scheduler="none"))
        revision = int(admin.get("/api/v1/namespaces/w/pods")["metadata"]["resourceVersion"])
        _compact_etcd(cluster, revision)
        proxy.restore()
        wait_until(lambda: informer.relists >= 2, timeout=60, what="a relist after 410 Gone")
        wait_until(lambda: "gone" in seen.deleted, what="the delete repaired")
        assert sorted(seen.added) == ["changed", "gone", "keep", "new-0", "new-1", "new-2"]
        assert seen.deleted == ["gone"] and "changed" in seen.updated
        assert informer.store["w/changed"].labels.get("v") == "2"
        assert sorted(informer.store) == ["w/changed", "w/keep", "w/new-0", "w/new-1",
                                          "w/new-2"]
        informer.stop()
        proxy.close()
    finally:
        cluster.stop()


def _create_default_sa(kube: KubeClient) -> bool:
    """Without the controller manager nobody creates it; the test does."""
    try:
        kube.create("/api/v1/namespaces/w/serviceaccounts", {"metadata": {"name": "default"}})
    except ApiError:
        return False
    return True


def _compact_etcd(cluster: LocalCluster, revision: int) -> None:
    body = json.dumps({"revision": revision, "physical": True}).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{cluster.etcd_client_port}/v3/kv/compaction", data=body,
        headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200


# -- object churn ---------------------------------------------------------------------------

def _event_says(kube: KubeClient, namespace: str, pod: str, text: str) -> bool:
    return any(text in e.get("message", "") for e in events_for(kube, namespace, pod))


def test_churn_member_node_and_group_deleted_while_waiting(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any) -> None:
    make_node("churn-a", cpu="8")
    sched = start_scheduler(start=False)
    sched.start(loops=False)
    scheduler = sched.service.scheduler

    # A waiting member is deleted: the gang's attempt is undone at once, with an event.
    waiting = start_waiting_gang(kube, namespace, sched, "m")
    delete_pod(kube, namespace, waiting[0])
    wait_until(lambda: len(scheduler.waiting_pods) == 0, what="siblings rejected")
    wait_until(lambda: _event_says(kube, namespace, waiting[1], "was deleted"),
               what="a rejection event naming the deletion")
    assert bound_count(kube, namespace, "m") == 0

    # The node under waiting members is deleted: rejected, room released, event.
    make_node("churn-b", cpu="8")
    waiting = start_waiting_gang(kube, namespace, sched, "n")
    node = scheduler.waiting_pods.get(f"{namespace}/{waiting[0]}").node_name  # type: ignore[union-attr]
    kube.delete(f"/api/v1/nodes/{node}")
    wait_until(lambda: len(scheduler.waiting_pods) == 0, what="members on the node rejected")
    wait_until(lambda: _event_says(kube, namespace, waiting[0], f"node {node} was deleted"),
               what="an event naming the node")
    assert bound_count(kube, namespace, "n") == 0

    # The PodGroup is deleted while members wait.
    waiting = start_waiting_gang(kube, namespace, sched, "p")
    delete_podgroup(kube, namespace, "p")
    wait_until(lambda: len(scheduler.waiting_pods) == 0, what="members rejected")
    wait_until(lambda: _event_says(kube, namespace, waiting[0], "was deleted"),
               what="an event naming the deleted PodGroup")
    assert bound_count(kube, namespace, "p") == 0
    for _ in range(5):
        scheduler.schedule_one(timeout=0.5)
    assert bound_count(kube, namespace, "p") == 0
    sched.watcher.check_settled()
    with scheduler.cache.lock:
        leftovers = [info.name for info in scheduler.cache.nodes() if info.claims]
    assert not leftovers, f"claims left on {leftovers}"


def test_churn_min_member_lowered_and_raised_while_waiting(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any) -> None:
    make_node("mm-a", cpu="8")
    sched = start_scheduler(start=False)
    sched.start(loops=False)
    scheduler = sched.service.scheduler
    path = f"/apis/{PG_API}/namespaces/{namespace}/podgroups"

    waiting = start_waiting_gang(kube, namespace, sched, "low", size=4)  # 3 waiting, 1 pending
    delete_pod(kube, namespace, ({f"low-{i}" for i in range(4)} - set(waiting)).pop())
    kube.patch(f"{path}/low", {"spec": {"minMember": 3}})
    wait_until(lambda: bound_count(kube, namespace, "low") == 3, what="released at 3")

    create_podgroup(kube, namespace, "high", 2)
    for i in range(3):
        create_pod(kube, namespace, pod_body(f"high-{i}", scheduler=sched.name, group="high"))
    wait_until(lambda: len(scheduler.cache.group_pods(f"{namespace}/high")) == 3,
               what="members seen")
    scheduler.schedule_one(timeout=5)
    assert len(scheduler.waiting_pods) == 1
    kube.patch(f"{path}/high", {"spec": {"minMember": 3}})
    wait_until(lambda: scheduler.listers.podgroup(f"{namespace}/high").min_member == 3,  # type: ignore[union-attr]
               what="the raise seen")
    scheduler.start_loops()
    wait_until(lambda: bound_count(kube, namespace, "high") == 3, what="released at 3 of 3")
    sched.watcher.check_settled()


def test_gang_left_partially_bound_is_completed_first(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any) -> None:
    """As after a crash mid-release: 2 of 4 members of "partial" are bound, 2 pending. An
    older gang "other" wants the same 4 free cpu. The partial gang is completed first."""
    make_node("partial-a", cpu="6")
    name = f"partial-{uuid.uuid4().hex[:6]}"
    # "other" is no younger (creation times have 1 s resolution) and its name sorts first,
    # so the queue's order without the partial-gang rule would put it first.
    create_podgroup(kube, namespace, "other", 4)
    create_podgroup(kube, namespace, "partial", 4)
    for i in range(4):
        create_pod(kube, namespace, pod_body(f"other-{i}", scheduler=name, group="other"))
        created = create_pod(kube, namespace, pod_body(f"partial-{i}", scheduler=name,
                                                       group="partial"))
        if i < 2:
            kube.bind(namespace, f"partial-{i}", created["metadata"]["uid"], "partial-a")
    wait_until(lambda: bound_count(kube, namespace, "partial") == 2, what="the setup")
    sched = start_scheduler({"schedulerName": name})
    wait_until(lambda: bound_count(kube, namespace, "partial") == 4,
               what="the partial gang completed")
    for _ in range(10):
        sched.service.scheduler.schedule_one(timeout=0.2)
    assert bound_count(kube, namespace, "other") == 0
    sched.watcher.check_settled()
