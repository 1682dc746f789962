"""Prometheus metrics with kube-scheduler's names, labels and buckets.

A small in-process registry with the text exposition format; it keeps the project free of a
metrics dependency while staying compatible with standard scheduler dashboards.
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping, Sequence

from coscheduling.framework.status import Code, Status


def exponential_buckets(start: float, factor: float, count: int) -> list[float]:
    return [start * factor**i for i in range(count)]


def _labels(names: Sequence[str], values: Sequence[str]) -> str:
    if not names:
        return ""
    pairs = ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))
    return "{" + pairs + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class _Metric:
    kind = ""

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name = name
        self.help = help_text
        self.label_names = tuple(labels)
        self._lock = threading.Lock()

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} {self.kind}"]

    def render(self) -> list[str]:
        raise NotImplementedError


class Counter(_Metric):
    kind = "counter"

    def __init__(self, name: str, help_text: str, labels: Sequence[str] = ()) -> None:
        super().__init__(name, help_text, labels)
        # A series without labels exists from the start, at 0, as Prometheus clients do.
        self._values: dict[tuple[str, ...], float] = {} if labels else {(): 0.0}

    def inc(self, *labels: str, amount: float = 1.0) -> None:
        with self._lock:
            self._values[labels] = self._values.get(labels, 0.0) + amount

    def value(self, *labels: str) -> float:
        return self._values.get(labels, 0.0)

    def render(self) -> list[str]:
        with self._lock:
            return [f"{self.name}{_labels(self.label_names, k)} {v:g}"
                    for k, v in sorted(self._values.items())]


class Gauge(Counter):
    kind = "gauge"

    def set(self, value: float, *labels: str) -> None:
        with self._lock:
            self._values[labels] = value


class Histogram(_Metric):
    kind = "histogram"

    def __init__(self, name: str, help_text: str, labels: Sequence[str],
                 buckets: Iterable[float]) -> None:
        super().__init__(name, help_text, labels)
        self.buckets = sorted(buckets)
        self._series: dict[tuple[str, ...], tuple[list[int], list[float]]] = {}

    def observe(self, value: float, *labels: str) -> None:
        with self._lock:
            series = self._series.get(labels)
            if series is None:
                series = self._series[labels] = ([0] * (len(self.buckets) + 1), [0.0, 0.0])
            series[0][bisect.bisect_left(self.buckets, value)] += 1
            series[1][0] += value
            series[1][1] += 1

    def count(self, *labels: str) -> int:
        series = self._series.get(labels)
        return int(series[1][1]) if series else 0

    def render(self) -> list[str]:
        lines = []
        with self._lock:
            for key, (counts, (total, n)) in sorted(self._series.items()):
                cumulative = 0
                for bound, count in zip([*self.buckets, float("inf")], counts, strict=True):
                    cumulative += count
                    le = "+Inf" if bound == float("inf") else f"{bound:g}"
                    names = (*self.label_names, "le")
                    lines.append(f"{self.name}_bucket{_labels(names, (*key, le))} {cumulative}")
                lines.append(f"{self.name}_sum{_labels(self.label_names, key)} {total:g}")
                lines.append(f"{self.name}_count{_labels(self.label_names, key)} {n:g}")
        return lines


_STATUS_LABEL: Mapping[Code, str] = {
    Code.SUCCESS: "Success", Code.ERROR: "Error", Code.UNSCHEDULABLE: "Unschedulable",
    Code.UNSCHEDULABLE_AND_UNRESOLVABLE: "UnschedulableAndUnresolvable", Code.WAIT: "Wait",
    Code.SKIP: "Skip",
}


class SchedulerMetrics:
    def __init__(self, profile: str = "batch-scheduler") -> None:
        self.profile = profile
        self._scheduler_metrics()
        self._gang_metrics()
        self._reservation_metrics()
        self.all: list[_Metric] = [
            self.reserved_room, self.reservation_idle_core_seconds, self.reservation_duration,
            self.reservations, self.backfilled_pods,
            self.queue_deserved, self.queue_allocated, self.queue_gangs, self.queue_reclaims,
            self.schedule_attempts, self.attempt_duration, self.pending_pods,
            self.extension_point_duration, self.permit_wait_duration, self.pods_bound,
            self.gang_released, self.gang_rejected, self.gang_timed_out,
            self.gang_schedule_duration, self.gangs_waiting, self.gangs_frozen,
            self.preemption_attempts, self.preemption_victims, self.gang_preemptions,
            self.objects_unreadable,
        ]

    def _scheduler_metrics(self) -> None:
        """kube-scheduler's own names, labels and buckets."""
        self.schedule_attempts = Counter(
            "scheduler_schedule_attempts_total",
            "Number of attempts to schedule pods, by the result.", ("result", "profile"))
        self.attempt_duration = Histogram(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            ("result", "profile"), exponential_buckets(0.001, 2, 15))
        self.pending_pods = Gauge(
            "scheduler_pending_pods", "Number of pending pods, by the queue type.", ("queue",))
        self.extension_point_duration = Histogram(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            ("extension_point", "status", "profile"), exponential_buckets(0.0001, 2, 12))
        self.permit_wait_duration = Histogram(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.", ("result",), exponential_buckets(0.001, 2, 15))
        self.pods_bound = Counter(
            "coscheduling_pods_bound_total", "Pods bound by this scheduler.")
        self.objects_unreadable = Gauge(
            "coscheduling_objects_unreadable",
            "Objects the scheduler cannot read and sets aside, by kind (resource).", ("kind",))
        # kube-scheduler's preemption metrics.
        self.preemption_attempts = Counter(
            "scheduler_preemption_attempts_total", "Total preemption attempts in the cluster "
            "till now")
        self.preemption_victims = Histogram(
            "scheduler_preemption_victims", "Number of selected preemption victims", (),
            exponential_buckets(1, 2, 7))

    def _gang_metrics(self) -> None:
        """Gangs, their preemptions, and the queues' shares (cpu in cores)."""
        self.gang_released = Counter(
            "coscheduling_gangs_released_total", "Gangs released at Permit as a whole.")
        self.gang_rejected = Counter(
            "coscheduling_gangs_rejected_total", "Gang attempts rejected, by reason.",
            ("reason",))
        self.gang_timed_out = Counter(
            "coscheduling_gangs_timed_out_total", "Gang attempts that ran out of time.")
        self.gang_schedule_duration = Histogram(
            "coscheduling_gang_schedule_duration_seconds",
            "Time from a gang's first claimed or waiting member to its release.", (),
            exponential_buckets(0.001, 2, 18))
        self.gangs_waiting = Gauge(
            "coscheduling_gangs_waiting", "Gangs with members waiting at Permit.")
        self.gangs_frozen = Gauge(
            "coscheduling_gangs_frozen", "Gangs frozen after a failed attempt.")
        self.gang_preemptions = Counter(
            "coscheduling_gang_preemptions_total", "Preemptions made for a whole gang.")
        # Queues (the Proportion plugin): shares in the resource's units (cpu in cores).
        self.queue_deserved = Gauge(
            "coscheduling_queue_deserved", "A queue's deserved share of a resource.",
            ("queue", "resource"))
        self.queue_allocated = Gauge(
            "coscheduling_queue_allocated", "What a queue's gangs hold of a resource.",
            ("queue", "resource"))
        self.queue_gangs = Gauge(
            "coscheduling_queue_gangs", "A queue's gangs, pending or running.",
            ("queue", "state"))
        self.queue_reclaims = Counter(
            "coscheduling_queue_reclaims_total",
            "Evictions made for a queue below its deserved share.", ("queue",))

    def _reservation_metrics(self) -> None:
        """Reservations (a gang first in line holding room as it frees) and backfill."""
        self.reserved_room = Gauge(
            "coscheduling_reserved_room", "Room held by reservations, by resource (cpu in "
            "cores).", ("resource",))
        self.reservation_idle_core_seconds = Counter(
            "coscheduling_reservation_idle_core_seconds_total",
            "Core-seconds reserved for gangs and not used meanwhile: the price of reserving.")
        self.reservation_duration = Histogram(
            "coscheduling_reservation_duration_seconds",
            "How long reservations lasted, by how they ended.", ("outcome",),
            exponential_buckets(0.5, 2, 16))
        self.reservations = Gauge(
            "coscheduling_reservations", "Gangs holding a reservation.")
        self.backfilled_pods = Counter(
            "coscheduling_backfilled_pods_total",
            "Pods placed into reserved room because they end before the reservation "
            "completes.")

    def observe_extension_point(self, point: str, status: Status, seconds: float) -> None:
        self.extension_point_duration.observe(
            seconds, point, _STATUS_LABEL[status.code], self.profile)

    def observe_attempt(self, result: str, seconds: float) -> None:
        self.schedule_attempts.inc(result, self.profile)
        self.attempt_duration.observe(seconds, result, self.profile)

    def observe_permit_wait(self, result: str, seconds: float) -> None:
        self.permit_wait_duration.observe(seconds, result)

    def set_queue_counts(self, counts: Mapping[str, int]) -> None:
        for queue_name, count in counts.items():
            self.pending_pods.set(float(count), queue_name)

    def exposition(self) -> str:
        lines: list[str] = []
        for metric in self.all:
            lines += metric.header() + metric.render()
        return "\n".join(lines) + "\n"
