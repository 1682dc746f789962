"""Figures from raw timestamps, and the Markdown table, chart and profile summary.

Kept apart from the runner so the numbers can be recomputed from results.json alone.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

CONTENDERS = ("ceiling", "upstream", "upstream-eq", "native", "native-eq", "ours",
              "ours-eq", "ours-base")


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


def useless_evictions(evicted: int, free_before: int, free_after: int) -> int:
    """Evicted pods whose room nobody took: the free slots the run ended with beyond those
    it started the storm with, as far as evictions made them (every pod is one slot)."""
    return max(0, min(evicted, free_after - free_before))


def share_error(held: Mapping[str, float], deserved: Mapping[str, float],
                slots: int) -> float:
    """The fraction of the cluster's slots held by the wrong queue: half the sum of each
    queue's distance from its deserved share (0 is exact, 1 is everything misplaced)."""
    if slots <= 0:
        return 0.0
    names = set(held) | set(deserved)
    return sum(abs(held.get(n, 0) - deserved.get(n, 0.0)) for n in names) / 2 / slots


def summarize(values: Sequence[float | None]) -> dict[str, float] | None:
    """Median, min and max of the runs that measured the figure (None if none did)."""
    present = sorted(v for v in values if v is not None)
    if not present:
        return None
    median = percentile(present, 0.5)
    assert median is not None
    return {"median": median, "min": present[0], "max": present[-1], "runs": len(present)}


def timeline(created: Mapping[str, float], bound: Mapping[str, float]) -> list[float]:
    """Bind times in seconds since the first pod was created, ascending (for the chart)."""
    if not created:
        return []
    start = min(created.values())
    return [round(t - start, 4) for t in sorted(bound[n] for n in created if n in bound)]


# -- Markdown -------------------------------------------------------------------------

ROWS: tuple[tuple[str, str, str], ...] = (
    # (label, key, format)
    ("pods bound (at the end)", "bound", "{:.0f}"),
    ("throughput, whole run (pods/s)", "throughput_whole", "{:.1f}"),
    ("throughput, steady state (pods/s)", "throughput_steady", "{:.1f}"),
    ("gang latency p50 (s)", "gang_latency_p50", "{:.2f}"),
    ("gang latency p99 (s)", "gang_latency_p99", "{:.2f}"),
    ("W6: high-priority gang latency p50 (s)", "high_gang_latency_p50", "{:.2f}"),
    ("W6: high-priority gang latency p99 (s)", "high_gang_latency_p99", "{:.2f}"),
    ("average gang attempt (ms; scheduler_perf's figure, see the terms)",
     "gang_attempt_avg_ms", "{:.2f}"),
    ("... native: its algorithm part (ms; no status write)", "gang_algorithm_avg_ms",
     "{:.2f}"),
    ("scheduling cycle p50 (ms)", "cycle_p50_ms", "{:.2f}"),
    ("scheduling cycle p99 (ms)", "cycle_p99_ms", "{:.2f}"),
    ("unschedulable attempts", "unschedulable_attempts", "{:.0f}"),
    ("API writes by the scheduler in the run", "api_writes_total", "{:.0f}"),
    ("... of which binds", "writes_binds", "{:.0f}"),
    ("... of which events", "writes_events", "{:.0f}"),
    ("... of which other (status, deletes, ...)", "writes_other", "{:.0f}"),
    ("events on time: Scheduled events seen within 1 s of their bind (share of binds)",
     "events_on_time", "{:.3f}"),
    ("Scheduled event lag p50 (s; bind -> event, both seen by the harness's watches)",
     "event_lag_p50", "{:.2f}"),
    ("Scheduled event lag p99 (s)", "event_lag_p99", "{:.2f}"),
    ("pod creation time (s)", "creation_seconds", "{:.1f}"),
    ("scheduler peak RSS (MiB)", "peak_rss_mib", "{:.0f}"),
    ("start-up: process start to the probe pod bound (s)", "startup_seconds", "{:.1f}"),
    ("scheduler CPU during the run (s)", "cpu_seconds", "{:.1f}"),
    ("gangs placed (at the end)", "gangs_placed", "{:.0f}"),
    ("partial gangs (ceiling: no gang semantics)", "gangs_partial", "{:.0f}"),
    ("over-committed nodes", "overcommitted_nodes", "{:.0f}"),
    ("gangs breaking their own constraints (W5; ceiling: ignores them)",
     "constraint_violations", "{:.0f}"),
    ("W6: high-priority gangs placed", "high_gangs_placed", "{:.0f}"),
    ("W6: broken low-priority gangs", "broken_gangs", "{:.0f}"),
    ("pods evicted", "evicted_pods", "{:.0f}"),
    ("W6: useless evictions", "useless_evictions", "{:.0f}"),
    ("W7: share error (fraction of slots held by the wrong queue)", "share_error", "{:.3f}"),
    ("W8: large gangs that ran (of those that arrived)", "large_gangs_ran", "{:.0f}"),
    ("W8: large gangs that never ran", "large_gangs_never_ran", "{:.0f}"),
    ("W8: large gang wait p50 (s)", "large_wait_p50", "{:.1f}"),
    ("W8: large gang wait p99 (s)", "large_wait_p99", "{:.1f}"),
    ("W8: small jobs that ran (of those that arrived)", "small_jobs_ran", "{:.0f}"),
    ("W8: small job wait p50 (s; pending at the end: until the end)", "small_wait_p50",
     "{:.1f}"),
    ("W8: small job wait p99 (s; pending at the end: until the end)", "small_wait_p99",
     "{:.1f}"),
    ("W8: utilization (busy slot-seconds / slot-seconds)", "utilization", "{:.3f}"),
    ("W9: devices given twice", "devices_given_twice", "{:.0f}"),
    ("W9: claims allocated on another node than their pod's", "claims_on_another_node",
     "{:.0f}"),
    ("W9: bound pods without an allocated claim", "bound_without_device", "{:.0f}"),
    ("API server + etcd CPU during the run (s)", "control_plane_cpu_seconds", "{:.1f}"),
    ("CPU of other processes on the machine (s)", "other_cpu_seconds", "{:.1f}"),
)
# Ratios shown under each table: (numerator, denominator), each on equal terms or not.
PAIRS = (("ours-eq", "upstream-eq"), ("ours-eq", "native-eq"), ("ours-eq", "ceiling"),
         ("ours", "upstream"), ("ours", "native"), ("ours", "ceiling"),
         ("ours-base", "ceiling"), ("ours", "ours-base"))
