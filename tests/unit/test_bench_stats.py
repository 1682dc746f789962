"""The benchmark's own arithmetic: repeated-run statistics, the API server's write counter,
trickled arrival order, W6's useless evictions, W7's share error, and the sizes and gang
attempt averages of issue 28's W10 and W11."""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import pytest

from bench import report
from bench.observe import api_writes, histogram_totals, writes_delta
from bench.run import gang_attempts, merged, plan, timeliness, waves
from bench.schedulers import contenders
from bench.workloads import (
    PERF_SHAPE,
    TRICKLE_WINDOW,
    Workload,
    build_workloads,
    deserved_slots,
)


@pytest.mark.parametrize(("values", "expected"), [
    ([], None),
    ([None, None], None),
    ([3.0], {"median": 3.0, "min": 3.0, "max": 3.0, "runs": 1}),
    ([5.0, 1.0, 3.0], {"median": 3.0, "min": 1.0, "max": 5.0, "runs": 3}),
    ([4.0, None, 2.0], {"median": 3.0, "min": 2.0, "max": 4.0, "runs": 2}),
])
def test_summarize(values: list[float | None], expected: dict[str, float] | None) -> None:
    assert report.summarize(values) == expected


@pytest.mark.parametrize(("summary", "fmt", "expected"), [
    (None, "{:.1f}", "n/a"),
    ({"median": 2.0, "min": 2.0, "max": 2.0}, "{:.1f}", "2.0"),
    ({"median": 2.0, "min": 1.96, "max": 2.04}, "{:.1f}", "2.0"),  # equal once formatted
    ({"median": 2.0, "min": 1.0, "max": 3.5}, "{:.1f}", "2.0 (1.0-3.5)"),
])
def test_cell_shows_a_range_only_where_runs_differ(
        summary: dict[str, float] | None, fmt: str, expected: str) -> None:
    assert report._cell(summary, fmt) == expected


def _sample(verb: str, resource: str, subresource: str, count: int, code: str = "201",
            group: str = "") -> str:
    return (f'apiserver_request_total{{code="{code}",component="apiserver",dry_run="",'
            f'group="{group}",resource="{resource}",scope="resource",'
            f'subresource="{subresource}",verb="{verb}",version="v1"}} {count}')


METRICS = "\n".join([
    "# HELP apiserver_request_total [STABLE] Counter of apiserver requests",
    "# TYPE apiserver_request_total counter",
    _sample("POST", "pods", "binding", 40),
    _sample("POST", "pods", "binding", 2, code="409"),
    _sample("POST", "pods", "", 100),
    _sample("LIST", "pods", "", 7, code="200"),
    _sample("POST", "events", "", 30, group="events.k8s.io"),
    _sample("POST", "events", "", 5),
    _sample("PATCH", "pods", "status", 12, code="200"),
    'apiserver_request_total_other{verb="POST",resource="pods"} 999',
])


def test_api_writes_by_verb_and_resource() -> None:
    assert api_writes(METRICS) == {
        "POST pods/binding": 42.0,  # every code counts: a refused write is still a write
        "POST pods": 100.0,
        "POST events": 35.0,  # both event APIs
        "PATCH pods/status": 12.0,
    }


@pytest.mark.parametrize(("before", "after", "exclude", "expected"), [
    ({}, {"POST pods": 10.0}, (), {"POST pods": 10}),
    ({"POST pods": 4.0}, {"POST pods": 10.0, "POST pods/binding": 6.0}, ("POST pods",),
     {"POST pods/binding": 6}),
    ({"PATCH pods/status": 3.0}, {"PATCH pods/status": 3.0}, (), {}),  # no change: left out
])
def test_writes_delta(before: dict[str, float], after: dict[str, float],
                      exclude: tuple[str, ...], expected: dict[str, int]) -> None:
    assert writes_delta(before, after, exclude) == expected


@pytest.mark.parametrize(("writes", "expected"), [
    ({"POST pods/binding": 10, "POST events": 4, "PATCH events": 1, "PATCH pods/status": 3},
     {"writes_binds": 10, "writes_events": 5, "writes_other": 3}),
    ({}, {"writes_binds": 0, "writes_events": 0, "writes_other": 0}),
])
def test_derived_splits_the_writes(writes: dict[str, int], expected: dict[str, int]) -> None:
    figures = report.derived({"api_writes": writes})
    assert {k: figures[k] for k in expected} == expected


