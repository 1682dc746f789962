"""Latency of each gRPC plugin-server RPC on loopback, at a steady request rate.

    .venv/bin/python bench/grpc_latency.py [--rate 1000] [--seconds 3] [--nodes 1000]

The server runs in a child process (so client and server do not share one GIL) over an
in-memory scheduler: ``--nodes`` nodes and a few pods put into its cache through the same
event handlers the watches use; no control plane is needed. The client sends each RPC
at ``--rate`` calls per second from two threads (each sends its calls at their scheduled
times, or at once when its previous call was late) and reports p50/p99/max of the time from
send to answer. Score
over every node in one call is measured separately, at a rate it can sustain.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
GROUP_LABEL = "group.batch.scheduler.tencent.com"
LANES = 2  # client threads sharing the rate


# -- the server side ------------------------------------------------------------------------
def _scheduler(nodes: int) -> Any:
    """An in-memory scheduler: nodes, a gang and pods, fed through the watch handlers."""
    from coscheduling.api.nodes import parse_node
    from coscheduling.api.podgroups import parse_podgroup
    from coscheduling.api.pods import parse_pod
    from coscheduling.config import parse_config
    from coscheduling.eventhandlers import NodeEvents, PodEvents, PodGroupEvents
    from coscheduling.plugins.registry import default_registry
    from coscheduling.scheduler import Scheduler

    registry = default_registry()
    config = parse_config({"apiVersion": "config.batch.scheduler.tencent.com/v1",
                           "kind": "SchedulerConfiguration", "schedulerName": "bench"},
                          registry)
    scheduler = Scheduler(config, registry, client=None)
    for i in range(nodes):
        NodeEvents(scheduler).on_add(parse_node({
            "metadata": {"name": f"node-{i:04d}", "labels": {"zone": f"z{i % 3}"}},
            "status": {"allocatable": {"cpu": str(4 + i % 5), "memory": "32Gi",
                                       "pods": "110"}}}))
    # minMember far out of reach: every Permit of a member waits.
    PodGroupEvents(scheduler).on_add(parse_podgroup({
        "metadata": {"name": "gang", "namespace": NAMESPACE, "uid": "g",
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"minMember": 1_000_000}}))
    for name, group in (("plain", ""), ("other", ""), ("member", "gang"), ("member-2", "gang")):
        PodEvents(scheduler).on_add(parse_pod(_pod(name, group)))
    return scheduler


def _serve(nodes: int) -> None:
    from coscheduling.server import GrpcSettings, build_server

    scheduler = _scheduler(nodes)
    server = build_server(scheduler, lambda: True, GrpcSettings(address="127.0.0.1:0"))
    server.start()
    print(server.address, flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    server.stop(1).wait(5)
    scheduler.stop()


def _handler_times(nodes: int, count: int = 3000) -> dict[str, float]:
    """Microseconds per call of the handlers alone (no gRPC): what the server adds."""
    from coscheduling.server.gen import scheduling_pb2 as pb
    from coscheduling.server.servicer import SchedulingServicer

    scheduler = _scheduler(nodes)
    servicer = SchedulingServicer(scheduler)
    plain = pb.PodRef(key=pb.ObjectKey(namespace=NAMESPACE, name="plain"))
    other = pb.PodRef(key=pb.ObjectKey(namespace=NAMESPACE, name="other"))
    node = "node-0002"
    cases: dict[str, Callable[[], Any]] = {
        "Less": lambda: servicer.Less(pb.LessRequest(a=plain, b=other), None),
        "Filter (1 node)": lambda: servicer.Filter(
            pb.FilterRequest(pod=plain, node_names=[node]), None),
        "Reserve+Permit+Unreserve": lambda: (
            servicer.Reserve(pb.ReserveRequest(pod=plain, node_name=node), None),
            servicer.Permit(pb.PermitRequest(pod=plain, node_name=node), None),
            servicer.Unreserve(pb.UnreserveRequest(pod=plain, node_name=node), None)),
    }
    result = {}
    for name, call in cases.items():
        started = time.perf_counter()
        for _ in range(count):
            call()
        result[name] = (time.perf_counter() - started) / count * 1e6
    scheduler.stop()
    return result


def _pod(name: str, group: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {
        "name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "labels": {GROUP_LABEL: group} if group else {}},
        "spec": {"schedulerName": "bench", "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}


# -- the client side ------------------------------------------------------------------------
def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cut = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": cut[49] * 1e3, "p99_ms": cut[98] * 1e3, "max_ms": ordered[-1] * 1e3}


def _paced(lanes: list[list[Callable[[], Any]]], rate: float, seconds: float,
           ) -> tuple[list[list[float]], float]:
    """Send ``rate`` calls per second for ``seconds``, spread over one client thread per
    lane (so a slow answer does not lower the rate); each lane runs its calls in turn.
    Returns the latencies of each call position, and the rate achieved."""
    lane_rate = rate / len(lanes)
    interval = 1.0 / lane_rate
    per_lane = int(lane_rate * seconds) // len(lanes[0]) * len(lanes[0])  # whole rounds
    samples: list[list[float]] = [[] for _ in lanes[0]]
    lock = threading.Lock()
    start = time.perf_counter() + 0.01

    def run(lane: int) -> None:
        calls = lanes[lane]
        offset = start + lane * interval / len(lanes)
        mine: list[list[float]] = [[] for _ in calls]
        for i in range(per_lane):
            wait = offset + i * interval - time.perf_counter()
            if wait > 0:  # sleep, not spin: on a small machine the server needs the core
                time.sleep(wait)
            sent = time.perf_counter()
            calls[i % len(calls)]()
            mine[i % len(calls)].append(time.perf_counter() - sent)
        with lock:
            for into, got in zip(samples, mine, strict=True):
                into.extend(got)

    threads = [threading.Thread(target=run, args=(lane,)) for lane in range(len(lanes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    achieved = per_lane * len(lanes) / (time.perf_counter() - start)
    return samples, achieved


def _client(address: str, rate: float, seconds: float, nodes: int) -> dict[str, Any]:
    import grpc

    from coscheduling.server.cli import rpc
    from coscheduling.server.gen import scheduling_pb2 as pb

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)

    def ref(name: str) -> Any:
        return pb.PodRef(key=pb.ObjectKey(namespace=NAMESPACE, name=name))

    plain, other, member = ref("plain"), ref("other"), ref("member")
    as_json = pb.PodRef(pod_json=json.dumps(_pod("plain", "")).encode())
    one = ["node-0001"]
    ten = [f"node-{i:04d}" for i in range(10)]
    group = pb.ObjectKey(namespace=NAMESPACE, name="gang")
    calls = {name: rpc(channel, name) for name in (
        "Less", "PreFilter", "Filter", "Score", "Reserve", "Permit", "Unreserve", "PostBind",
        "GetPodGroup")}
    for _ in range(200):  # warm up connection, threads and caches
        calls["Less"](pb.LessRequest(a=plain, b=other))

    def single(name: str, request: Any) -> list[list[Callable[[], Any]]]:
        return [[functools.partial(calls[name], request)] for _ in range(LANES)]

    def cycle(pods: list[Any], node: str) -> list[list[Callable[[], Any]]]:
        """Reserve, Permit, Unreserve in turn: one pod per lane, as they depend."""
        return [[functools.partial(calls["Reserve"], pb.ReserveRequest(pod=p, node_name=node)),
                 functools.partial(calls["Permit"], pb.PermitRequest(pod=p, node_name=node)),
                 functools.partial(calls["Unreserve"],
                                   pb.UnreserveRequest(pod=p, node_name=node))]
                for p in pods]

    results: dict[str, Any] = {}
    plans: list[tuple[list[str], list[list[Callable[[], Any]]]]] = [
        (["Less"], single("Less", pb.LessRequest(a=plain, b=other))),
        (["PreFilter"], single("PreFilter", pb.PreFilterRequest(pod=plain))),
        (["Filter (1 node)"], single("Filter", pb.FilterRequest(pod=plain, node_names=one))),
        (["Filter (1 node, pod as JSON)"],
         single("Filter", pb.FilterRequest(pod=as_json, node_names=one))),
        (["Score (10 nodes)"], single("Score", pb.ScoreRequest(pod=plain, node_names=ten))),
        (["Reserve", "Permit (allow)", "Unreserve"], cycle([plain, other], "node-0002")),
        (["Reserve (gang member)", "Permit (wait)", "Unreserve (rejects the wait)"],
         cycle([member, ref("member-2")], "node-0003")),
        (["PostBind"], single("PostBind", pb.PostBindRequest(pod=plain, node_name="node-0004"))),
        (["GetPodGroup"], single("GetPodGroup", pb.GetPodGroupRequest(group=group))),
    ]
    for names, plan in plans:
        samples, achieved = _paced(plan, rate, seconds)
        for name, latencies in zip(names, samples, strict=True):
            results[name] = {**_percentiles(latencies), "calls": len(latencies),
                             "rate_per_s": round(achieved, 1)}

    every = [f"node-{i:04d}" for i in range(nodes)]
    heavy = [
        (f"Score ({nodes} nodes named)", pb.ScoreRequest(pod=plain, node_names=every)),
        (f"Score (all feasible of {nodes} nodes)", pb.ScoreRequest(pod=plain)),
        (f"Filter ({nodes} nodes)", pb.FilterRequest(pod=plain)),
    ]
    for label, request in heavy:
        method = calls["Score" if isinstance(request, pb.ScoreRequest) else "Filter"]
        answer = method(request)
        assert len(getattr(answer, "scores", None) or answer.nodes) == nodes
        samples, achieved = _paced([[functools.partial(method, request)]], 20, seconds)
        results[label] = {**_percentiles(samples[0]), "calls": len(samples[0]),
                          "rate_per_s": round(achieved, 1)}
    channel.close()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--serve-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    if args.serve_only:
        _serve(args.nodes)
        return 0
    child = subprocess.Popen([sys.executable, __file__, "--serve-only", "--nodes",
                              str(args.nodes)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=REPO)
    try:
        assert child.stdout is not None and child.stdin is not None
        address = child.stdout.readline().strip()
        if not address:
            print("the server did not start", file=sys.stderr)
            return 1
        results = _client(address, args.rate, args.seconds, args.nodes)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(10)
    handlers = _handler_times(args.nodes)
    if args.json:
        print(json.dumps({"rpcs": results, "handler_us": handlers}, indent=2))
        return 0
    print(f"{'RPC':<40} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'calls':>6} {'rate/s':>8}")
    for name, r in results.items():
        print(f"{name:<40} {r['p50_ms']:8.3f} {r['p99_ms']:8.3f} {r['max_ms']:8.2f} "
              f"{r['calls']:6d} {r['rate_per_s']:8.1f}")
    print("\nthe handlers alone, without gRPC (microseconds per call):")
    for name, micros in handlers.items():
        print(f"  {name:<38} {micros:8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