RATIO_KEYS = ("throughput_whole", "throughput_steady", "gang_latency_p99", "utilization",
              "high_gang_latency_p99", "peak_rss_mib", "cpu_seconds", "api_writes_total",
              "gang_attempt_avg_ms", "startup_seconds")


def derived(run: Mapping[str, Any]) -> dict[str, Any]:
    """The run's figures plus the API writes split into binds, events and the rest, and
    W7's slots per queue."""
    figures = dict(run)
    writes: Mapping[str, int] = run.get("api_writes") or {}
    if "api_writes" in run:
        binds = writes.get("POST pods/binding", 0)
        events = sum(v for k, v in writes.items() if k.split(" ")[1] == "events")
        figures.update(writes_binds=binds, writes_events=events,
                       writes_other=sum(writes.values()) - binds - events)
    for queue, held in (run.get("queue_slots") or {}).items():
        figures[f"slots:{queue}"] = held
    for queue, share in (run.get("queue_deserved") or {}).items():
        figures[f"deserved:{queue}"] = share
    return figures


def aggregate(runs: Iterable[Mapping[str, Any]]) -> dict[str, dict[str, dict[str, Any]]]:
    """workload -> contender -> figure -> summarize() over the repeated runs."""
    grouped: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for run in runs:
        grouped[(run["workload"], run["scheduler"])].append(derived(run))
    table: dict[str, dict[str, dict[str, Any]]] = defaultdict(dict)
    for (workload, contender), group in grouped.items():
        keys = {k for figures in group for k, v in figures.items()
                if isinstance(v, int | float) and not isinstance(v, bool)}
        table[workload][contender] = {
            k: summarize([f.get(k) for f in group]) for k in sorted(keys)}
    return table


def _cell(summary: Mapping[str, float] | None, fmt: str) -> str:
    """"median (min-max)", or the one value when the runs agree or there is one run."""
    if summary is None:
        return "n/a"
    text = fmt.format(summary["median"])
    low, high = fmt.format(summary["min"]), fmt.format(summary["max"])
    return text if low == high else f"{text} ({low}-{high})"


def _ratio(ours: Mapping[str, float] | None, other: Mapping[str, float] | None) -> str:
    if not ours or not other or not other["median"]:
        return "n/a"
    return f"{ours['median'] / other['median']:.2f}x"


def rank(contender: str) -> tuple[int, str]:
    """Where a contender's column goes: CONTENDERS' order, unknown ones last."""
    return (CONTENDERS.index(contender) if contender in CONTENDERS else len(CONTENDERS),
            contender)


def ordered(contenders: Iterable[str]) -> list[str]:
    return sorted(contenders, key=rank)


