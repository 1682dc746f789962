"""Fixtures and helpers for running the real Kubeflow training-operator against the session
cluster (see coscheduling.localcluster.operators)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.kuberay import BATCH_SCHEDULER, RayOperator
from coscheduling.localcluster.mpioperator import MpiOperator
from coscheduling.localcluster.operators import OperatorProcess, TrainingOperator
from coscheduling.localcluster.workloadcontrollers import (
    JOBSET,
    LWS,
    WorkloadController,
    WorkloadControllerProcess,
)

JOB_NAME_LABEL = "training.kubeflow.org/job-name"

StartOperator = Callable[[str], TrainingOperator]


def _stop_all(started: list[OperatorProcess]) -> None:
    for operator in started:
        operator.stop()
        assert operator.process is None or operator.process.poll() is not None, \
            f"{operator.title} pid {operator.pid} still running after stop()"


@pytest.fixture
def start_training_operator(local_cluster: LocalCluster, compat_crds: None,
                            tmp_path: Path) -> Iterator[StartOperator]:
    """`start_training_operator(gang_scheduler_name)`: a running operator, stopped after.

    crd/compat/ is applied first: the operator exits at start when the PodGroup kind of
    its --gang-scheduler-name path is not served."""
    started: list[OperatorProcess] = []

    def start(gang_scheduler_name: str) -> TrainingOperator:
        operator = TrainingOperator(local_cluster, tmp_path / f"operator-{len(started)}",
                                    gang_scheduler_name=gang_scheduler_name,
                                    log=lambda _: None)
        started.append(operator)
        return operator.start()

    yield start
    _stop_all(started)


@pytest.fixture
def start_ray_operator(local_cluster: LocalCluster, compat_crds: None,
                       tmp_path: Path) -> Iterator[Callable[..., RayOperator]]:
    """`start_ray_operator()`: a running KubeRay ray-operator (scheduler-plugins path; the
    x-k8s PodGroup CRD from crd/compat/ is applied first), stopped after;
    `start_ray_operator(None)`: one without a batch scheduler."""
    started: list[OperatorProcess] = []

    def start(batch_scheduler: str | None = BATCH_SCHEDULER) -> RayOperator:
        operator = RayOperator(local_cluster, tmp_path / f"ray-{len(started)}",
                               log=lambda _: None, batch_scheduler=batch_scheduler)
        started.append(operator)
        return operator.start()

    yield start
    _stop_all(started)


def _controller_fixture(controller: WorkloadController, local_cluster: LocalCluster,
                        tmp_path: Path) -> Iterator[Callable[[], WorkloadControllerProcess]]:
    started: list[OperatorProcess] = []

    def start() -> WorkloadControllerProcess:
        process = WorkloadControllerProcess(
            controller, local_cluster, tmp_path / f"{controller.operator.title}-{len(started)}",
            log=lambda _: None)
        started.append(process)
        return process.start()

    yield start
    _stop_all(started)


@pytest.fixture
def start_lws_controller(local_cluster: LocalCluster,
                         tmp_path: Path) -> Iterator[Callable[[], WorkloadControllerProcess]]:
    """`start_lws_controller()`: the real LeaderWorkerSet controller with its webhooks on
    loopback, stopped (webhooks removed) after."""
    yield from _controller_fixture(LWS, local_cluster, tmp_path)


@pytest.fixture
def start_jobset_controller(local_cluster: LocalCluster,
                            tmp_path: Path) -> Iterator[Callable[[], WorkloadControllerProcess]]:
    """`start_jobset_controller()`: the real JobSet controller, as the LWS one."""
    yield from _controller_fixture(JOBSET, local_cluster, tmp_path)


@pytest.fixture
def start_mpi_operator(local_cluster: LocalCluster,
                       tmp_path: Path) -> Iterator[Callable[[], MpiOperator]]:
    """`start_mpi_operator()`: the real MPI operator (no gang-scheduling flag), stopped
    after."""
    started: list[OperatorProcess] = []

    def start() -> MpiOperator:
        operator = MpiOperator(local_cluster, tmp_path / f"mpi-{len(started)}",
                               log=lambda _: None)
        started.append(operator)
        return operator.start()

    yield start
    _stop_all(started)


def pytorchjob(name: str, *, workers: int, cpu: str) -> dict[str, Any]:
    """A PyTorchJob of one master and `workers` workers, each asking for `cpu`."""

    def replicas(count: int) -> dict[str, Any]:
        container = {"name": "pytorch", "image": "busybox", "command": ["true"],
                     "resources": {"requests": {"cpu": cpu}, "limits": {"cpu": cpu}}}
        return {"replicas": count, "restartPolicy": "OnFailure",
                "template": {"spec": {"containers": [container],
                                      "terminationGracePeriodSeconds": 0}}}

    return {"apiVersion": "kubeflow.org/v1", "kind": "PyTorchJob", "metadata": {"name": name},
            "spec": {"pytorchReplicaSpecs": {"Master": replicas(1),
                                             "Worker": replicas(workers)}}}


def create_pytorchjob(kube: KubeClient, namespace: str, body: dict[str, Any]) -> None:
    kube.create(f"/apis/kubeflow.org/v1/namespaces/{namespace}/pytorchjobs", body)


def job_pods(kube: KubeClient, namespace: str, job: str) -> list[dict[str, Any]]:
    answer = kube.get(f"/api/v1/namespaces/{namespace}/pods",
                      labelSelector=f"{JOB_NAME_LABEL}={job}")
    return list(answer.get("items") or [])


def bound(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods if p["spec"].get("nodeName"))
