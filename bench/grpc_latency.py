"""Latency of each gRPC plugin-server RPC on loopback, at a steady request rate.

    .venv/bin/python -m bench.grpc_latency [--rate 1000] [--seconds 3] [--nodes 1000]
        [--server sync|aio] [--event-engine] [--repeat 1] [--json]

What runs. The server runs in a child process (so client and server do not share one GIL),
built by ``coscheduling.server.build_server`` (``--server aio``: the same servicer, checks
and options on grpcio's asyncio server, bench/grpc_aio.py) over an in-memory scheduler:
``--nodes`` nodes, a few pods and gangs put into its cache through the same event handlers
the watches use; no control plane is needed.

How it measures. Each row sends its RPCs at ``--rate`` calls per second for ``--seconds``
from two client threads (grpcio's blocking stubs, one channel), each sending its calls at
their scheduled times, or at once when its previous answer came late (those calls are
counted in ``late``, so a stall cannot hide); latency is the time from sending a call to
having its answer, as a caller sees it. Before each row, a tenth of a second at the same
rate warms it up, unmeasured. The client process keeps its garbage collector off while it
measures and polls grpc inline as the server does (coscheduling/server/polling.py), so its
own pauses and thread hops are not counted as the server's. For each row it also reads the
server process's CPU time and context switches (all its threads, from /proc) per call: the
cost of a call on the server, which the load of other programs on the machine changes far
less than it changes latency. ``Health.Check`` (the stock health service on the same
server) is the floor: the gRPC stack with a trivial handler. Score and Filter over every
node in one call are measured at 20 calls/s, which they can sustain. ``--repeat N`` runs the
whole table N times and reports each figure's median over the runs (and the p99's range).

Sync or asyncio (``--server``). On a 2-core VM at 1000 calls/s both serve every single-pod
RPC at a p50 of about half a millisecond; grpcio's asyncio server costs more CPU per call
and has the worse p99 in every paired run we made (bench/RESULTS.md, "gRPC plugin server
latency"), even in its best case here (handlers inline on the event loop). It would also
serve users worse: one event loop stalls on the scheduler's cache lock whenever the loop
holds it for a cycle (health checks included), and WatchDecisions would need an asyncio
rewrite. The project keeps grpcio's thread-pool server. ``--event-engine`` runs both sides
with grpc's default EventEngine poller instead of inline polling, to re-check that choice.
"""

from __future__ import annotations

import argparse
import functools
import gc
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
NAMESPACE = "bench"
GROUP_LABEL = "group.batch.scheduler.tencent.com"
LANES = 2  # client threads sharing the rate
WARM_UP = 0.1  # seconds of each row sent first, unmeasured
HEAVY_RATE = 20.0  # calls/s of the rows over every node
EVENT_ENGINE = "event_engine_listener,event_engine_client"

Plan = list[list[Callable[[], Any]]]  # per client thread, the calls it makes in turn


# -- the server side ------------------------------------------------------------------------
def _scheduler(nodes: int, gangs: int = 0) -> Any:
    """An in-memory scheduler: nodes, a gang and pods, fed through the watch handlers;
    ``gangs`` more gangs of two (one per Schedule of a waiting member)."""
    from coscheduling.api.nodes import parse_node
    from coscheduling.api.pods import parse_pod
    from coscheduling.config import parse_config
    from coscheduling.core.eventhandlers import NodeEvents, PodEvents
    from coscheduling.core.scheduler import Scheduler
    from coscheduling.plugins.registry import default_registry

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
    _group(scheduler, "gang", 1_000_000)  # out of reach: every Permit of a member waits
    for name, group in (("plain", ""), ("other", ""), ("member", "gang"), ("member-2", "gang")):
        PodEvents(scheduler).on_add(parse_pod(_pod(name, group)))
    for i in range(gangs):
        _group(scheduler, f"pair-{i}", 2)
        for j in range(2):
            PodEvents(scheduler).on_add(parse_pod(_pod(f"pair-{i}-{j}", f"pair-{i}")))
            # The caller's pods, not the queue's: the queue is scanned whenever room frees
            # (every Unreserve), and thousands of queued pods would slow the other rows.
            scheduler.queue.delete(f"{NAMESPACE}/pair-{i}-{j}")
    return scheduler


