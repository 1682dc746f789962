"""`make bench`: every workload against the ceiling, upstream and ours, on fresh clusters.

For each (workload, contender): start a new local control plane, create the nodes (and
PodGroups), start the contender, wait until it binds a probe pod (its caches are synced),
then create the workload's pods as fast as the API server takes them and record every bind
through a watch. Results go to bench-results/<timestamp>/ (results.json, results.md, a
chart); a full-scale run also refreshes bench/RESULTS.md.

Exit status: 1 if a scheduler left a partial gang or over-committed a node, 3 if a run did
not finish (not every pod bound in W1, W2 or W4), else 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
import traceback
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench import dra, native, report, upstream, w8
from bench.cluster import (
    BENCH_GANG_LABEL,
    NAMESPACE,
    OUR_CRD,
    OUR_QUEUE_CRD,
    ZONES,
    admin_client,
    apply_crds,
    constrain,
    create_namespace,
    create_nodes,
    create_priority_classes,
    create_queues,
    join_gang,
    pod_body,
    podgroup_body,
    zone_of,
)
from bench.fastclient import FastClient
from bench.observe import (
    ALGORITHM_HISTOGRAM,
    HISTOGRAM,
    PODGROUP_ALGORITHM_HISTOGRAM,
    PODGROUP_HISTOGRAM,
    BindRecorder,
    EventRecorder,
    ProcessMonitor,
    api_writes,
    attempt_buckets,
    event_lags,
    fetch_metrics,
    histogram_quantile,
    histogram_totals,
    sample_process,
    subtract,
    writes_delta,
)
from bench.schedulers import Contender, Process, Profiler, contenders
from bench.workloads import (
    PRIORITY_CLASSES,
    QUEUE_WEIGHTS,
    SLOTS_PER_NODE,
    TRICKLE_RATE,
    TRICKLE_WINDOW,
    Workload,
    build_workloads,
    deserved_slots,
)
from coscheduling.api.nodes import parse_node
from coscheduling.api.pods import parse_pod
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.config import SchedulerConfig
from coscheduling.localcluster import Binaries, LocalCluster, ensure_binaries
from coscheduling.localcluster.build import KUBERNETES_VERSION, binary_dirs

REPO = Path(__file__).resolve().parents[1]
RESULTS_COPY = REPO / "bench" / "RESULTS.md"
PROBE = "probe"
# W9: the resource-claim controller makes every member's claim; at its default client limits
# (20 QPS) it, not the scheduler, would set the pace, for every contender alike.
CONTROLLER_LIMITS = ("--kube-api-qps=1000", "--kube-api-burst=2000")
HARNESS_WRITES = ("POST pods",)  # the creator's; no scheduler creates a pod
CREATORS = 32
READY_TIMEOUT = 180.0
# A Scheduled event is on time when the harness sees it within this long of the bind.
EVENT_DEADLINE = 1.0


def control_plane_binaries() -> Binaries:
    """The cached control plane. Built (once, under the build's own lock) only when a
    server program is missing: kube-scheduler is needed by the native contender alone."""
    kube_dir, etcd_dir = binary_dirs()
    binaries = Binaries(etcd=etcd_dir / "etcd", kube_apiserver=kube_dir / "kube-apiserver",
                        kube_controller_manager=kube_dir / "kube-controller-manager",
                        kube_scheduler=kube_dir / "kube-scheduler")
    if all(path.is_file() for path in (binaries.etcd, binaries.kube_apiserver,
                                       binaries.kube_controller_manager)):
        return binaries
    return ensure_binaries()


def log(message: str) -> None:
    print(f"[bench {datetime.now().strftime('%H:%M:%S')}] {message}", file=sys.stderr,
          flush=True)


def machine() -> dict[str, Any]:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = next((line.split(":", 1)[1].strip() for line in cpuinfo.splitlines()
                  if line.startswith("model name")), platform.processor() or "unknown")
    meminfo = Path("/proc/meminfo").read_text().split()
    mem_gib = int(meminfo[meminfo.index("MemTotal:") + 1]) / 2**20
    return {"nproc": os.cpu_count(), "memory_gib": round(mem_gib, 1), "cpu_model": model,
            "kernel": platform.release(), "python": platform.python_version()}


def busy_jiffies() -> int:
    """Machine-wide non-idle CPU time, to tell how much else ran during a measurement."""
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(fields) - fields[3] - fields[4]  # minus idle and iowait


def cpu_of(pids: list[int]) -> float:
    return sum(s.cpu_seconds for s in map(sample_process, pids) if s is not None)


def own_cpu() -> float:
    times = os.times()
    return times.user + times.system


# -- the workload ---------------------------------------------------------------------

def gang_index(gang: str) -> int:
    return int(gang.split("-")[1])


def plan(workload: Workload) -> tuple[list[str], dict[str, list[str]], dict[str, str]]:
    """(pod names in creation order, gang -> members, pod -> gang). Trickled: the members
    of each window of TRICKLE_WINDOW gangs interleaved, member by member."""
    order: list[str] = []
    members: dict[str, list[str]] = {}
    gang_of: dict[str, str] = {}
    for index, size in enumerate(workload.gang_sizes):
        gang = f"g-{index:04d}"
        members[gang] = [f"{gang}-{m:02d}" for m in range(size)]
        for pod in members[gang]:
            gang_of[pod] = gang
        if not workload.trickle:
            order += members[gang]
    if workload.trickle:
        gangs = list(members.values())
        for start in range(0, len(gangs), TRICKLE_WINDOW):
            window = gangs[start:start + TRICKLE_WINDOW]
            for position in range(max(map(len, window))):
                order += [pods[position] for pods in window if position < len(pods)]
    order += [f"p-{index:05d}" for index in range(workload.plain_pods)]
    return order, members, gang_of


def waves(workload: Workload, order: list[str], gang_of: dict[str, str]) -> list[list[str]]:
    """The pods in creation waves: W6's high-priority gangs come once the rest is bound."""
    late = [n for n in order if n in gang_of and workload.second_wave(gang_index(gang_of[n]))]
    if not late:
        return [order]
    early = set(late)
    return [[n for n in order if n not in early], late]


def with_retries(action: Callable[[], Any], what: str, attempts: int = 6) -> None:
    """Retry what the API server sheds under load (429, 5xx, dropped connections)."""
    for attempt in range(attempts):
        try:
            action()
            return
        except ApiError as err:
            if err.conflict and attempt:
                return  # an earlier attempt did create it
            if attempt == attempts - 1 or not (err.status in (0, 429) or err.status >= 500):
                raise
            time.sleep(0.2 * (attempt + 1))
    raise AssertionError(f"unreachable: {what}")


def create_podgroups(kube: KubeClient, workload: Workload, members: dict[str, list[str]],
                     contender: Contender) -> None:
    def make(gang: str) -> None:
        queue = workload.queue(gang_index(gang)) if contender.queues else ""
        path, body = podgroup_body(gang, len(members[gang]), api_of(contender), queue,
                                   workload.priority(gang_index(gang)))
        with_retries(lambda: kube.create(path, body), f"PodGroup {gang}")

    with ThreadPoolExecutor(CREATORS) as pool:
        for future in [pool.submit(make, gang) for gang in members]:
            future.result()


def api_of(contender: Contender) -> str:
    return "native" if contender.native_api else "upstream" if contender.upstream_api else "ours"


def create_pods(kube: FastClient, workload: Workload, pods: list[str],
                gang_of: dict[str, str], contender: Contender,
                created: dict[str, float]) -> None:
    """Create the pods as fast as the API server allows (trickled: at TRICKLE_RATE pods/s);
    stamp each when its create returns."""
    api = api_of(contender)
    path = f"/api/v1/namespaces/{NAMESPACE}/pods"

    def make(name: str) -> None:
        gang = gang_of.get(name)
        body = pod_body(name, contender.scheduler_name, cpu=workload.shape.pod_cpu,
                        memory=workload.shape.pod_memory)
        if workload.devices:
            dra.ask_for_a_device(body)
        if gang:
            index = gang_index(gang)
            if contender.gangs:
                join_gang(body, gang, api)
            # W5: the members' constraints on each other (the ceiling ignores them)
            constrain(body, BENCH_GANG_LABEL, gang, workload.constraint(index))
            if workload.priority(index):
                body["spec"]["priorityClassName"] = workload.priority(index)
        with_retries(lambda: kube.post(path, body), f"pod {name}")
        created[name] = time.monotonic()

    started = time.monotonic()
    with ThreadPoolExecutor(CREATORS) as pool:
        futures = []
        for position, name in enumerate(pods):
            if workload.trickle:
                delay = started + position / TRICKLE_RATE - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
            futures.append(pool.submit(make, name))
        for future in futures:
            future.result()


def create_waves(kube: FastClient, workload: Workload, order: list[str],
                 gang_of: dict[str, str], contender: Contender, created: dict[str, float],
                 recorder: BindRecorder, result: dict[str, Any]) -> None:
    """Each wave once the pods of the one before are bound (or nothing was bound for the
    workload's quiet spell); W6 records the free slots when its storm begins."""
    batches = waves(workload, order, gang_of)
    for number, batch in enumerate(batches):
        if number:
            previous = batches[number - 1]
            last_count, last_change = -1, time.monotonic()
            while True:
                count = sum(1 for name in previous if name in recorder.bound)
                if count != last_count:
                    last_count, last_change = count, time.monotonic()
                if count >= len(previous) or \
                        time.monotonic() - last_change > (workload.settle or 20.0):
                    break
                recorder.wait(0.5)
            bound_now = sum(1 for name in created if name in recorder.bound
                            and name not in recorder.deleted)
            result["free_slots_before_storm"] = workload.slots - bound_now
            result["storm_started"] = time.monotonic()
        create_pods(kube, workload, batch, gang_of, contender, created)


def final_checks(kube: KubeClient) -> tuple[dict[str, str], list[str]]:
    """(pod -> node as the API server has it now, over-committed nodes with details)."""
    nodes = {}
    for item in kube.get("/api/v1/nodes").get("items") or ():
        node = parse_node(item)
        nodes[node.name] = node.allocatable
    used: dict[str, dict[str, int]] = {}
    placement: dict[str, str] = {}
    for item in kube.get(f"/api/v1/namespaces/{NAMESPACE}/pods").get("items") or ():
        pod = parse_pod(item)
        if not pod.node_name:
            continue
        placement[pod.name] = pod.node_name
        if pod.terminal:
            continue  # a finished pod's room is free again (W8)
        totals = used.setdefault(pod.node_name, {"pods": 0})
        totals["pods"] += 1
        for resource, amount in pod.requests.items():
            totals[resource] = totals.get(resource, 0) + amount
    over = []
    for node_name, totals in used.items():
        alloc = nodes.get(node_name, {})
        excess = [f"{r} {v} > {alloc.get(r, 0)}" for r, v in totals.items()
                  if v > alloc.get(r, 0)]
        if excess:
            over.append(f"{node_name}: {', '.join(excess)}")
    return placement, over


def constraint_violations(workload: Workload, members: dict[str, list[str]],
                          placement: dict[str, str]) -> list[str]:
    """W5's gangs whose final placement breaks their own constraints: two members of an
    anti-affinity gang on one node, or a spread gang's zones more than 1 apart."""
    broken = []
    for index, (gang, names) in enumerate(members.items()):
        kind = workload.constraint(index)
        nodes = [placement[n] for n in names if n in placement]
        if kind == "anti" and len(set(nodes)) < len(nodes):
            broken.append(f"{gang}: {len(nodes)} members on {len(set(nodes))} nodes")
        elif kind == "spread" and nodes:
            counts = Counter(zone_of(node) for node in nodes)
            skew = max(counts.values()) - min(counts.get(f"zone-{z}", 0) for z in range(ZONES))
            if skew > 1:
                broken.append(f"{gang}: zones {dict(counts)}")
    return broken


def run_one(workload: Workload, contender: Contender, outdir: Path, *, settle: float,
            cap: float, profile_to: Path | None = None, repeat: int = 0) -> dict[str, Any]:
    """One contender on one workload, on a fresh control plane; every process stopped."""
    rundir = outdir / f"{workload.name}-{contender.key}-{repeat}"
    rundir.mkdir(parents=True, exist_ok=True)
    order, members, gang_of = plan(workload)
    result: dict[str, Any] = {"workload": workload.name, "scheduler": contender.key,
                              "repeat": repeat, "workload_description": workload.describe(),
                              "pods": len(order), "notes": []}
    cluster = LocalCluster(rundir / "cluster", binaries=control_plane_binaries(),
                           log=lambda m: None,
                           controller_manager_args=CONTROLLER_LIMITS if workload.devices else ())
    process: Process | None = None
    profiler: Profiler | None = None
    recorder: BindRecorder | None = None
    events: EventRecorder | None = None
    monitor: ProcessMonitor | None = None
    kube: KubeClient | None = None
    log(f"{workload.name} / {contender.key}: starting a fresh control plane")
    cluster.start()
    try:
        kube = admin_client(cluster.kubeconfig)
        if contender.upstream_api:
            apply_crds(kube, upstream.crd_manifest())
        elif contender.base == "ours":
            apply_crds(kube, OUR_CRD)
            apply_crds(kube, OUR_QUEUE_CRD)
        create_namespace(kube)
        if workload.priorities:
            create_priority_classes(kube, PRIORITY_CLASSES)
        if workload.queues and contender.queues:
            create_queues(kube, QUEUE_WEIGHTS)
        started = time.monotonic()
        fast = FastClient(cluster.kubeconfig)
        create_nodes(fast, workload.nodes, workload.shape)
        if workload.devices:
            dra.publish(fast, workload.nodes, workload.devices)
        if contender.gangs and members:
            create_podgroups(kube, workload, members, contender)
        groups = len(members) if contender.gangs else 0
        log(f"{workload.name} / {contender.key}: {workload.nodes} nodes and {groups} "
            f"PodGroups in {time.monotonic() - started:.1f}s; starting the scheduler")
        recorder = BindRecorder(admin_client(cluster.kubeconfig, pool=4), NAMESPACE)
        recorder.start()
        if contender.base != "ceiling":  # the ceiling writes no events
            events = EventRecorder(admin_client(cluster.kubeconfig, pool=2), NAMESPACE)
            events.start()
        launched = time.monotonic()
        process = Process(contender.command(cluster.kubeconfig, rundir, workload.stream),
                          rundir / f"{contender.key}.log", rundir, contender.source)
        monitor = ProcessMonitor(process.pid)
        monitor.start()
        result["ready_seconds"], result["startup_seconds"] = await_probe(
            kube, contender, process, recorder, launched)
        # The probe leaves: its 10m of CPU would cost a full node one slot (W6, W7).
        kube.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{PROBE}", gracePeriodSeconds=0)
        if profile_to is not None:
            profiler = Profiler(process.pid, profile_to, rundir / "py-spy.log")
            time.sleep(1.0)  # let py-spy attach before the first pod
        metrics_before = fetch_metrics(contender.metrics_url) if contender.metrics_url else None
        writes_before = api_writes(fast.get_text("/metrics"))
        cluster_pids = list(cluster.pids.values())
        before = (sample_process(process.pid), cpu_of(cluster_pids), busy_jiffies(), own_cpu())
        load_before = os.getloadavg()[0]

        created: dict[str, float] = {}
        log(f"{workload.name} / {contender.key}: ready in {result['ready_seconds']}s "
            f"({result['startup_seconds']}s from its start); "
            f"creating {len(order) or 'a stream of'} pods")
        arrivals = w8.schedule(workload.nodes, SLOTS_PER_NODE) if workload.stream else []
        if workload.stream:
            outcome, kubelet = w8.drive(kube, fast, arrivals, contender, recorder, created)
            order = list(created)
            result["pods"] = len(order)
        else:
            with ThreadPoolExecutor(1) as creator:
                creating = creator.submit(create_waves, fast, workload, order, gang_of,
                                          contender, created, recorder, result)
                outcome = wait_for_binds(workload, contender, recorder, process, creating,
                                         len(order), workload.settle or settle, cap)
                creating.result()
        result["outcome"] = outcome
        metrics_after = fetch_metrics(contender.metrics_url) if contender.metrics_url else None
        # The scheduler's writes: everything but the harness's pod creations.
        result["api_writes"] = writes_delta(writes_before, api_writes(fast.get_text("/metrics")),
                                            exclude=HARNESS_WRITES)
        result["api_writes_total"] = sum(result["api_writes"].values())
        after = (sample_process(process.pid), cpu_of(cluster_pids), busy_jiffies(), own_cpu())
        if events is not None:  # the last binds' events get their second before the stop
            last_bind = max((at for at, _ in recorder.bound.values()), default=0.0)
            time.sleep(max(0.0, last_bind + EVENT_DEADLINE + 0.5 - time.monotonic()))
        monitor.stop()
        if profiler is not None:
            profiler.stop()
            profiler = None
        result["exit_code"] = process.stop()

        placement, over = final_checks(kube)
        placement.pop(PROBE, None)
        bound = {name: recorder.bound[name][0] for name in order if name in recorder.bound}
        missed = [name for name in placement if name in created and name not in bound]
        if missed:
            result["notes"].append(f"{len(missed)} binds were not seen by the watch")
        fill(result, created, bound, members, placement, over)
        if events is not None:
            timeliness(result, bound, events.seen, time.monotonic())
        deleted = {name: recorder.deleted[name] for name in order if name in recorder.deleted}
        result["evicted_pods"] = len(deleted)
        if workload.priorities:
            storm(result, workload, members, created, bound, placement, deleted)
        if workload.queues:
            shares(result, workload, members, placement)
        if workload.stream:
            w8.measure(result, arrivals, created, kubelet, workload.slots)
        if workload.devices:
            result.update(dra.check_devices(kube, placement))
        if workload.constraints:
            broken = constraint_violations(workload, members, placement)
            result["constraint_violations"] = len(broken)
            result["constraint_violation_details"] = broken[:20]
        scheduler_cpu = (after[0].cpu_seconds - before[0].cpu_seconds
                         if after[0] and before[0] else None)
        result["cpu_seconds"] = scheduler_cpu
        result["cpu_seconds_total"] = after[0].cpu_seconds if after[0] else None
        result["peak_rss_mib"] = round(monitor.peak_rss_kib / 1024, 1)
        result["control_plane_cpu_seconds"] = round(after[1] - before[1], 1)
        result["driver_cpu_seconds"] = round(after[3] - before[3], 1)
        busy = (after[2] - before[2]) / os.sysconf("SC_CLK_TCK")
        result["machine_busy_cpu_seconds"] = round(busy, 1)
        result["other_cpu_seconds"] = round(
            busy - (scheduler_cpu or 0) - (after[1] - before[1]) - (after[3] - before[3]), 1)
        result["load_average"] = [round(load_before, 2), round(os.getloadavg()[0], 2)]
        cycles(result, contender, metrics_before, metrics_after)
        gang_attempts(result, contender, workload, metrics_before, metrics_after)
        result["notes"] += contender.notes + limitations(workload, contender)
        if recorder.errors:
            result["notes"].append(f"watch errors: {recorder.errors[:3]}")
        log(summary(result))
        return result
    finally:
        if profiler is not None:
            profiler.stop()
        if monitor is not None:
            monitor.stop()
        if process is not None:
            process.stop()
        if recorder is not None:
            recorder.stop()
        if events is not None:
            events.stop()
        if kube is not None:
            kube.close()
        cluster.stop()
        shutil.rmtree(rundir / "cluster" / "etcd-data", ignore_errors=True)


def await_probe(kube: KubeClient, contender: Contender, process: Process,
                recorder: BindRecorder, launched: float) -> tuple[float, float]:
    """Create the probe pod and wait until the scheduler binds it, which it does only once
    its caches are synced: (seconds from the probe's creation, seconds from the process's
    start, the start-up time), both to the bind the watch saw."""
    probe_started = time.monotonic()
    with_retries(lambda: kube.create(
        f"/api/v1/namespaces/{NAMESPACE}/pods",
        pod_body(PROBE, contender.scheduler_name, cpu="10m", memory="1Mi")), "probe")
    while PROBE not in recorder.bound:
        if not process.alive():
            raise RuntimeError(f"{contender.key} exited with {process.popen.returncode}; "
                               f"see {process.log_path}")
        if time.monotonic() - probe_started > READY_TIMEOUT:
            raise TimeoutError(f"{contender.key} did not bind the probe pod in "
                               f"{READY_TIMEOUT:.0f}s; see {process.log_path}")
        recorder.wait(0.2)
    bound_at = recorder.bound[PROBE][0]
    return round(bound_at - probe_started, 2), round(bound_at - launched, 2)


def wait_for_binds(workload: Workload, contender: Contender, recorder: BindRecorder,
                   process: Process, creating: Any, total: int, settle: float,
                   cap: float) -> str:
    """Until every pod is bound; with contention, until binds stop for `settle` seconds."""
    started = time.monotonic()
    last_count, last_change = -1, started
    quiet = settle if workload.contention else max(settle, 120.0)
    seen_deleted = 0
    if workload.contention and contender.key == "ceiling":
        quiet = 5.0  # nothing times out in the ceiling: once full, it stays full
    while True:
        count = recorder.count() - (1 if PROBE in recorder.bound else 0)
        now = time.monotonic()
        if count != last_count or len(recorder.deleted) != seen_deleted:
            last_count, last_change = count, now
            seen_deleted = len(recorder.deleted)
        if count >= total and not workload.priorities:
            return "all bound"
        if not process.alive():
            return f"scheduler exited ({process.popen.returncode})"
        if creating.done() and now - last_change >= quiet:
            return "settled" if workload.contention else f"stalled ({quiet:.0f}s without a bind)"
        if now - started > cap:
            return f"cut off after {cap:.0f}s"
        recorder.wait(0.5)


def fill(result: dict[str, Any], created: dict[str, float], bound: dict[str, float],
         members: dict[str, list[str]], placement: dict[str, str], over: list[str]) -> None:
    rates = report.throughput(created, bound)
    result["bound"] = len(placement)
    result["throughput_whole"] = rates["whole"]
    result["throughput_steady"] = rates["steady"]
    result["duration_seconds"] = rates["duration"]
    result["creation_seconds"] = (max(created.values()) - min(created.values())
                                  if created else None)
    result["timeline"] = report.timeline(created, bound)
    result["overcommitted_nodes"] = len(over)
    result["overcommit_details"] = over[:20]
    if members:
        # Truth for gang completeness is what the API server holds at the end.
        final = {name: bound.get(name, 0.0) for name in placement}
        gangs = report.gang_outcomes(members, created, final)
        timed = report.gang_outcomes(members, created, bound)
        result["gangs_total"] = gangs["gangs"]
        result["gangs_placed"] = gangs["placed"]
        result["gangs_partial"] = gangs["partial"]
        result["partial_gangs"] = gangs["partial_names"]
        result["gang_latency_p50"] = timed["latency_p50"]
        result["gang_latency_p99"] = timed["latency_p99"]


def timeliness(result: dict[str, Any], bound: dict[str, float], seen: dict[str, float],
               until: float) -> None:
    """How late the bound pods' Scheduled events were: the share seen within
    EVENT_DEADLINE of the bind, and the lag's p50 and p99 (an event not seen by ``until``
    counts as late as that)."""
    if not bound:
        return
    lags = event_lags(bound, seen, until)
    result["events_on_time"] = round(sum(1 for lag in lags if lag <= EVENT_DEADLINE)
                                     / len(lags), 3)
    result["events_missing"] = sum(1 for name in bound if name not in seen)
    result["event_lag_p50"] = round(report.percentile(lags, 0.5) or 0.0, 2)
    result["event_lag_p99"] = round(report.percentile(lags, 0.99) or 0.0, 2)


def storm(result: dict[str, Any], workload: Workload, members: dict[str, list[str]],
          created: dict[str, float], bound: dict[str, float], placement: dict[str, str],
          deleted: dict[str, float]) -> None:
    """W6: the high-priority gangs' outcome and what their preemptions cost the others."""
    result.pop("storm_started", None)
    high = {g: p for g, p in members.items() if workload.second_wave(gang_index(g))}
    low = {g: p for g, p in members.items() if g not in high}
    final = {name: 0.0 for name in placement}
    arrivals = report.gang_outcomes(high, created, bound)
    result["high_gangs"] = len(high)
    result["high_gangs_placed"] = report.gang_outcomes(high, created, final)["placed"]
    result["high_gang_latency_p50"] = arrivals["latency_p50"]
    result["high_gang_latency_p99"] = arrivals["latency_p99"]
    result["broken_gangs"] = report.gang_outcomes(low, created, final)["partial"]
    free_end = workload.slots - len(placement)
    result["useless_evictions"] = report.useless_evictions(
        len(deleted), result.get("free_slots_before_storm", 0), free_end)


def shares(result: dict[str, Any], workload: Workload, members: dict[str, list[str]],
           placement: dict[str, str]) -> None:
    """W7: the slots each queue holds at the end against its weighted share."""
    held = {name: 0 for name in dict.fromkeys(workload.queues)}
    for gang, pods in members.items():
        held[workload.queue(gang_index(gang))] += sum(1 for p in pods if p in placement)
    deserved = deserved_slots(workload)
    result["queue_slots"] = held
    result["queue_deserved"] = {name: round(value, 1) for name, value in deserved.items()}
    result["share_error"] = report.share_error(held, deserved, workload.slots)


def limitations(workload: Workload, contender: Contender) -> list[str]:
    """What a contender cannot do in this workload, said beside its figures."""
    notes = []
    if workload.priorities and contender.base == "ceiling":
        notes.append("cannot preempt: the high-priority gangs stay pending")
    if workload.queues and not contender.queues:
        notes.append("has no queues here: gangs go first come, first served (the Queue "
                     "objects exist only for ours)")
    if workload.devices and contender.base == "ceiling":
        notes.append("allocates no devices: it binds the pods and leaves their claims alone")
    if workload.stream and contender.base == "ceiling":
        notes.append("no gang semantics: a large gang's members are bound as room frees")
    return notes


def _quantiles_ms(buckets: dict[float, float]) -> tuple[float | None, float | None]:
    p50, p99 = histogram_quantile(0.50, buckets), histogram_quantile(0.99, buckets)
    return (None if p50 is None else p50 * 1000, None if p99 is None else p99 * 1000)


def cycles(result: dict[str, Any], contender: Contender, before: str | None,
           after: str | None) -> None:
    """Per-pod scheduling cycle p50/p99 from the scheduler's own histograms, if it has them.

    Ours observes its attempt histogram when the scheduling cycle ends (Permit included,
    its wait not). Upstream observes the attempt after the binding cycle (Permit wait and
    the Bind call included), so its cycle figure is its algorithm histogram (PreFilter,
    Filter, Score: Reserve and Permit left out), and the attempt one is kept in the JSON.
    """
    result["cycle_p50_ms"] = result["cycle_p99_ms"] = None
    if after is None:
        return
    before = before or ""
    attempts = subtract(attempt_buckets(after), attempt_buckets(before))
    result["scheduled_attempts"] = max(attempts.values()) if attempts else 0
    failed = subtract(attempt_buckets(after, "unschedulable"),
                      attempt_buckets(before, "unschedulable"))
    result["unschedulable_attempts"] = max(failed.values()) if failed else 0
    result["attempt_p50_ms"], result["attempt_p99_ms"] = _quantiles_ms(attempts)
    if contender.base in ("upstream", "native"):
        algorithm = subtract(attempt_buckets(after, None, ALGORITHM_HISTOGRAM),
                             attempt_buckets(before, None, ALGORITHM_HISTOGRAM))
        result["cycle_p50_ms"], result["cycle_p99_ms"] = _quantiles_ms(algorithm)
        result["cycle_source"] = f"{ALGORITHM_HISTOGRAM} (PreFilter+Filter+Score only)"
    else:
        result["cycle_p50_ms"], result["cycle_p99_ms"] = _quantiles_ms(attempts)
        result["cycle_source"] = "scheduler_scheduling_attempt_duration_seconds{result=scheduled}"


def gang_attempts(result: dict[str, Any], contender: Contender, workload: Workload,
                  before: str | None, after: str | None) -> None:
    """Average gang attempt time (scheduler_perf's figure for its gang workloads) and the
    time spent in attempts that placed nothing, for gang-only workloads.

    Native: kube-scheduler's whole-group cycle, `PODGROUP_HISTOGRAM{result="scheduled"}`
    sum/count, as scheduler_perf averages it: from popping the group through every
    member's PreFilter, Filter, Score, assume, Reserve and Permit, and the PodGroup's
    status PATCH (synchronous, one API round trip), to handing the members to their
    binding cycles; its algorithm part (`PODGROUP_ALGORITHM_HISTOGRAM`, up to the
    placements) is kept too. Ours has no whole-group cycle: the first member's PreFilter
    places and claims every member (admission), then each member runs its own short cycle
    to its claimed node; status is written in the background. So a gang's attempt is the
    sum of its members' scheduled cycles (`HISTOGRAM{result="scheduled"}`, pop to Permit)
    over the gangs placed. Neither span includes binding or the wait at Permit.
    """
    if after is None or not workload.gang_sizes or workload.plain_pods or \
            contender.base not in ("native", "ours"):
        return
    native = contender.base == "native"

    def delta(metric: str, outcome: str | None = "scheduled") -> tuple[float, float]:
        now, then = histogram_totals(after, metric, outcome), \
            histogram_totals(before or "", metric, outcome)
        return now[0] - then[0], now[1] - then[1]

    metric = PODGROUP_HISTOGRAM if native else HISTOGRAM
    seconds, count = delta(metric)
    gangs = count if native else result.get("gangs_placed") or 0
    result["gang_attempt_avg_ms"] = round(1000 * seconds / gangs, 3) if gangs else None
    result["gang_attempt_source"] = f"{metric}{{result=scheduled}}: sum / " + (
        "count" if native else "gangs placed")
    result["unschedulable_attempt_seconds"] = round(delta(metric, "unschedulable")[0], 3)
    if native:
        seconds, count = delta(PODGROUP_ALGORITHM_HISTOGRAM, None)
        result["gang_algorithm_avg_ms"] = round(1000 * seconds / count, 3) if count else None


def summary(result: dict[str, Any]) -> str:
    def num(key: str, fmt: str = "{:.1f}") -> str:
        value = result.get(key)
        return "n/a" if value is None else fmt.format(value)

    text = (f"{result['workload']} / {result['scheduler']}: {result.get('outcome')}; "
            f"{result.get('bound')}/{result['pods']} bound, {num('throughput_whole')} pods/s "
            f"(steady {num('throughput_steady')}), gang p99 {num('gang_latency_p99', '{:.2f}')}s,"
            f" RSS {num('peak_rss_mib', '{:.0f}')} MiB, CPU {num('cpu_seconds')}s")
    if "gangs_placed" in result:
        text += f", gangs {result['gangs_placed']}/{result['gangs_total']} placed, " \
                f"{result['gangs_partial']} partial"
    if result.get("gang_attempt_avg_ms") is not None:
        text += f", gang attempt {num('gang_attempt_avg_ms', '{:.2f}')} ms"
    return text


# -- failures -------------------------------------------------------------------------

def failures(runs: list[dict[str, Any]]) -> tuple[list[str], list[str]]:
    """(invariant violations, unfinished runs). The ceiling has no gang semantics."""
    broken, unfinished = [], []
    for run in runs:
        where = f"{run['workload']}/{run['scheduler']}"
        if run.get("error"):
            unfinished.append(f"{where}: {run['error']}")
            continue
        if run.get("overcommitted_nodes"):
            broken.append(f"{where}: {run['overcommitted_nodes']} over-committed nodes: "
                          f"{run['overcommit_details'][:3]}")
        if run["scheduler"] != "ceiling" and run.get("constraint_violations"):
            broken.append(f"{where}: {run['constraint_violations']} gangs break their "
                          f"constraints: {run['constraint_violation_details'][:5]}")
        if run.get("devices_given_twice"):
            broken.append(f"{where}: {run['devices_given_twice']} devices given twice")
        if run["scheduler"] != "ceiling" and run.get("gangs_partial"):
            broken.append(f"{where}: {run['gangs_partial']} partial gangs: "
                          f"{run['partial_gangs'][:5]}")
        if run.get("outcome") not in ("all bound", "settled"):
            unfinished.append(f"{where}: {run.get('outcome')}")
    return broken, unfinished


# -- main -----------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", type=float, default=1.0,
                        help="multiply every node, gang and pod count (0.1 for a smoke run)")
    parser.add_argument("--workloads", default="W1,W2,W1t,W2t,W3,W4,W5,W6,W7,W8,W9")
    parser.add_argument("--schedulers",
                        default="ceiling,upstream,upstream-eq,native,native-eq,ours,ours-eq",
                        help="native contenders are left out when kube-scheduler of the "
                             "control plane's release is not built")
    parser.add_argument("--repeat", type=int, default=3, help="runs per cell")
    parser.add_argument("--out", type=Path, default=REPO / "bench-results")
    parser.add_argument("--settle", type=float,
                        default=upstream.PERMIT_WAITING_TIME_SECONDS + 10.0,
                        help="W3 ends when no pod was bound for this long (default: the "
                             "60 s gang timeout both schedulers use, plus 10 s)")
    parser.add_argument("--cap", type=float, default=900.0,
                        help="longest a single run may take, in seconds")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the extra run of ours under py-spy")
    parser.add_argument("--profile-on", default="W1", metavar="WORKLOAD",
                        help="the workload of that extra run (default W1)")
    parser.add_argument("--publish", action=argparse.BooleanOptionalAction, default=None,
                        help="copy the table to bench/RESULTS.md (default: at scale 1)")
    parser.add_argument("--render", type=Path, metavar="DIR", nargs="+",
                        help="only rewrite DIR's results.md and chart from its results.json; "
                             "with several DIRs, their runs merged into a new directory")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.render:
        saved = merged([json.loads((d / "results.json").read_text()) for d in args.render])
        target = args.render[0].absolute()
        if len(args.render) > 1:
            target = (args.out / f"merged-{datetime.now(UTC).strftime('%Y%m%d-%H%M%S')}")
            target.mkdir(parents=True, exist_ok=True)
            (target / "results.json").write_text(json.dumps(saved, indent=1) + "\n")
        publish = args.publish if args.publish is not None else saved["meta"]["scale"] == 1
        return finish(saved, target.absolute(), publish)
    workloads = build_workloads(args.scale)
    chosen = [w.strip() for w in args.workloads.split(",") if w.strip()]
    unknown = [w for w in chosen if w not in workloads]
    everyone = contenders()
    picked = [c.strip() for c in args.schedulers.split(",") if c.strip()]
    unknown += [c for c in picked if c not in everyone]
    if unknown:
        print(f"bench: unknown workloads or schedulers: {unknown}", file=sys.stderr)
        return 2
    control_plane_binaries()
    if any(everyone[key].base == "upstream" for key in picked):
        upstream.ensure_binary()
        upstream.crd_manifest()
    for key in [k for k in picked if everyone[k].base == "native"]:
        why = native.available()
        if why:
            log(f"leaving out {key}: {why}")
            picked.remove(key)
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    outdir = (args.out / stamp).absolute()
    outdir.mkdir(parents=True, exist_ok=True)
    meta = metadata(args, [everyone[key] for key in picked])
    log(f"results in {outdir}")
    runs: list[dict[str, Any]] = []
    document: dict[str, Any] = {"meta": meta, "runs": runs}

    def save() -> None:
        (outdir / "results.json").write_text(json.dumps(document, indent=1) + "\n")

    # Repeats go round the contenders, so a change of load on the machine falls on all.
    for name in chosen:
        for repeat in range(args.repeat):
            for key in picked:
                contender = contenders()[key]  # fresh: a run may note things on it
                try:
                    runs.append(run_one(workloads[name], contender, outdir,
                                        settle=args.settle, cap=args.cap, repeat=repeat))
                except Exception as err:  # record it, go on with the others, fail at the end
                    traceback.print_exc()
                    runs.append({"workload": name, "scheduler": key, "repeat": repeat,
                                 "error": repr(err),
                                 "workload_description": workloads[name].describe(),
                                 "pods": workloads[name].pods, "timeline": [], "notes": []})
                save()
    profiled = next((key for key in ("ours-eq", "ours") if key in picked), None)
    if args.profile and profiled and args.profile_on in chosen:
        document["profile"] = profile_run(workloads[args.profile_on], contenders()[profiled],
                                          outdir, args)
        save()
    publish = args.publish if args.publish is not None else args.scale == 1.0
    return finish(document, outdir, publish)


