"""What the benchmark measures from outside the schedulers: binds, process cost, metrics.

Binds are seen the way any client sees them, through a watch on pods, and stamped with the
same clock as pod creation, so every scheduler is timed by one observer.
"""

from __future__ import annotations

import math
import os
import re
import ssl
import threading
import time
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from coscheduling.cluster.client import ApiError, KubeClient

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


class NamespaceWatch:
    """Lists and then watches one kind of object in one namespace, stamping what it sees
    with the clock the harness times pod creation with; subclasses say what they record."""

    def __init__(self, kube: KubeClient, path: str, name: str) -> None:
        self.kube = kube
        self.path = path
        self.changed = threading.Condition()
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._rv = ""
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._relist()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def wait(self, timeout: float) -> None:
        """Sleep until something new is recorded or `timeout` passes."""
        with self.changed:
            self.changed.wait(timeout)

    def _observe(self, obj: Mapping[str, object]) -> None:
        raise NotImplementedError

    def _deleted(self, obj: Mapping[str, object]) -> None:
        """An object deleted: nothing by default."""

    def _notify(self) -> None:
        with self.changed:
            self.changed.notify_all()

    def _relist(self) -> None:
        listing = self.kube.get(self.path)
        self._rv = listing["metadata"]["resourceVersion"]
        for item in listing.get("items") or ():
            self._observe(item)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                query = {"resourceVersion": self._rv, "allowWatchBookmarks": "true",
                         "timeoutSeconds": 300}
                for event in self.kube.watch(self.path, query, read_timeout=60):
                    if self._stop.is_set():
                        return
                    kind = event.get("type")
                    obj = event.get("object") or {}
                    if kind == "ERROR":
                        raise ApiError(int(obj.get("code") or 0), str(obj.get("message")))
                    self._rv = (obj.get("metadata") or {}).get("resourceVersion") or self._rv
                    if kind in ("ADDED", "MODIFIED"):
                        self._observe(obj)
                    elif kind == "DELETED":
                        self._deleted(obj)
            except ApiError as err:
                if self._stop.is_set():
                    return
                if err.gone:
                    self._relist()
                else:
                    self.errors.append(str(err))
                    time.sleep(0.2)


def _name(obj: Mapping[str, object]) -> str:
    meta = obj.get("metadata") or {}
    return str(meta.get("name") or "") if isinstance(meta, dict) else ""


class BindRecorder(NamespaceWatch):
    """Watches the pods of one namespace and records when each first shows a node."""

    def __init__(self, kube: KubeClient, namespace: str) -> None:
        super().__init__(kube, f"/api/v1/namespaces/{namespace}/pods", "bind-recorder")
        self.bound: dict[str, tuple[float, str]] = {}  # pod name -> (time, node)
        # Pods deleted after they were bound (preemption and reclaim victims) -> when.
        self.deleted: dict[str, float] = {}

    def count(self) -> int:
        return len(self.bound)

    def _observe(self, pod: Mapping[str, object]) -> None:
        spec = pod.get("spec") or {}
        node = spec.get("nodeName") if isinstance(spec, dict) else None
        if not node:
            return
        name = _name(pod)
        if name and name not in self.bound:
            self.bound[name] = (time.monotonic(), str(node))
            self._notify()

    def _deleted(self, pod: Mapping[str, object]) -> None:
        name = _name(pod)
        if name in self.bound:
            self.deleted.setdefault(name, time.monotonic())


class EventRecorder(NamespaceWatch):
    """Watches the Events of one namespace (core/v1, which also shows events.k8s.io/v1's,
    as kube-scheduler writes them) and records when the first one with ``reason`` about
    each pod arrived: a Scheduled event's lag behind its pod's bind, seen by one observer."""

    def __init__(self, kube: KubeClient, namespace: str, reason: str = "Scheduled") -> None:
        super().__init__(kube, f"/api/v1/namespaces/{namespace}/events", "event-recorder")
        self.reason = reason
        self.seen: dict[str, float] = {}  # pod name -> when its first such event arrived

    def _observe(self, event: Mapping[str, object]) -> None:
        about = event.get("involvedObject") or {}
        if event.get("reason") != self.reason or not isinstance(about, dict) \
                or about.get("kind") != "Pod":
            return
        self.seen.setdefault(str(about.get("name") or ""), time.monotonic())


def event_lags(bound: Mapping[str, float], seen: Mapping[str, float],
               until: float) -> list[float]:
    """Each bound pod's event lag, seconds from its bind to its event (0 when the watches
    showed the event first); a pod whose event had not arrived by ``until`` is late by
    ``until`` minus its bind, at least."""
    return [max(0.0, seen.get(name, until) - at) for name, at in bound.items()]


@dataclass
class ProcessSample:
    cpu_seconds: float
    rss_kib: int
    hwm_kib: int


