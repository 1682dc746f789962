"""The reporter against the real API server: a bind's Scheduled event is written before the
reports of pods still pending, every Scheduled event is written once, and a repeated report
is not written again."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coscheduling.api.pods import Pod, parse_pod
from coscheduling.cluster.client import ClientSettings, KubeClient
from coscheduling.cluster.reporter import Reporter
from coscheduling.localcluster import LocalCluster
from tests.integration.kube import create_pod, events_for, pod_body, wait_until


@pytest.fixture
def report_client(local_cluster: LocalCluster) -> Iterator[KubeClient]:
    client = KubeClient(ClientSettings(kubeconfig=str(local_cluster.kubeconfig), qps=1000,
                                       burst=2000))
    yield client
    client.close()


def _pods(kube: KubeClient, namespace: str, count: int) -> list[Pod]:
    prefix = uuid.uuid4().hex[:6]
    return [parse_pod(create_pod(kube, namespace, pod_body(f"r-{prefix}-{i}",
                                                           scheduler="nobody")))
            for i in range(count)]


def _recording(client: KubeClient, held: threading.Event | None = None
               ) -> tuple[list[str], threading.Event]:
    """The reasons of the events ``client`` creates, in order; the first write waits for
    ``held`` to be set (while it waits, more reports queue behind it)."""
    reasons: list[str] = []
    writing = threading.Event()
    create: Callable[..., Any] = client.create

    def recorded(path: str, body: Any, **kwargs: Any) -> Any:
        if held is not None and not writing.is_set():
            writing.set()
            held.wait(30)
        reasons.append(str(body.get("reason")))
        return create(path, body, **kwargs)

    client.create = recorded  # type: ignore[method-assign]
    return reasons, writing


def test_a_binds_event_is_written_before_pending_pods_reports(
        kube: KubeClient, namespace: str, report_client: KubeClient) -> None:
    pending, bound = _pods(kube, namespace, 4), _pods(kube, namespace, 1)[0]
    held = threading.Event()
    reasons, writing = _recording(report_client, held)
    reporter = Reporter(report_client, "test-reporter", waiting_delay=0.0, writers=1)
    try:
        reporter.unschedulable(pending[0], "0/1 nodes are available")
        assert writing.wait(30), "the first report was never written"
        for pod in pending[1:]:  # queued while the only writer is busy
            reporter.unschedulable(pod, "0/1 nodes are available")
        reporter.scheduled(bound, "node-a")
        held.set()
        wait_until(lambda: len(reasons) == 5, what="every report written")
    finally:
        held.set()
        reporter.stop()
    assert reasons == ["FailedScheduling", "Scheduled"] + ["FailedScheduling"] * 3


def test_every_scheduled_event_is_written_once_and_a_repeat_is_not_written(
        kube: KubeClient, namespace: str, report_client: KubeClient) -> None:
    pods = _pods(kube, namespace, 60)
    reasons, _ = _recording(report_client)
    reporter = Reporter(report_client, "test-reporter", waiting_delay=0.0)
    try:
        reporter.unschedulable(pods[0], "0/1 nodes are available")
        wait_until(lambda: reasons == ["FailedScheduling"], what="the failure written")
        reporter.unschedulable(pods[0], "0/1 nodes are available")  # the same again
        for pod in pods:
            reporter.scheduled(pod, "node-a")
        wait_until(lambda: len(reasons) >= 61, what="a Scheduled event per pod")
        reporter.flush()
    finally:
        reporter.stop()
    assert sorted(reasons) == ["FailedScheduling"] + ["Scheduled"] * 60
    for pod in pods:
        events = [e for e in events_for(kube, namespace, pod.name)
                  if e.get("reason") == "Scheduled"]
        assert [e["message"] for e in events] == [f"Successfully assigned {pod.key} to node-a"]


def test_a_deleted_pods_preempted_event_is_still_written_but_its_pending_failure_is_not(
        kube: KubeClient, namespace: str, report_client: KubeClient) -> None:
    """A victim's watch delete often arrives before its Preempted event is written: forgetting
    the pod drops what it was waiting for, never what was done to it."""
    victim, waiting = _pods(kube, namespace, 2)
    held = threading.Event()
    reasons, writing = _recording(report_client, held)
    reporter = Reporter(report_client, "test-reporter", waiting_delay=0.0, writers=1)
    blocker = _pods(kube, namespace, 1)[0]
    try:
        reporter.event(blocker, "Normal", "Blocking", "holds the only writer")
        assert writing.wait(30), "the first report was never written"
        reporter.event(victim, "Normal", "Preempted", "Preempted by gang ns/big")
        reporter.unschedulable(waiting, "0/1 nodes are available")
        reporter.forget(victim)
        reporter.forget(waiting)
        held.set()
        wait_until(lambda: len(reasons) == 2, what="the queued event written")
        reporter.flush()
    finally:
        held.set()
        reporter.stop()
    assert reasons == ["Blocking", "Preempted"]