def describe(contender: Contender) -> str:
    """One line on how a contender runs (the table's legend)."""
    limits = ("client QPS/burst: its own defaults" if contender.qps is None
              else f"client QPS {contender.qps:g}/burst {contender.burst} (equal limits)")
    if contender.base == "ceiling":
        return ("a Python client (own process, 48 threads, unthrottled) that watches pending "
                "pods and POSTs a Binding to the next node round-robin that still has room; "
                "no gang semantics, no preemption, no queues")
    if contender.base == "upstream":
        return (f"kube-scheduler v{upstream.LIBRARIES_VERSION} libraries + scheduler-plugins "
                f"v{upstream.PLUGINS_VERSION} Coscheduling (multiPoint, only QueueSort, "
                f"PreFilter on), permitWaitingTimeSeconds "
                f"{upstream.PERMIT_WAITING_TIME_SECONDS}, podGroupBackoffSeconds "
                f"{upstream.POD_GROUP_BACKOFF_SECONDS}, the default profile's other plugins "
                f"and weights; {limits} (its own: 50/100)")
    if contender.base == "native":
        return (f"kube-scheduler v{KUBERNETES_VERSION}, default profile, GenericWorkload "
                "gate on (GangScheduling plugin); gangs as scheduling.k8s.io/v1beta1 "
                f"PodGroups (minCount), pods name them in spec.schedulingGroup; {limits} "
                "(its own: 50/100)")
    return ("`coscheduling run`: the default configuration and profile (kube-scheduler's "
            "default plugins and weights, plus Proportion and DRF), gang timeout 60 s, "
            f"bindingParallelism {SchedulerConfig().binding_parallelism}; {limits} (its own: "
            "200/400; events through a separate client with the same limits)")