def _group(scheduler: Any, name: str, min_member: int) -> None:
    from coscheduling.api.podgroups import parse_podgroup
    from coscheduling.core.eventhandlers import PodGroupEvents

    PodGroupEvents(scheduler).on_add(parse_podgroup({
        "metadata": {"name": name, "namespace": NAMESPACE, "uid": f"g-{name}",
                     "creationTimestamp": "2024-01-01T00:00:00Z"},
        "spec": {"minMember": min_member}}))


def _pod(name: str, group: str) -> dict[str, Any]:
    return {"kind": "Pod", "metadata": {
        "name": name, "namespace": NAMESPACE, "uid": f"uid-{name}",
        "creationTimestamp": "2024-01-01T00:00:00Z",
        "labels": {GROUP_LABEL: group} if group else {}},
        "spec": {"schedulerName": "bench", "containers": [
            {"name": "c", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}]}}


def _serve(nodes: int, gangs: int, kind: str) -> None:
    """The server, until standard input closes; prints its address once listening."""
    from coscheduling.server import GrpcSettings, build_server

    scheduler = _scheduler(nodes, gangs)
    settings = GrpcSettings(address="127.0.0.1:0")
    if kind == "aio":
        import asyncio

        from bench.grpc_aio import serve

        asyncio.run(serve(scheduler, settings))
    else:
        server = build_server(scheduler, lambda: True, settings)
        server.start()
        print(server.address, flush=True)
        sys.stdin.read()
        server.stop(1).wait(5)
    scheduler.stop()


def _handler_times(nodes: int, count: int = 2000) -> dict[str, float]:
    """Microseconds per call of the handlers alone (no gRPC): what the server adds."""
    from coscheduling.server.gen import scheduling_pb2 as pb
    from coscheduling.server.servicer import SchedulingServicer

    scheduler = _scheduler(nodes)
    servicer = SchedulingServicer(scheduler)
    plain, other = _ref(pb, "plain"), _ref(pb, "other")
    node = "node-0002"

    def schedule_and_unreserve() -> None:
        answer = servicer.Schedule(pb.ScheduleRequest(pod=plain), None)
        servicer.Unreserve(pb.UnreserveRequest(pod=plain, node_name=answer.node_name), None)

    cases: dict[str, Callable[[], Any]] = {
        "Less": lambda: servicer.Less(pb.LessRequest(a=plain, b=other), None),
        "Filter (1 node)": lambda: servicer.Filter(
            pb.FilterRequest(pod=plain, node_names=[node]), None),
        "Reserve+Permit+Unreserve": lambda: (
            servicer.Reserve(pb.ReserveRequest(pod=plain, node_name=node), None),
            servicer.Permit(pb.PermitRequest(pod=plain, node_name=node), None),
            servicer.Unreserve(pb.UnreserveRequest(pod=plain, node_name=node), None)),
        "Schedule+Unreserve": schedule_and_unreserve,
    }
    result = {}
    for name, call in cases.items():
        started = time.perf_counter()
        for _ in range(count):
            call()
        result[name] = (time.perf_counter() - started) / count * 1e6
    scheduler.stop()
    return result


def _ref(pb: Any, name: str) -> Any:
    return pb.PodRef(key=pb.ObjectKey(namespace=NAMESPACE, name=name))