@pytest.mark.parametrize(("evicted", "free_before", "free_after", "expected"), [
    (8, 0, 0, 0),  # every victim's room was taken
    (8, 0, 3, 3),  # three freed slots left empty
    (2, 0, 5, 2),  # empty slots beyond the evictions are not the evictions' fault
    (0, 1, 4, 0),  # nothing evicted
    (4, 3, 1, 0),  # the storm used room that was free before it, too
])
def test_useless_evictions(evicted: int, free_before: int, free_after: int,
                           expected: int) -> None:
    assert report.useless_evictions(evicted, free_before, free_after) == expected


@pytest.mark.parametrize(("held", "deserved", "slots", "expected"), [
    ({"a": 10, "b": 20}, {"a": 10.0, "b": 20.0}, 30, 0.0),
    ({"a": 30, "b": 0}, {"a": 10.0, "b": 20.0}, 30, 20 / 30),
    ({"a": 5}, {"a": 10.0, "b": 20.0}, 30, (5 + 20) / 2 / 30),  # a queue with nothing held
    ({}, {}, 0, 0.0),
])
def test_share_error(held: dict[str, float], deserved: dict[str, float], slots: int,
                     expected: float) -> None:
    assert report.share_error(held, deserved, slots) == pytest.approx(expected)


def test_deserved_slots_follow_the_weights() -> None:
    w7 = build_workloads(0.2)["W7"]
    deserved = deserved_slots(w7)
    assert sum(deserved.values()) == pytest.approx(w7.slots)
    assert deserved["q-w2"] == pytest.approx(2 * deserved["q-w1"])
    assert deserved["q-w3"] == pytest.approx(3 * deserved["q-w1"])


def _position(order: list[str]) -> dict[str, int]:
    return {name: index for index, name in enumerate(order)}


@pytest.mark.parametrize("sizes", [(3,) * 20, (2, 5, 1, 4) * 5, (7,)])
def test_trickled_order_interleaves_windows_of_gangs(sizes: tuple[int, ...]) -> None:
    plain = Workload("T", "test", 4, sizes)
    order, members, gang_of = plan(replace(plain, trickle=True))
    assert sorted(order) == sorted(plan(plain)[0])  # the same pods, each once
    at = _position(order)
    gangs = list(members)
    for first, second in itertools.pairwise(gangs):
        same_window = gangs.index(first) // TRICKLE_WINDOW == gangs.index(second) // \
            TRICKLE_WINDOW
        # Within a window the second gang starts before the first one is complete.
        if same_window and len(members[first]) > 1:
            assert at[members[second][0]] < at[members[first][-1]]
        if not same_window:  # windows follow each other
            assert max(at[p] for p in members[first]) < at[members[second][0]]
    for gang, pods in members.items():  # members keep their own order
        assert [at[p] for p in pods] == sorted(at[p] for p in pods)
        assert all(gang_of[p] == gang for p in pods)


@pytest.mark.parametrize(("name", "expected_waves"), [("W1", 1), ("W6", 2), ("W7", 1)])
def test_only_the_storm_comes_in_two_waves(name: str, expected_waves: int) -> None:
    workload = build_workloads(0.05)[name]
    order, _, gang_of = plan(workload)
    batches = waves(workload, order, gang_of)
    assert len(batches) == expected_waves
    assert [p for batch in batches for p in batch] == order or expected_waves == 2
    assert sorted(p for batch in batches for p in batch) == sorted(order)
    if expected_waves == 2:
        assert all(workload.second_wave(int(gang_of[p].split("-")[1])) for p in batches[1])
        assert not any(workload.second_wave(int(gang_of[p].split("-")[1]))
                       for p in batches[0])


def test_aggregate_takes_medians_per_workload_and_contender() -> None:
    runs: list[dict[str, Any]] = [
        {"workload": "W1", "scheduler": "ours", "throughput_whole": t, "notes": []}
        for t in (10.0, 30.0, 20.0)] + [
        {"workload": "W1", "scheduler": "upstream", "throughput_whole": 5.0, "notes": []}]
    table = report.aggregate(runs)
    assert table["W1"]["ours"]["throughput_whole"] == {
        "median": 20.0, "min": 10.0, "max": 30.0, "runs": 3}
    assert table["W1"]["upstream"]["throughput_whole"]["runs"] == 1