TERMS = (
    "Equal terms: every gang scheduler runs kube-scheduler's default plugin set and "
    "weights (TaintToleration 3, NodeAffinity 2, NodeResourcesFit 1, BalancedAllocation 1, "
    "ImageLocality 1, InterPodAffinity 2, PodTopologySpread 2; every default filter; "
    "DefaultPreemption). Client limits: the `-eq` columns give every contender QPS 5000/"
    "burst 10000; the plain columns keep each one's defaults. Event policy: both write an "
    "Event per bound pod asynchronously through an event client with the main client's "
    "limits (kube-scheduler's events.k8s.io broadcaster; ours' reporter, Scheduled events "
    "first, which also coalesces a pod's superseded reports). The API writes rows count what "
    "the API server itself counted "
    "(`apiserver_request_total`, verbs POST/PUT/PATCH/DELETE/APPLY, by resource, delta "
    "from the first pod created to the end of the run, the harness's own pod creations "
    "left out), so the events each one wrote inside the window are visible.",
    "",
    "Figures: throughput is first pod created -> last pod bound (steady state: the middle "
    "80% of binds). Gang latency: last member created -> last member bound. Scheduling "
    "cycle: ours `scheduler_scheduling_attempt_duration_seconds{result=\"scheduled\"}`; "
    "kube-scheduler's `scheduler_scheduling_algorithm_duration_seconds` (its attempt "
    "histogram includes the Permit wait). Unschedulable attempts: each scheduler's "
    "attempt histogram count with result unschedulable. CPU and peak RSS: the scheduler "
    "process (/proc). W6 and W7 end after 20 s without a bind or a deletion; W3 after the "
    "60 s gang timeout plus 10 s. Useless evictions: victims whose room nobody used (free "
    "slots at the end beyond those at the start of the storm). Share error: the fraction "
    "of slots held by a queue beyond its weighted share. Start-up: the scheduler process "
    "started (nodes and PodGroups already exist, pods not yet) -> the probe pod bound, "
    "which needs its caches synced. Events on time: the share of bound pods whose "
    "Scheduled event the harness's watch of Events saw within 1 s of the bind its watch of "
    "pods saw (a pod with none by 1.5 s after the last bind counts as late). "
    "Average gang attempt (gang-only workloads): native "
    "`scheduler_podgroup_scheduling_attempt_duration_seconds{result=\"scheduled\"}` "
    "sum/count, one whole-group cycle (every member's PreFilter, Filter, Score, assume, "
    "Reserve, Permit; scheduler_perf's \"average gang attempt\"); ours, which has no "
    "whole-group cycle, the sum of its members' scheduled attempts (the first member's "
    "admission places and claims all of them) per gang placed. Neither includes binding.",
)