# -- measuring ------------------------------------------------------------------------------
def _server_counters(pid: int) -> tuple[float, int]:
    """CPU seconds and context switches of a process, all its threads together."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    switches = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except FileNotFoundError:
            continue  # the thread ended
        switches += sum(int(line.split()[1]) for line in status.splitlines()
                        if "ctxt_switches:" in line)
    return cpu, switches


@dataclass
class Paced:
    samples: list[list[float]]  # latencies of each call position of the lanes
    achieved: float  # calls per second sent
    late: int  # calls sent more than a millisecond after their time


def _paced(lanes: Plan, rate: float, seconds: float) -> Paced:
    """Send ``rate`` calls per second for ``seconds``, spread over one client thread per
    lane (so a slow answer does not lower the rate); each lane runs its calls in turn."""
    lane_rate = rate / len(lanes)
    interval = 1.0 / lane_rate
    per_lane = max(1, int(lane_rate * seconds) // len(lanes[0])) * len(lanes[0])
    samples: list[list[float]] = [[] for _ in lanes[0]]
    late = [0]
    errors: list[BaseException] = []
    lock = threading.Lock()
    start = time.perf_counter() + 0.01

    def run(lane: int) -> None:
        try:
            send(lane)
        except BaseException as err:  # a failed call fails the row, in the caller
            errors.append(err)

    def send(lane: int) -> None:
        calls = lanes[lane]
        offset = start + lane * interval / len(lanes)
        mine: list[list[float]] = [[] for _ in calls]
        behind = 0
        for i in range(per_lane):
            wait = offset + i * interval - time.perf_counter()
            if wait > 0:  # sleep, not spin: on a small machine the server needs the core
                time.sleep(wait)
            behind += wait < -1e-3
            sent = time.perf_counter()
            calls[i % len(calls)]()
            mine[i % len(calls)].append(time.perf_counter() - sent)
        with lock:
            late[0] += behind
            for into, got in zip(samples, mine, strict=True):
                into.extend(got)

    threads = [threading.Thread(target=run, args=(lane,)) for lane in range(len(lanes))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if errors:
        raise errors[0]
    return Paced(samples, per_lane * len(lanes) / (time.perf_counter() - start), late[0])


def _percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    cut = statistics.quantiles(ordered, n=100, method="inclusive")
    return {"p50_ms": cut[49] * 1e3, "p99_ms": cut[98] * 1e3, "max_ms": ordered[-1] * 1e3}


def _measure(names: list[str], plan: Plan, rate: float, seconds: float,
             server_pid: int) -> dict[str, dict[str, Any]]:
    """One row (or a cycle of rows): warmed up, then measured with the client's garbage
    collector off; with the server's CPU and context switches per call."""
    _paced(plan, rate, WARM_UP)
    gc.collect()
    gc.disable()
    try:
        cpu, switches = _server_counters(server_pid)
        client_cpu = time.process_time()
        paced = _paced(plan, rate, seconds)
        client_cpu = time.process_time() - client_cpu
        cpu_after, switches_after = _server_counters(server_pid)
    finally:
        gc.enable()
    calls = sum(len(s) for s in paced.samples)
    shared = {"rate_per_s": round(paced.achieved, 1), "late": paced.late,
              "server_cpu_us": round((cpu_after - cpu) / calls * 1e6),
              "server_switches": round((switches_after - switches) / calls, 1),
              "client_cpu_us": round(client_cpu / calls * 1e6)}
    return {name: {**_percentiles(latencies), "calls": len(latencies), **shared}
            for name, latencies in zip(names, paced.samples, strict=True)}


# -- the client side ------------------------------------------------------------------------
class Scheduled:
    """Schedule then Unreserve, one pod (or one new gang's member) per round: Unreserve
    gives back the node Schedule answered."""

    def __init__(self, calls: dict[str, Any], pb: Any, pods: list[Any]) -> None:
        self._calls, self._pb, self._pods = calls, pb, pods
        self._round = 0
        self.answer: Any = None

    def schedule(self) -> None:
        pod = self._pods[self._round % len(self._pods)]
        self.answer = self._calls["Schedule"](self._pb.ScheduleRequest(pod=pod))

    def unreserve(self) -> None:
        pod = self._pods[self._round % len(self._pods)]
        self._round += 1
        self._calls["Unreserve"](self._pb.UnreserveRequest(
            pod=pod, node_name=self.answer.node_name))

    def plan(self) -> list[Callable[[], Any]]:
        return [self.schedule, self.unreserve]