def sample_process(pid: int) -> ProcessSample | None:
    """CPU (user+system) and RSS of one process from /proc, or None once it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICKS
    values = dict(re.findall(r"^(VmRSS|VmHWM):\s+(\d+)", status, re.MULTILINE))
    return ProcessSample(cpu, int(values.get("VmRSS", 0)), int(values.get("VmHWM", 0)))


@dataclass
class ProcessMonitor:
    """Polls a process so its peak RSS and CPU are known even if it dies mid-run."""

    pid: int
    interval: float = 0.5
    peak_rss_kib: int = 0
    last: ProcessSample | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._poll()
        self._thread = threading.Thread(target=self._loop, name="proc-monitor", daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        sample = sample_process(self.pid)
        if sample is not None:
            self.last = sample
            self.peak_rss_kib = max(self.peak_rss_kib, sample.rss_kib, sample.hwm_kib)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._poll()

    def stop(self) -> None:
        self._poll()
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


# -- Prometheus text format: the scheduling-attempt histogram --------------------------

HISTOGRAM = "scheduler_scheduling_attempt_duration_seconds"
# Upstream observes the attempt histogram after binding (Permit wait and Bind included);
# its scheduling-cycle part is the algorithm histogram (PreFilter, Filter, Score).
ALGORITHM_HISTOGRAM = "scheduler_scheduling_algorithm_duration_seconds"
# kube-scheduler's whole-group cycle (GenericWorkload): scheduler_perf's gang attempt time.
PODGROUP_HISTOGRAM = "scheduler_podgroup_scheduling_attempt_duration_seconds"
# Its algorithm part: the cycle up to the members' placements, before the PodGroup's status
# write and the hand-over to the binding cycles.
PODGROUP_ALGORITHM_HISTOGRAM = "scheduler_podgroup_scheduling_algorithm_duration_seconds"
_SAMPLE = re.compile(r'^(\w+)\{([^}]*)\}\s+(\S+)')
_UNLABELLED = re.compile(r'^(\w+)()\s+(\S+)')
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def fetch_metrics(url: str, timeout: float = 5.0) -> str | None:
    """The /metrics text, or None when the endpoint cannot be read."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the schedulers' self-signed serving certificates
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return str(response.read().decode())
    except OSError:
        return None


def attempt_buckets(text: str, result: str | None = "scheduled",
                    metric: str = HISTOGRAM) -> dict[float, float]:
    """Cumulative bucket counts of a histogram (only samples with `result`, unless None),
    summed over every other label (profiles)."""
    buckets: dict[float, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != f"{metric}_bucket":
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        if result is not None and labels.get("result") != result:
            continue
        bound = math.inf if labels["le"] in ("+Inf", "Inf") else float(labels["le"])
        buckets[bound] = buckets.get(bound, 0.0) + float(match.group(3))
    return buckets


def histogram_totals(text: str, metric: str,
                     result: str | None = "scheduled") -> tuple[float, float]:
    """(sum, count) of a histogram's samples with `result` (any, if None), summed over its
    other labels: an average needs the sum, which the buckets do not keep."""
    totals = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        match = _SAMPLE.match(line) or _UNLABELLED.match(line)
        if match is None or not match.group(1).startswith(f"{metric}_"):
            continue
        part = match.group(1)[len(metric) + 1:]
        labels = dict(_LABEL.findall(match.group(2) or ""))
        if part in totals and (result is None or labels.get("result") == result):
            totals[part] += float(match.group(3))
    return totals["sum"], totals["count"]


def subtract(after: Mapping[float, float], before: Mapping[float, float]) -> dict[float, float]:
    return {le: count - before.get(le, 0.0) for le, count in after.items()}


def histogram_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' histogram_quantile: linear interpolation inside the bucket."""
    if not buckets:
        return None
    bounds = sorted(buckets)
    total = buckets[bounds[-1]]
    if total <= 0:
        return None
    rank = q * total
    previous_bound, previous_count = 0.0, 0.0
    for bound in bounds:
        count = buckets[bound]
        if count >= rank:
            if math.isinf(bound):
                return previous_bound
            if count == previous_count:
                return bound
            return previous_bound + (bound - previous_bound) * (rank - previous_count) / (
                count - previous_count)
        previous_bound, previous_count = bound, count
    return bounds[-1]


# -- the API server's own count of requests --------------------------------------------

REQUEST_COUNTER = "apiserver_request_total"
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE", "APPLY")


def api_writes(text: str) -> dict[str, float]:
    """Write requests the API server counted, by "VERB resource[/subresource]" (summed over
    codes, groups, versions and scopes): who wrote what is told apart by the resource."""
    writes: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) != REQUEST_COUNTER:
            continue
        labels = dict(_LABEL.findall(match.group(2)))
        verb = labels.get("verb", "")
        if verb not in WRITE_VERBS:
            continue
        resource = labels.get("resource", "")
        if labels.get("subresource"):
            resource += f"/{labels['subresource']}"
        key = f"{verb} {resource}"
        writes[key] = writes.get(key, 0.0) + float(match.group(3))
    return writes


def writes_delta(before: Mapping[str, float], after: Mapping[str, float],
                 exclude: tuple[str, ...] = ()) -> dict[str, int]:
    """Writes made between two readings, without the keys in `exclude` (the harness's own),
    zero entries left out."""
    delta = {key: round(count - before.get(key, 0.0)) for key, count in after.items()
             if key not in exclude}
    return {key: count for key, count in sorted(delta.items()) if count > 0}