def source_state() -> str:
    """The commit ours ran from, and whether the tree had uncommitted changes to it."""
    def git(*command: str) -> str:
        done = subprocess.run(["git", *command], cwd=REPO, capture_output=True, text=True,
                              check=False)
        return done.stdout.strip()

    changed = git("status", "--porcelain", "--", "coscheduling")
    return git("rev-parse", "--short", "HEAD") + (" + uncommitted changes" if changed else "")


def metadata(args: argparse.Namespace, chosen: list[Contender]) -> dict[str, Any]:
    info = machine()
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine_info": info,
        "machine": (f"{info['nproc']} CPUs ({info['cpu_model']}), {info['memory_gib']} GiB "
                    f"RAM, Linux {info['kernel']}, Python {info['python']}, load average "
                    f"{os.getloadavg()[0]:.1f} at the start"),
        "scale": args.scale,
        "repeat": args.repeat,
        "commit": source_state(),
        "kubernetes": KUBERNETES_VERSION,
        "scheduler_plugins": upstream.PLUGINS_VERSION,
        "settle_seconds": args.settle,
        "trickle": {"window_gangs": TRICKLE_WINDOW, "pods_per_second": TRICKLE_RATE},
        "contenders": {c.key: describe(c) for c in chosen},
        "terms": list(TERMS),
    }


