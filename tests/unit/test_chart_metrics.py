"""The chart's Grafana dashboard and PrometheusRule name only metrics the scheduler exports,
with labels it gives them (issue 29)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from coscheduling.framework.metrics import SchedulerMetrics

CHART = Path(__file__).resolve().parents[2] / "deploy" / "chart"
METRIC = re.compile(r"\b((?:scheduler|coscheduling)_[a-z_]+)")
BY_LABELS = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")
SERIES = ("_bucket", "_sum", "_count")


def _exprs() -> list[str]:
    dashboard = json.loads((CHART / "files" / "dashboard.json").read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel["targets"]]
    rules = (CHART / "templates" / "prometheusrule.yaml").read_text()
    exprs += re.findall(r"^\s*expr:\s*(.+)$", rules, re.MULTILINE)
    return exprs


def _exported() -> dict[str, tuple[str, ...]]:
    metrics = SchedulerMetrics()
    return {m.name: (*m.label_names, "le") for m in metrics.all}


def test_every_metric_named_exists() -> None:
    exported = _exported()
    named = set()
    for expr in _exprs():
        for name in METRIC.findall(expr):
            for suffix in SERIES:
                if name.endswith(suffix) and name.removesuffix(suffix) in exported:
                    name = name.removesuffix(suffix)
            named.add(name)
    assert named, "the dashboard and rules name no metric"
    assert named <= set(exported), sorted(named - set(exported))
    # Every metric the scheduler exports is on the dashboard or in an alert.
    assert set(exported) - named <= {"scheduler_preemption_victims"}, sorted(
        set(exported) - named)


def test_every_label_grouped_by_exists_on_the_metrics_of_the_expression() -> None:
    exported = _exported()
    for expr in _exprs():
        labels = {label.strip() for group in BY_LABELS.findall(expr)
                  for label in group.split(",") if label.strip()}
        names = {n.removesuffix("_bucket") for n in METRIC.findall(expr)}
        known = {label for n in names if n in exported for label in exported[n]}
        assert labels <= known, (expr, sorted(labels - known))