def _rows(channel: Any, calls: dict[str, Any], pb: Any, gangs: int,
          ) -> list[tuple[list[str], Plan]]:
    """Every single-pod row: the RPC names it measures, and each lane's calls."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    ref = functools.partial(_ref, pb)
    plain, other, member = ref("plain"), ref("other"), ref("member")
    as_json = pb.PodRef(pod_json=json.dumps(_pod("plain", "")).encode())
    one, ten = ["node-0001"], [f"node-{i:04d}" for i in range(10)]
    check = health_pb2_grpc.HealthStub(channel).Check

    def single(call: Callable[..., Any], request: Any) -> Plan:
        return [[functools.partial(call, request)] for _ in range(LANES)]

    def cycle(pods: list[Any], node: str) -> Plan:
        """Reserve, Permit, Unreserve in turn: one pod per lane, as they depend."""
        return [[functools.partial(calls[name], request(pod=p, node_name=node))
                 for name, request in (("Reserve", pb.ReserveRequest),
                                       ("Permit", pb.PermitRequest),
                                       ("Unreserve", pb.UnreserveRequest))] for p in pods]

    pairs = [[ref(f"pair-{i}-0") for i in range(lane, gangs - 1, LANES)]
             for lane in range(LANES)]
    return [
        (["Health.Check (the stack alone)"], single(check, health_pb2.HealthCheckRequest())),
        (["Less"], single(calls["Less"], pb.LessRequest(a=plain, b=other))),
        (["PreFilter"], single(calls["PreFilter"], pb.PreFilterRequest(pod=plain))),
        (["Filter (1 node)"], single(calls["Filter"], pb.FilterRequest(pod=plain,
                                                                       node_names=one))),
        (["Filter (1 node, pod as JSON)"],
         single(calls["Filter"], pb.FilterRequest(pod=as_json, node_names=one))),
        (["Score (10 nodes)"], single(calls["Score"], pb.ScoreRequest(pod=plain,
                                                                      node_names=ten))),
        (["Reserve", "Permit (allow)", "Unreserve"], cycle([plain, other], "node-0002")),
        (["Reserve (gang member)", "Permit (wait)", "Unreserve (rejects the wait)"],
         cycle([member, ref("member-2")], "node-0003")),
        (["PostBind"], single(calls["PostBind"], pb.PostBindRequest(pod=plain,
                                                                    node_name="node-0004"))),
        (["GetPodGroup"], single(calls["GetPodGroup"], pb.GetPodGroupRequest(
            group=pb.ObjectKey(namespace=NAMESPACE, name="gang")))),
        (["Schedule (allow)", "Unreserve (after Schedule)"],
         [Scheduled(calls, pb, [p]).plan() for p in (plain, other)]),
        # Last: each Unreserve here puts a member back in the queue, which grows with the row.
        (["Schedule (a new gang's member: wait)", "Unreserve (after Schedule: rejects it)"],
         [Scheduled(calls, pb, pods).plan() for pods in pairs]),
    ]


def _heavy_rows(calls: dict[str, Any], pb: Any, nodes: int) -> list[tuple[str, Any, Any]]:
    """The calls over every node: label, method, request."""
    plain = _ref(pb, "plain")
    every = [f"node-{i:04d}" for i in range(nodes)]
    return [
        (f"Score ({nodes} nodes named)", calls["Score"],
         pb.ScoreRequest(pod=plain, node_names=every)),
        (f"Score (all feasible of {nodes} nodes)", calls["Score"], pb.ScoreRequest(pod=plain)),
        (f"Filter ({nodes} nodes)", calls["Filter"], pb.FilterRequest(pod=plain)),
    ]


def _check_rows(calls: dict[str, Any], pb: Any, gangs: int) -> None:
    """The Schedule rows do what their names say (once, undone), before they are timed."""
    for pod, expected in (("plain", "allow"), (f"pair-{gangs - 1}-1", "wait")):
        answer = calls["Schedule"](pb.ScheduleRequest(pod=_ref(pb, pod)))
        assert answer.WhichOneof("result") == expected, answer
        calls["Unreserve"](pb.UnreserveRequest(pod=_ref(pb, pod), node_name=answer.node_name))


def _client(address: str, args: argparse.Namespace, server_pid: int) -> dict[str, Any]:
    import grpc

    from coscheduling.server.commands import rpc
    from coscheduling.server.gen import scheduling_pb2 as pb

    channel = grpc.insecure_channel(address)
    grpc.channel_ready_future(channel).result(timeout=10)
    calls = {m.name: rpc(channel, m.name)
             for m in pb.DESCRIPTOR.services_by_name["Scheduling"].methods
             if not m.server_streaming}
    _check_rows(calls, pb, _gangs(args))
    results: dict[str, Any] = {}
    for names, plan in _rows(channel, calls, pb, _gangs(args)):
        results.update(_measure(names, plan, args.rate, args.seconds, server_pid))
    for label, method, request in _heavy_rows(calls, pb, args.nodes):
        answer = method(request)
        assert len(getattr(answer, "scores", None) or answer.nodes) == args.nodes
        plan = [[functools.partial(method, request)]]
        results.update(_measure([label], plan, HEAVY_RATE, args.seconds, server_pid))
    channel.close()
    return results


def _gangs(args: argparse.Namespace) -> int:
    """Gangs of two for the Schedule (wait) row: one per round, warm-up included (with room
    to spare), and the last one for the check before (each is frozen once unreserved)."""
    return int(args.rate * (args.seconds + WARM_UP) * 0.55) + 2 * LANES + 1


# -- running and reporting ------------------------------------------------------------------
def _run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One table: a server child, every row against it."""
    command = [sys.executable, "-m", "bench.grpc_latency", "--serve-only", "--nodes",
               str(args.nodes), "--server", args.server, "--gangs", str(_gangs(args))]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             text=True, cwd=REPO)
    try:
        assert child.stdout is not None and child.stdin is not None
        address = child.stdout.readline().strip()
        if not address:
            raise SystemExit("the server did not start")
        return _client(address, args, child.pid)
    finally:
        if child.stdin is not None:
            child.stdin.close()
        child.wait(30)