def merged(documents: list[dict[str, Any]]) -> dict[str, Any]:
    """Several results.json documents as one: the first one's metadata, every run, every
    contender's legend, and each document's date and control-plane release kept."""
    meta = dict(documents[0]["meta"])
    meta["contenders"] = {k: v for d in documents for k, v in d["meta"]["contenders"].items()}
    meta["parts"] = [{"date": d["meta"]["date"], "kubernetes": d["meta"]["kubernetes"],
                      "contenders": list(d["meta"]["contenders"]),
                      "machine": d["meta"]["machine"]} for d in documents]
    runs = [dict(run, kubernetes=d["meta"]["kubernetes"]) for d in documents
            for run in d["runs"]]
    return {"meta": meta, "runs": runs}


def finish(document: dict[str, Any], outdir: Path, publish: bool) -> int:
    """Write results.md and the chart (and bench/RESULTS.md); the exit status."""
    runs: list[dict[str, Any]] = document["runs"]
    table = report.markdown([r for r in runs if not r.get("error")], document["meta"])
    broken, unfinished = failures(runs)
    if broken or unfinished:
        table += "\n## Problems\n\n" + "\n".join(f"- {p}" for p in broken + unfinished) + "\n"
    (outdir / "results.md").write_text(table)
    with contextlib.suppress(ImportError):
        report.chart([r for r in runs if r.get("timeline")], outdir / "bound_over_time.png")
    if publish:
        chart_copy = RESULTS_COPY.with_suffix(".png")
        text = table
        with contextlib.suppress(FileNotFoundError):
            shutil.copy(outdir / "bound_over_time.png", chart_copy)
            text += f"\n![pods bound over time]({chart_copy.name})\n"
        profile = outdir / "profile.md"
        if profile.is_file():
            text += "\n" + profile.read_text().replace("\n# ", "\n## ", 1).replace(
                "# Profile", "## Profile", 1).replace("\n## Top", "\n### Top")
        RESULTS_COPY.write_text(text)
        # The raw figures beside the table, without the per-pod bind timelines (the chart).
        slim = {**document, "runs": [{k: v for k, v in run.items() if k != "timeline"}
                                     for run in document["runs"]]}
        RESULTS_COPY.with_name("results.json").write_text(json.dumps(slim, indent=1) + "\n")
        log(f"copied the table and results.json to {RESULTS_COPY.parent}")
    print(table)
    for problem in broken:
        print(f"BENCHMARK FAILURE: {problem}", file=sys.stderr)
    for problem in unfinished:
        print(f"BENCHMARK INCOMPLETE: {problem}", file=sys.stderr)
    log(f"results: {outdir / 'results.md'}, {outdir / 'results.json'}, "
        f"{outdir / 'bound_over_time.png'}")
    return 1 if broken else 3 if unfinished else 0