def workload_table(name: str, cells: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One workload's table (median and range per contender) and its ratios."""
    columns = ordered(cells)
    lines = ["| metric | " + " | ".join(columns) + " |",
             "|---|" + "---:|" * len(columns)]
    rows = list(ROWS)
    queues = sorted({k.split(":", 1)[1] for c in cells.values() for k in c
                     if k.startswith("slots:")})
    for queue in queues:
        share = next((c[f"deserved:{queue}"] for c in cells.values()
                      if c.get(f"deserved:{queue}")), None)
        deserved = f" (deserved {share['median']:.0f})" if share else ""
        rows.append((f"W7: slots held by {queue}{deserved}", f"slots:{queue}", "{:.0f}"))
    for label, key, fmt in rows:
        values = [cells[c].get(key) for c in columns]
        if all(v is None for v in values):
            continue
        lines.append(f"| {label} | " + " | ".join(_cell(v, fmt) for v in values) + " |")
    pairs = [(a, b) for a, b in PAIRS if a in cells and b in cells]
    if pairs:
        lines += ["", "| ratio (medians) | " + " | ".join(f"{a} / {b}" for a, b in pairs)
                  + " |", "|---|" + "---:|" * len(pairs)]
        for label, key, _ in ROWS:
            if key not in RATIO_KEYS:
                continue
            ratios = [_ratio(cells[a].get(key), cells[b].get(key)) for a, b in pairs]
            if any(r != "n/a" for r in ratios):
                lines.append(f"| {label} | " + " | ".join(ratios) + " |")
    return lines


def markdown(runs: Iterable[Mapping[str, Any]], meta: Mapping[str, Any]) -> str:
    runs = list(runs)
    table = aggregate(runs)
    titles = {run["workload"]: run["workload_description"] for run in runs}
    notes: dict[str, list[str]] = defaultdict(list)
    for run in runs:
        for note in run.get("notes", []):
            text = f"{run['scheduler']}: {note}"
            if text not in notes[run["workload"]]:
                notes[run["workload"]].append(text)
    repeats = max((c["bound"]["runs"] for w in table.values() for c in w.values()
                   if c.get("bound")), default=1)
    lines = [
        "# Benchmark results",
        "",
        f"Date: {meta['date']}. Machine: {meta['machine']}. Scale: {meta['scale']}. "
        f"Runs per cell: {repeats} (cells show the median and, where the runs differ, "
        "the min-max range).",
        "",
        "Contenders, one after another on a fresh local control plane (etcd + kube-apiserver "
        f"v{meta['kubernetes']}, nodes are API objects, no kubelets):",
        "",
        *(f"- **{key}**: {text}" for key, text in meta["contenders"].items()),
        "",
        *meta.get("terms", []),
        "",
    ]
    for workload in sorted(table):
        lines += [f"## {workload}: {titles[workload]}", ""]
        lines += workload_table(workload, table[workload])
        if notes[workload]:
            lines += ["", *(f"- {note}" for note in notes[workload])]
        lines.append("")
    return "\n".join(lines)


def chart(runs: Iterable[Mapping[str, Any]], path: Path) -> None:
    """Bound pods over time, one panel per workload, one line per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_workload: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for run in runs:
        if not run.get("repeat"):  # the first of the repeated runs
            by_workload[run["workload"]].append(run)
    names = sorted(by_workload)
    columns = 2 if len(names) > 1 else 1
    rows = math.ceil(len(names) / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(6.5 * columns, 4.2 * rows),
                                squeeze=False)
    colors = {"ceiling": "tab:gray", "upstream": "tab:blue", "upstream-eq": "tab:cyan",
              "native": "tab:green", "native-eq": "tab:olive", "ours": "tab:orange",
              "ours-eq": "tab:red", "ours-base": "tab:brown"}
    for index, workload in enumerate(names):
        axis = axes[index // columns][index % columns]
        for run in sorted(by_workload[workload], key=lambda r: rank(r["scheduler"])):
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


def profile_markdown(tables: Mapping[str, list[tuple[str, float]]], context: str,
                     workload: str = "W1") -> str:
    samples = int(tables["samples"][0][1]) if tables["samples"] else 0
    lines = [f"# Profile of ours during {workload} (py-spy --gil: samples of the thread "
             "holding the GIL)",
             "",
             context, "", f"Samples: {samples} (100 Hz).", ""]
    for kind, title in (("cumulative", "cumulative (inclusive)"), ("self", "self")):
        lines += [f"## Top functions by {title} share of GIL-holding samples", "",
                  "| # | function (file) | % of samples |", "|---:|---|---:|"]
        lines += [f"| {i} | `{name}` | {share:.1f} |"
                  for i, (name, share) in enumerate(tables[kind], 1)]
        lines.append("")
    return "\n".join(lines)