def test_merged_keeps_every_run_and_where_it_came_from() -> None:
    def document(release: str, contenders: dict[str, str], runs: int) -> dict[str, Any]:
        return {"meta": {"date": f"d-{release}", "kubernetes": release, "machine": "m",
                         "scale": 0.1, "contenders": contenders},
                "runs": [{"workload": "W1", "scheduler": next(iter(contenders))}] * runs}

    whole = merged([document("1.37.2", {"ours-eq": "a"}, 2),
                    document("1.35.8", {"upstream": "b"}, 1)])
    assert [run["kubernetes"] for run in whole["runs"]] == ["1.37.2", "1.37.2", "1.35.8"]
    assert whole["meta"]["contenders"] == {"ours-eq": "a", "upstream": "b"}
    assert [part["kubernetes"] for part in whole["meta"]["parts"]] == ["1.37.2", "1.35.8"]
    assert whole["meta"]["date"] == "d-1.37.2"


def test_issue_28_workloads_have_their_defined_sizes_at_scale_1() -> None:
    workloads = build_workloads(1.0)
    w10 = workloads["W10"]
    assert (w10.nodes, len(w10.gang_sizes), set(w10.gang_sizes), w10.pods) == \
        (15000, 6250, {8}, 50000)
    for gangs in (1000, 2000, 3000):
        w11 = workloads[f"W11-{gangs}"]
        assert (w11.nodes, len(w11.gang_sizes), set(w11.gang_sizes)) == (5000, gangs, {3})
        assert w11.shape == PERF_SHAPE
        assert (PERF_SHAPE.node_cpu, PERF_SHAPE.pod_cpu) == ("4", "100m")


def _histogram(name: str, result: str | None, total: float, count: float) -> str:
    labels = f'{{profile="p",result="{result}"}}' if result else ""
    return f"{name}_sum{labels} {total}\n{name}_count{labels} {count}\n"


def test_histogram_totals_with_and_without_labels() -> None:
    text = (_histogram("h", "scheduled", 1.5, 3) + _histogram("h", "unschedulable", 9, 7)
            + _histogram("g", None, 2.5, 5) + 'h_bucket{result="scheduled",le="1"} 3\n')
    assert histogram_totals(text, "h") == (1.5, 3)
    assert histogram_totals(text, "h", "unschedulable") == (9, 7)
    assert histogram_totals(text, "g", None) == (2.5, 5)


def test_gang_attempt_is_native_per_group_cycle_and_ours_per_gang_placed() -> None:
    workload = build_workloads(0.01)["W11-1000"]
    native_metrics = (
        _histogram("scheduler_podgroup_scheduling_attempt_duration_seconds", "scheduled",
                   0.04, 10)
        + _histogram("scheduler_podgroup_scheduling_algorithm_duration_seconds", None,
                     0.02, 10))
    native: dict[str, Any] = {}
    gang_attempts(native, contenders()["native-eq"], workload, "", native_metrics)
    assert (native["gang_attempt_avg_ms"], native["gang_algorithm_avg_ms"]) == (4.0, 2.0)
    # Ours: 30 member cycles of 10 gangs, 0.06 s in all, minus what the window began with.
    ours_before = _histogram("scheduler_scheduling_attempt_duration_seconds", "scheduled",
                             0.01, 1)
    ours_after = _histogram("scheduler_scheduling_attempt_duration_seconds", "scheduled",
                            0.07, 31)
    ours: dict[str, Any] = {"gangs_placed": 10}
    gang_attempts(ours, contenders()["ours-eq"], workload, ours_before, ours_after)
    assert ours["gang_attempt_avg_ms"] == 6.0
    assert "gang_algorithm_avg_ms" not in ours


@pytest.mark.parametrize(("bound", "seen", "expected"), [
    # every event within the second: all on time; one seen before its bind counts as 0
    ({"a": 10.0, "b": 11.0}, {"a": 10.2, "b": 10.9},
     {"events_on_time": 1.0, "events_missing": 0, "event_lag_p50": 0.1, "event_lag_p99": 0.2}),
    # one late by 3 s, one never seen (late until the end, 20.0)
    ({"a": 10.0, "b": 11.0, "c": 12.0}, {"a": 10.5, "b": 14.0},
     {"events_on_time": 0.333, "events_missing": 1, "event_lag_p50": 3.0,
      "event_lag_p99": 7.9}),
    # exactly 1 s is on time
    ({"a": 10.0}, {"a": 11.0},
     {"events_on_time": 1.0, "events_missing": 0, "event_lag_p50": 1.0, "event_lag_p99": 1.0}),
])
def test_events_on_time_are_those_seen_within_a_second_of_the_bind(
        bound: dict[str, float], seen: dict[str, float], expected: dict[str, Any]) -> None:
    result: dict[str, Any] = {}
    timeliness(result, bound, seen, until=20.0)
    assert result == expected


def test_no_bind_no_event_figures() -> None:
    result: dict[str, Any] = {}
    timeliness(result, {}, {"a": 1.0}, until=2.0)
    assert result == {}