def profile_run(workload: Workload, contender: Contender, outdir: Path,
                args: argparse.Namespace) -> dict[str, Any]:
    """An extra run of ours with py-spy attached (not in the table: py-spy slows it)."""
    raw_path = outdir / f"profile-{workload.name}-ours.txt"
    try:
        result = run_one(workload, contender, outdir / "profile", settle=args.settle,
                         cap=args.cap, profile_to=raw_path)
    except Exception as err:
        traceback.print_exc()
        return {"error": repr(err)}
    if not raw_path.is_file():
        return {"error": f"py-spy wrote no profile; see {outdir / 'profile'}"}
    tables = report.profile_tables(raw_path.read_text())
    context = (f"{workload.name} at scale {args.scale}, {contender.key}: "
               f"{result.get('bound')}/{result['pods']} pods bound at "
               f"{result.get('throughput_whole') or 0:.1f} pods/s under py-spy, scheduler CPU "
               f"{result.get('cpu_seconds') or 0:.1f} s.")
    (outdir / "profile.md").write_text(report.profile_markdown(tables, context,
                                                               workload.name))
    log(f"profile of ours: {outdir / 'profile.md'}")
    return {"run": {k: v for k, v in result.items() if k != "timeline"},
            "self": tables["self"], "cumulative": tables["cumulative"]}


if __name__ == "__main__":
    sys.exit(main())
