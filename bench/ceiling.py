"""The ceiling: bind every pending pod round-robin, as fast as the API server takes it.

No scheduling decision beyond "the next node with room": no gangs, no scoring, no queue.
It runs as its own process (`python -m bench.ceiling`) so its CPU and memory are measured
the same way as the two schedulers', and it stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import FrameType
from typing import Any

from bench.fastclient import FastClient
from coscheduling.api.quantity import to_units
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

WORKERS = 48


def _requests(pod: Mapping[str, Any]) -> tuple[int, int]:
    """(milli-CPU, memory bytes) the pod asks for."""
    cpu = memory = 0
    for container in (pod.get("spec") or {}).get("containers") or ():
        requests = (container.get("resources") or {}).get("requests") or {}
        cpu += to_units("cpu", requests.get("cpu", "0"))
        memory += to_units("memory", requests.get("memory", "0"))
    return cpu, memory


class RoundRobin:
    """Nodes in a ring; each pod goes to the next node that still has room for it."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self.names: list[str] = []
        self.free: list[list[int]] = []
        for node in nodes:
            alloc = (node.get("status") or {}).get("allocatable") or {}
            self.names.append(node["metadata"]["name"])
            self.free.append([to_units("cpu", alloc.get("cpu", "0")),
                              to_units("memory", alloc.get("memory", "0")),
                              int(alloc.get("pods", "0"))])
        self.next = 0
        self.lock = threading.Lock()

    def take(self, cpu: int, memory: int) -> str | None:
        with self.lock:
            for step in range(len(self.names)):
                index = (self.next + step) % len(self.names)
                free = self.free[index]
                if free[0] >= cpu and free[1] >= memory and free[2] >= 1:
                    free[0] -= cpu
                    free[1] -= memory
                    free[2] -= 1
                    self.next = index + 1
                    return self.names[index]
        return None


def run(kubeconfig: Path, namespace: str, scheduler_name: str, stop: threading.Event) -> int:
    kube = KubeClient(ClientSettings(kubeconfig=str(kubeconfig), qps=0, burst=1,
                                     connection_pool=WORKERS + 8))
    binder = FastClient(kubeconfig)
    ring = RoundRobin(list(kube.get("/api/v1/nodes").get("items") or []))
    seen: set[str] = set()
    failures = 0
    path = f"/api/v1/namespaces/{namespace}/pods"
    selector = f"spec.schedulerName={scheduler_name},spec.nodeName="

    def bind(pod: Mapping[str, Any]) -> None:
        nonlocal failures
        meta = pod["metadata"]
        node = ring.take(*_requests(pod))
        if node is None:
            return  # full: a real scheduler would leave it pending too
        try:
            binder.bind(namespace, meta["name"], meta["uid"], node)
        except ApiError as err:
            failures += 1
            print(f"ceiling: bind {meta['name']} -> {node} failed: {err}", file=sys.stderr)

    with ThreadPoolExecutor(WORKERS) as pool:
        def offer(pod: Mapping[str, Any]) -> None:
            name = pod["metadata"]["name"]
            if name not in seen and not (pod.get("spec") or {}).get("nodeName"):
                seen.add(name)
                pool.submit(bind, pod)

        listing = kube.get(path, fieldSelector=selector)
        rv = listing["metadata"]["resourceVersion"]
        for item in listing.get("items") or ():
            offer(item)
        print("ceiling: ready", file=sys.stderr, flush=True)
        while not stop.is_set():
            try:
                query = {"fieldSelector": selector, "resourceVersion": rv,
                         "allowWatchBookmarks": "true", "timeoutSeconds": 60}
                for event in kube.watch(path, query, read_timeout=5):
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") == "ADDED":
                        offer(obj)
                    if stop.is_set():
                        break
            except ApiError as err:
                if err.gone:
                    listing = kube.get(path, fieldSelector=selector)
                    rv = listing["metadata"]["resourceVersion"]
                    for item in listing.get("items") or ():
                        offer(item)
                elif not stop.is_set() and err.status != 0:
                    print(f"ceiling: watch: {err}", file=sys.stderr)
    kube.close()
    return 1 if failures else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", required=True)
    args = parser.parse_args()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return run(args.kubeconfig, args.namespace, args.scheduler_name, stop)


if __name__ == "__main__":
    sys.exit(main())
