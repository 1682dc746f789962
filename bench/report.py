"""Figures from raw timestamps, and the Markdown table, chart and profile summary.

Kept apart from the runner so the numbers can be recomputed from results.json alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

CONTENDERS = ("ceiling", "upstream", "ours")


def percentile(values: Sequence[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..1), None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def throughput(created: Mapping[str, float], bound: Mapping[str, float]) -> dict[str, Any]:
    """Pods/s over the whole run (first created -> last bound) and over the middle 80%."""
    times = sorted(bound[name] for name in created if name in bound)
    if not times or not created:
        return {"whole": None, "steady": None, "duration": None}
    start = min(created.values())
    duration = times[-1] - start
    whole = len(times) / duration if duration > 0 else None
    low, high = int(0.1 * len(times)), max(math.ceil(0.9 * len(times)) - 1, 0)
    span = times[high] - times[low]
    steady = (high - low) / span if high > low and span > 0 else None
    return {"whole": whole, "steady": steady, "duration": duration}


def gang_outcomes(members: Mapping[str, Sequence[str]], created: Mapping[str, float],
                  bound: Mapping[str, float]) -> dict[str, Any]:
    """Placed and partial gangs, and latency last member created -> last member bound."""
    latencies = []
    placed = partial = 0
    partial_names = []
    for gang, pods in members.items():
        count = sum(1 for pod in pods if pod in bound)
        if count == len(pods):
            placed += 1
            latencies.append(max(bound[p] for p in pods) - max(created[p] for p in pods))
        elif count:
            partial += 1
            partial_names.append(f"{gang} ({count}/{len(pods)})")
    return {
        "gangs": len(members), "placed": placed, "partial": partial,
        "partial_names": partial_names[:20],
        "latency_p50": percentile(latencies, 0.50), "latency_p99": percentile(latencies, 0.99),
    }


def timeline(created: Mapping[str, float], bound: Mapping[str, float]) -> list[float]:
    """Bind times in seconds since the first pod was created, ascending (for the chart)."""
    if not created:
        return []
    start = min(created.values())
    return [round(t - start, 4) for t in sorted(bound[n] for n in created if n in bound)]


# -- Markdown -------------------------------------------------------------------------

ROWS: tuple[tuple[str, str, str, bool], ...] = (
    # (label, key, format, whether a ratio means something)
    ("pods bound", "bound", "{:.0f}", True),
    ("throughput, whole run (pods/s)", "throughput_whole", "{:.1f}", True),
    ("throughput, steady state (pods/s)", "throughput_steady", "{:.1f}", True),
    ("gang latency p50 (s)", "gang_latency_p50", "{:.2f}", True),
    ("gang latency p99 (s)", "gang_latency_p99", "{:.2f}", True),
    ("scheduling cycle p50 (ms)", "cycle_p50_ms", "{:.2f}", True),
    ("scheduling cycle p99 (ms)", "cycle_p99_ms", "{:.2f}", True),
    ("scheduler peak RSS (MiB)", "peak_rss_mib", "{:.0f}", True),
    ("scheduler CPU during the run (s)", "cpu_seconds", "{:.1f}", True),
    ("gangs placed", "gangs_placed", "{:.0f}", True),
    ("partial gangs (ceiling: no gang semantics)", "gangs_partial", "{:.0f}", False),
    ("over-committed nodes", "overcommitted_nodes", "{:.0f}", False),
    ("gangs breaking their own constraints (W5; ceiling: ignores them)",
     "constraint_violations", "{:.0f}", False),
    ("API server + etcd CPU during the run (s)", "control_plane_cpu_seconds", "{:.1f}", True),
    ("CPU of other processes on the machine (s)", "other_cpu_seconds", "{:.1f}", False),
)


def _cell(value: Any, fmt: str) -> str:
    if value is None:
        return "n/a"
    return fmt.format(value)


def _ratio(ours: Any, other: Any) -> str:
    if ours is None or other is None or other == 0:
        return "n/a"
    return f"{ours / other:.2f}x"


def markdown(runs: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    by_workload: dict[str, dict[str, Mapping[str, Any]]] = defaultdict(dict)
    titles: dict[str, str] = {}
    for run in runs:
        by_workload[run["workload"]][run["scheduler"]] = run
        titles[run["workload"]] = run["workload_description"]
    lines = [
        "# Benchmark results",
        "",
        f"Date: {meta['date']}. Machine: {meta['machine']}. Scale: {meta['scale']}.",
        "",
        "Contenders, one after another on a fresh local control plane (etcd + kube-apiserver "
        f"v{meta['kubernetes']}, nodes are API objects, no kubelets):",
        "",
        *(f"- **{key}**: {text}" for key, text in meta["contenders"].items()),
        "",
        "Ratios are ours / other (for throughput and gangs placed higher is better, for the "
        "rest lower is better). Throughput: first pod created -> last pod bound; steady state "
        "is the middle 80% of binds. Gang latency: last member created -> last member bound. "
        "Scheduling cycle (bucket-interpolated from the schedulers' own histograms): ours, "
        "`scheduler_scheduling_attempt_duration_seconds{result=\"scheduled\"}` (observed "
        "when its scheduling cycle ends); upstream, `scheduler_scheduling_algorithm_duration_"
        "seconds` (PreFilter, Filter, Score), because upstream observes its attempt histogram "
        "only after binding, Permit wait included (that figure is in results.json as "
        "attempt_p50_ms/attempt_p99_ms). CPU and peak RSS: the scheduler process (/proc); "
        "CPU counts from the first pod created to the end of the run.",
        "",
        "One run per cell on a shared machine: \"CPU of other processes\" is the machine's "
        "busy CPU during the run minus the scheduler, the control plane and the benchmark "
        "itself (other work, such as test suites, running at the same time); where it is "
        "large the cell is noisy. Pod creation runs concurrently with scheduling, so all "
        "three contend with the creator for the same API server and the same 2 cores.",
        "",
    ]
    for workload in sorted(by_workload):
        runs_here = by_workload[workload]
        lines += [f"## {workload}: {titles[workload]}", "",
                  "| metric | ceiling | upstream | ours | ours/upstream | ours/ceiling |",
                  "|---|---:|---:|---:|---:|---:|"]
        for label, key, fmt, ratios in ROWS:
            values = [runs_here.get(c, {}).get(key) for c in CONTENDERS]
            if all(v is None for v in values):
                continue
            ceiling, upstream_value, ours = values
            against = ((_ratio(ours, upstream_value), _ratio(ours, ceiling)) if ratios
                       else ("", ""))
            lines.append(f"| {label} | " + " | ".join(_cell(v, fmt) for v in values)
                         + f" | {against[0]} | {against[1]} |")
        notes = [f"{c}: {note}" for c in CONTENDERS for note in runs_here.get(c, {})
                 .get("notes", [])]
        if notes:
            lines += ["", *(f"- {note}" for note in notes)]
        lines.append("")
    return "\n".join(lines)


def chart(runs: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Bound pods over time, one panel per workload, one line per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_workload: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for run in runs:
        by_workload[run["workload"]].append(run)
    names = sorted(by_workload)
    columns = 2 if len(names) > 1 else 1
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 4.2 * rows),
                                squeeze=False)
    colors = {"ceiling": "tab:gray", "upstream": "tab:blue", "ours": "tab:orange"}
    for index, workload in enumerate(names):
        axis = axes[index // columns][index % columns]
        for run in sorted(by_workload[workload], key=lambda r: CONTENDERS.index(r["scheduler"])):
            times = run["timeline"]
            axis.step([0.0, *times], list(range(len(times) + 1)), where="post",
                      label=run["scheduler"], color=colors.get(run["scheduler"]))
        axis.set_title(f"{workload}: {by_workload[workload][0]['workload_description']}",
                       fontsize=9)
        axis.set_xlabel("seconds since the first pod was created")
        axis.set_ylabel("pods bound")
        axis.grid(alpha=0.3)
        axis.legend(loc="lower right", fontsize=8)
    for index in range(len(names), rows * columns):
        axes[index // columns][index % columns].set_visible(False)
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


# -- py-spy raw profiles --------------------------------------------------------------

def profile_tables(raw: str, top: int = 15) -> dict[str, list[tuple[str, float]]]:
    """Top functions by self and by cumulative share of samples, from py-spy's raw format.

    Each line is `frame;frame;...;frame count`, outermost frame first.
    """
    boring = ("(threading.py:", "(concurrent/futures/thread.py:")  # every thread's base
    self_counts: dict[str, int] = defaultdict(int)
    cumulative: dict[str, int] = defaultdict(int)
    total = 0
    for line in raw.splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [f for f in stack.split(";") if f]
        if not frames:
            continue
        total += count
        self_counts[frames[-1]] += count
        for frame in set(frames):
            if not any(marker in frame for marker in boring):
                cumulative[frame] += count
    if total == 0:
        return {"self": [], "cumulative": [], "samples": []}

    def ranked(counts: Mapping[str, int]) -> list[tuple[str, float]]:
        best = sorted(counts.items(), key=lambda item: item[1], reverse=True)[:top]
        return [(name, 100.0 * value / total) for name, value in best]

    return {"self": ranked(self_counts), "cumulative": ranked(cumulative),
            "samples": [("total", float(total))]}


def profile_markdown(tables: Mapping[str, list[tuple[str, float]]], context: str) -> str:
    samples = int(tables["samples"][0][1]) if tables["samples"] else 0
    lines = ["# Profile of ours during W1 (py-spy --gil: samples of the thread holding the GIL)",
             "",
             context, "", f"Samples: {samples} (100 Hz).", ""]
    for kind, title in (("cumulative", "cumulative (inclusive)"), ("self", "self")):
        lines += [f"## Top functions by {title} share of GIL-holding samples", "",
                  "| # | function (file) | % of samples |", "|---:|---|---:|"]
        lines += [f"| {i} | `{name}` | {share:.1f} |"
                  for i, (name, share) in enumerate(tables[kind], 1)]
        lines.append("")
    return "\n".join(lines)
