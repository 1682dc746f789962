"""The ceiling: bind every pending pod round-robin, as fast as the API server takes it.

No scheduling decision beyond "the next node with room": no gangs, no scoring, no queue.
With ``--recycle`` (W8, where pods finish) a finished pod's room is given back and the pods
that found none are tried again in arrival order, first fit: the most any scheduler could keep
busy, ignoring gangs. It runs as its own process (`python -m bench.ceiling`) so its CPU and
memory are measured the same way as the two schedulers', and it stops on SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Mapping
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

    def give_back(self, node: str, cpu: int, memory: int) -> None:
        with self.lock:
            free = self.free[self.names.index(node)]
            free[0] += cpu
            free[1] += memory
            free[2] += 1


class Waiting:
    """Recycle mode: pods that found no room, in arrival order, and what each bound pod
    holds until it finishes."""

    def __init__(self) -> None:
        self.pods: dict[str, Mapping[str, Any]] = {}
        self.placed: dict[str, tuple[str, int, int]] = {}
        self.lock = threading.Lock()

    def finished(self, pod: Mapping[str, Any]) -> tuple[str, int, int] | None:
        """The room a bound pod that finished (or was deleted) held, once."""
        phase = (pod.get("status") or {}).get("phase")
        gone = phase in ("Succeeded", "Failed") or pod.get("_deleted")
        if not gone:
            return None
        with self.lock:
            return self.placed.pop(pod["metadata"]["name"], None)


class Binder:
    """Binds each pod to the ring's next node with room; in recycle mode remembers what each
    bound pod holds and the pods that found no room."""

    def __init__(self, kubeconfig: Path, namespace: str, ring: RoundRobin,
                 waiting: Waiting | None) -> None:
        self.client = FastClient(kubeconfig)
        self.namespace = namespace
        self.ring = ring
        self.waiting = waiting
        self.failures = 0
        self._retrying = threading.Lock()

    def bind(self, pod: Mapping[str, Any]) -> bool:
        """Whether the pod found room (its bind is sent; a failed one gives the room back)."""
        meta, asked = pod["metadata"], _requests(pod)
        node = self.ring.take(*asked)
        if node is None:
            return False  # full: a real scheduler would leave it pending too
        waiting = self.waiting
        if waiting is not None:
            with waiting.lock:
                waiting.placed[meta["name"]] = (node, *asked)
        try:
            self.client.bind(self.namespace, meta["name"], meta["uid"], node)
        except ApiError as err:
            self.failures += 1
            print(f"ceiling: bind {meta['name']} -> {node} failed: {err}", file=sys.stderr)
            if waiting is not None:  # the room was not used after all
                self.ring.give_back(node, *asked)
                with waiting.lock:
                    waiting.placed.pop(meta["name"], None)
        return True

    def place(self, pod: Mapping[str, Any]) -> None:
        if not self.bind(pod) and self.waiting is not None:
            with self.waiting.lock:
                self.waiting.pods[pod["metadata"]["name"]] = pod

    def retry(self) -> None:
        """Room came back: the waiting pods, oldest first, each where it fits (one retry
        at a time, so no pod is bound twice)."""
        waiting = self.waiting
        assert waiting is not None
        with self._retrying:
            with waiting.lock:
                queued = list(waiting.pods.items())
            for name, pod in queued:
                if self.bind(pod):
                    with waiting.lock:
                        waiting.pods.pop(name, None)


def run(kubeconfig: Path, namespace: str, scheduler_name: str, stop: threading.Event,
        recycle: bool = False) -> int:
    kube = KubeClient(ClientSettings(kubeconfig=str(kubeconfig), qps=0, burst=1,
                                     connection_pool=WORKERS + 8))
    ring = RoundRobin(list(kube.get("/api/v1/nodes").get("items") or []))
    binder = Binder(kubeconfig, namespace, ring, Waiting() if recycle else None)
    seen: set[str] = set()
    path = f"/api/v1/namespaces/{namespace}/pods"
    selector = f"spec.schedulerName={scheduler_name}" + ("" if recycle else ",spec.nodeName=")

    with ThreadPoolExecutor(WORKERS) as pool:
        def offer(pod: Mapping[str, Any]) -> None:
            freed = binder.waiting.finished(pod) if binder.waiting is not None else None
            if freed is not None:
                ring.give_back(*freed)
                pool.submit(binder.retry)
            elif pod["metadata"]["name"] not in seen and \
                    not (pod.get("spec") or {}).get("nodeName"):
                seen.add(pod["metadata"]["name"])
                pool.submit(binder.place, pod)

        _watch(kube, path, selector, offer, stop, recycle)
    kube.close()
    return 1 if binder.failures else 0


def _watch(kube: KubeClient, path: str, selector: str,
           offer: Callable[[Mapping[str, Any]], None], stop: threading.Event,
           recycle: bool) -> None:
    """List, then watch until ``stop``: every new pod is offered; in recycle mode also
    every change (a pod that finished or was deleted gives its room back)."""
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
                kind = event.get("type")
                if kind == "ADDED" or (recycle and kind in ("MODIFIED", "DELETED")):
                    offer({**obj, "_deleted": kind == "DELETED"})
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--namespace", required=True)
    parser.add_argument("--scheduler-name", required=True)
    parser.add_argument("--recycle", action="store_true",
                        help="give finished pods' room back and retry waiting pods (W8)")
    args = parser.parse_args()
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return run(args.kubeconfig, args.namespace, args.scheduler_name, stop, args.recycle)


if __name__ == "__main__":
    sys.exit(main())