def _median_of(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Each figure's median over the runs; the p99's range when there are several."""
    merged: dict[str, Any] = {}
    for name, first in runs[0].items():
        row = {key: statistics.median(run[name][key] for run in runs) for key in first}
        if len(runs) > 1:
            row["p99_range_ms"] = [min(r[name]["p99_ms"] for r in runs),
                                   max(r[name]["p99_ms"] for r in runs)]
        merged[name] = row
    return merged


def _print(results: dict[str, Any], handlers: dict[str, float], args: argparse.Namespace,
           ) -> None:
    poller = "EventEngine" if args.event_engine else "inline"
    print(f"{args.server} server, {poller} polling, {args.rate:g} calls/s, "
          f"{args.repeat} run(s); load average {os.getloadavg()[0]:.2f}")
    print(f"{'RPC':<42} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'calls':>6} "
          f"{'rate/s':>7} {'late':>5} {'srv us':>7} {'srv cs':>6} {'cli us':>6}")
    for name, r in results.items():
        print(f"{name:<42} {r['p50_ms']:7.3f} {r['p99_ms']:7.3f} {r['max_ms']:7.2f} "
              f"{r['calls']:6.0f} {r['rate_per_s']:7.1f} {r['late']:5.0f} "
              f"{r['server_cpu_us']:7.0f} {r['server_switches']:6.1f} {r['client_cpu_us']:6.0f}")
    print("\n(late: calls sent over 1 ms after their time; srv us, srv cs: the server process's"
          " CPU time and context switches per call; cli us: the client's CPU per call)")
    print("the handlers alone, without gRPC (microseconds per call):")
    for name, micros in handlers.items():
        print(f"  {name:<40} {micros:8.1f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--server", choices=("sync", "aio"), default="sync",
                        help="grpcio's thread-pool server (what the project runs) or its "
                             "asyncio server (for the comparison)")
    parser.add_argument("--event-engine", action="store_true",
                        help="grpc's default EventEngine poller on both sides")
    parser.add_argument("--repeat", type=int, default=1, help="tables to run (medians)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    parser.add_argument("--serve-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--gangs", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.event_engine:
        os.environ["GRPC_EXPERIMENTS"] = EVENT_ENGINE  # inherited by the server's process
    import coscheduling.server  # noqa: F401  # before grpc: it sets how grpc polls
    if args.serve_only:
        _serve(args.nodes, args.gangs, args.server)
        return 0
    results = _median_of([_run_once(args) for _ in range(args.repeat)])
    handlers = _handler_times(args.nodes)
    if args.json:
        print(json.dumps({"rpcs": results, "handler_us": handlers,
                          "server": args.server, "event_engine": args.event_engine,
                          "rate": args.rate, "repeat": args.repeat}, indent=2))
    else:
        _print(results, handlers, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
