"""W8 (issue 24): a finite cluster kept busy by a stream of short single-pod jobs and plain
gangs whose demand exceeds its capacity, while a large gang (half the cluster) arrives
periodically. A kubelet stand-in marks each bound pod Running and, once its runtime has
passed, Succeeded, so room frees as it would on a real cluster, for every contender alike.

Every pod declares its runtime (``batch.scheduler.tencent.com/expected-runtime``), as a
batch cluster's jobs declare a time limit; schedulers that do not read it ignore it.

Measured: the large gangs' wait (arrival to their last member bound; those not whole by the
end never ran), the small jobs' wait, and utilization: busy slot-seconds over the slots times
the arrival window.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from bench import report
from bench.cluster import NAMESPACE, join_gang, pod_body, podgroup_body
from bench.fastclient import FastClient
from bench.observe import BindRecorder
from bench.schedulers import Contender
from bench.workloads import ARRIVAL_SECONDS, GANG_SIZES, LARGE_EVERY
from coscheduling.api.runtimes import EXPECTED_RUNTIME_ANNOTATION
from coscheduling.cluster.client import ApiError, KubeClient

SEED = 20261125
DRAIN_SECONDS = 60.0  # then this long more, for every contender alike
SMALL_RATE = 0.6  # single-pod jobs per second per node
SMALL_RUNTIME = (4.0, 12.0)
GANG_RATE = 0.04  # plain gangs per second per node
GANG_RUNTIME = (8.0, 16.0)
LARGE_FIRST = 10.0  # the first large gang; then one every LARGE_EVERY seconds
LARGE_RUNTIME = 20.0
STAND_IN_WORKERS = 8


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the start
    gang: str  # "" for a single-pod job
    pods: tuple[str, ...]
    runtime: float
    large: bool = False


def schedule(nodes: int, slots_per_node: int) -> list[Arrival]:
    """The arrivals, the same on every run: Poisson streams of small jobs and plain gangs,
    and a large gang of half the slots every LARGE_EVERY seconds."""
    rng = random.Random(SEED)
    arrivals: list[Arrival] = []
    for kind, rate in (("job", SMALL_RATE * nodes), ("gang", GANG_RATE * nodes)):
        at, index = rng.expovariate(rate), 0
        while at < ARRIVAL_SECONDS:
            if kind == "job":
                arrivals.append(Arrival(at, "", (f"job-{index:05d}",),
                                        round(rng.uniform(*SMALL_RUNTIME), 1)))
            else:
                name = f"gang-{index:04d}"
                size = rng.randint(*GANG_SIZES)
                arrivals.append(Arrival(at, name, tuple(f"{name}-{m:02d}" for m in range(size)),
                                        round(rng.uniform(*GANG_RUNTIME), 1)))
            at, index = at + rng.expovariate(rate), index + 1
    size = nodes * slots_per_node // 2
    at, index = LARGE_FIRST, 0
    while at < ARRIVAL_SECONDS:
        name = f"large-{index:02d}"
        arrivals.append(Arrival(at, name, tuple(f"{name}-{m:03d}" for m in range(size)),
                                LARGE_RUNTIME, large=True))
        at, index = at + LARGE_EVERY, index + 1
    return sorted(arrivals, key=lambda a: a.at)


@dataclass
class StandInKubelet:
    """Marks bound pods Running with their startTime, then Succeeded after their runtime;
    records when each finished."""

    kube: KubeClient
    recorder: BindRecorder
    runtimes: dict[str, float]
    started: dict[str, float] = field(default_factory=dict)
    finished: dict[str, float] = field(default_factory=dict)
    writes: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with ThreadPoolExecutor(STAND_IN_WORKERS) as pool:
            while not self._stop.wait(0.2):
                now = time.monotonic()
                for name, (bound_at, _) in list(self.recorder.bound.items()):
                    runtime = self.runtimes.get(name)
                    if runtime is None or name in self.finished:
                        continue
                    if name not in self.started:
                        self.started[name] = bound_at
                        pool.submit(self._status, name, {"phase": "Running", "startTime":
                                                         _stamp(time.time())})
                    elif now - bound_at >= runtime:
                        self.finished[name] = now
                        pool.submit(self._status, name, {"phase": "Succeeded"})

    def _status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            self.kube.patch(f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/status",
                            {"status": dict(status)})
            self.writes += 1
        except ApiError:
            pass  # deleted meanwhile (a preemption victim): nothing left to finish

    def stop(self) -> None:
        self._stop.set()


def _stamp(epoch: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))


def drive(kube: KubeClient, fast: FastClient, arrivals: list[Arrival], contender: Contender,
          recorder: BindRecorder, created: dict[str, float]) -> tuple[str, StandInKubelet]:
    """Create the arrivals on time, with the stand-in kubelet finishing pods, then watch
    DRAIN_SECONDS more: every contender is observed for the same length of time."""
    runtimes = {pod: a.runtime for a in arrivals for pod in a.pods}
    kubelet = StandInKubelet(kube, recorder, runtimes)
    thread = threading.Thread(target=kubelet.run, name="stand-in-kubelet", daemon=True)
    thread.start()
    api = "native" if contender.native_api else "upstream" if contender.upstream_api \
        else "ours"
    started = time.monotonic()
    with ThreadPoolExecutor(16) as pool:
        for arrival in arrivals:
            delay = started + arrival.at - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            pool.submit(_create, kube, fast, arrival, contender, api, created)
    deadline = time.monotonic() + DRAIN_SECONDS
    while time.monotonic() < deadline:
        recorder.wait(0.5)
    kubelet.stop()
    thread.join(timeout=10)
    # Large gangs that never ran are a measured outcome (large_gangs_never_ran), not an
    # unfinished run.
    return "settled", kubelet


def _create(kube: KubeClient, fast: FastClient, arrival: Arrival, contender: Contender,
            api: str, created: dict[str, float]) -> None:
    if arrival.gang and contender.gangs:
        path, body = podgroup_body(arrival.gang, len(arrival.pods), api)
        kube.create(path, body)
    for name in arrival.pods:
        pod = pod_body(name, contender.scheduler_name)
        pod["metadata"]["annotations"] = {EXPECTED_RUNTIME_ANNOTATION: f"{arrival.runtime}s"}
        if arrival.gang and contender.gangs:
            join_gang(pod, arrival.gang, api)
        fast.post(f"/api/v1/namespaces/{NAMESPACE}/pods", pod)
        created[name] = time.monotonic()


def measure(result: dict[str, Any], arrivals: list[Arrival], created: dict[str, float],
            kubelet: StandInKubelet, slots: int) -> None:
    """The large gangs' and small jobs' waits and the utilization, into ``result``."""
    bound = {name: at for name, (at, _) in kubelet.recorder.bound.items()}
    large = {a.gang: list(a.pods) for a in arrivals if a.large}
    outcome = report.gang_outcomes(large, created, bound)
    result["large_gangs"] = len(large)
    result["large_gangs_ran"] = outcome["placed"]
    result["large_gangs_never_ran"] = len(large) - outcome["placed"]
    result["large_wait_p50"] = outcome["latency_p50"]
    result["large_wait_p99"] = outcome["latency_p99"]
    jobs = [a.pods[0] for a in arrivals if not a.gang and a.pods[0] in created]
    end = time.monotonic()
    # A job still pending at the end counts as waiting until the end (a lower bound).
    waits = [bound.get(p, end) - created[p] for p in jobs]
    result["small_jobs"] = len(jobs)
    result["small_jobs_ran"] = sum(1 for p in jobs if p in bound)
    result["small_wait_p50"] = report.percentile(waits, 0.5)
    result["small_wait_p99"] = report.percentile(waits, 0.99)
    result["small_wait_by_arrival"] = _waits_by_arrival(jobs, created, bound, end)
    first = min(created.values(), default=0.0)
    result["small_longest_waits"] = [
        {"pod": p, "arrived_s": round(created[p] - first, 1), "wait_s": round(w, 1)}
        for w, p in sorted(zip(waits, jobs, strict=True), reverse=True)[:10]]
    if created:
        start = min(created.values())
        end = start + ARRIVAL_SECONDS
        busy = sum(max(0.0, min(kubelet.finished.get(p, end), end) - max(at, start))
                   for p, at in bound.items() if p in created)
        result["utilization"] = round(busy / (slots * ARRIVAL_SECONDS), 3)
    result["stand_in_writes"] = kubelet.writes
    writes = result.get("api_writes")
    if isinstance(writes, dict) and writes.get("PATCH pods/status"):
        # The stand-in kubelet's status patches are the harness's, not the scheduler's.
        writes["PATCH pods/status"] = max(0, writes["PATCH pods/status"] - kubelet.writes)
        result["api_writes_total"] = sum(writes.values())


def _waits_by_arrival(jobs: list[str], created: Mapping[str, float],
                      bound: Mapping[str, float], end: float) -> list[dict[str, float]]:
    """The small jobs' wait (p50, p99, longest) by when they arrived, in 20 s windows: where
    in the run the long waits come from."""
    if not jobs:
        return []
    start = min(created.values())
    windows: dict[int, list[float]] = {}
    for job in jobs:
        windows.setdefault(int((created[job] - start) // 20), []).append(
            bound.get(job, end) - created[job])
    return [{"from_s": 20.0 * w, "jobs": len(v), "p50": round(report.percentile(v, 0.5), 1),
             "p99": round(report.percentile(v, 0.99), 1), "longest": round(max(v), 1)}
            for w, v in sorted(windows.items())]
