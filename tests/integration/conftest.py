"""Fixtures for tests against a real local control plane (see coscheduling.localcluster).

The cluster is built and started once per session; a build or start failure raises, so
integration tests fail rather than skip when the control plane is unavailable.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from coscheduling.localcluster import LocalCluster, ensure_binaries
from tests.integration.fixtures import (  # noqa: F401
    compat_crds,
    crd,
    kube,
    make_namespace,
    real_nodes,
    start_scheduler,
)
from tests.integration.kube import wait_until
from tests.integration.operators import (  # noqa: F401
    start_jobset_controller,
    start_lws_controller,
    start_mpi_operator,
    start_ray_operator,
    start_training_operator,
)

INTEGRATION_DIR = Path(__file__).resolve().parent
NOT_READY_TAINT = "node.kubernetes.io/not-ready"


# Files whose tests run real containers (kubelets, the scheduler's image) or operators built
# from Go modules: marked `real`, so `make test` leaves them to `make test-real` (CI runs both).
REAL_RUN_FILES = frozenset(
    {
        "test_derived_groups.py",  # LWS, JobSet, MPI operator, KubeRay controllers
        "test_e2e.py",  # the image and the chart on three kubelets
        "test_image.py",  # builds the scheduler's image
        "test_kuberay.py",  # the KubeRay operator
        "test_real_dra.py",  # a DRA driver on a kubelet
        "test_real_nodes.py",  # kubelets, containerd
        "test_training_operator.py",  # the Kubeflow training operator
    }
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test under tests/integration as `integration`, and those of REAL_RUN_FILES
    as `real` too."""
    for item in items:
        if item.path.is_relative_to(INTEGRATION_DIR):
            item.add_marker(pytest.mark.integration)
            if item.path.name in REAL_RUN_FILES:
                item.add_marker(pytest.mark.real)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the binaries before the first test runs, with progress shown live.

    A first build takes 10+ minutes, more than the per-test timeout that would otherwise
    include it. A failure here is only reported: the fixtures call ensure_binaries again
    and raise it, so the tests fail (never skip).
    """
    if session.config.option.collectonly or not any(
        item.path.is_relative_to(INTEGRATION_DIR) for item in session.items
    ):
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")

    def log(message: str) -> None:
        with capture.global_and_fixture_disabled():
            print(f"\n[localcluster] {message}", file=sys.stderr, flush=True)

    try:
        ensure_binaries(log=log)
    except Exception as error:
        log(f"building the control plane failed: {error}")


@pytest.fixture(scope="session")
def wait_for() -> Callable[..., Any]:
    """`wait_for(condition, timeout=60, interval=0.2, what="")`: poll until truthy or fail."""
    return wait_until


_SESSION_PIDS: list[int] = []


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cluster = LocalCluster(tmp_path_factory.mktemp("localcluster"), binaries=ensure_binaries())
    cluster.start()
    _SESSION_PIDS.extend(cluster.pids.values())
    try:
        yield cluster
    finally:
        cluster.stop()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """After the session cluster was stopped, none of its processes may be left running."""
    alive = [pid for pid in _SESSION_PIDS if Path(f"/proc/{pid}").exists()
             and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()]
    if alive:
        print(f"\ncontrol-plane processes left running after the tests: {alive}",
              file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _api_client(kubeconfig: Path) -> client.ApiClient:
    """An ApiClient for `kubeconfig`, leaving the global default config alone."""
    configuration = client.Configuration()
    config.load_kube_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig), client_configuration=configuration
    )
    return client.ApiClient(configuration)


@pytest.fixture(scope="session")
def api_client_for() -> Callable[[Path], client.ApiClient]:
    """`api_client_for(kubeconfig)`: a client for a cluster a test started itself."""
    return _api_client


@pytest.fixture(scope="session")
def kube_api(local_cluster: LocalCluster) -> Iterator[client.ApiClient]:
    """An ApiClient for the session cluster."""
    api = _api_client(local_cluster.kubeconfig)
    try:
        yield api
    finally:
        api.close()  # type: ignore[no-untyped-call]


def _default_service_account(core: client.CoreV1Api, namespace: str) -> bool:
    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


@pytest.fixture
def namespace(kube_api: client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose `default` ServiceAccount exists (pods are refused before)."""
    core = client.CoreV1Api(kube_api)
    name = f"t-{uuid.uuid4().hex[:12]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        wait_until(
            lambda: _default_service_account(core, name),
            what=f"ServiceAccount {name}/default",
        )
        yield name
    finally:
        _delete_ignoring_missing(core.delete_namespace, name)


def _delete_ignoring_missing(delete: Callable[..., Any], *args: Any) -> None:
    try:
        delete(*args)
    except ApiException as error:
        if error.status != 404:
            raise


MakeNode = Callable[..., client.V1Node]


def _node_body(
    name: str,
    resources: dict[str, str],
    labels: dict[str, str],
    taints: list[Any],
    unschedulable: bool,
) -> client.V1Node:
    now = datetime.now(UTC)
    ready = client.V1NodeCondition(
        type="Ready",
        status="True",
        reason="KubeletReady",
        message="fake node created by the test suite",
        last_heartbeat_time=now,
        last_transition_time=now,
    )
    return client.V1Node(
        metadata=client.V1ObjectMeta(name=name, labels={"kubernetes.io/hostname": name, **labels}),
        spec=client.V1NodeSpec(taints=taints or None, unschedulable=unschedulable or None),
        status=client.V1NodeStatus(capacity=resources, allocatable=resources, conditions=[ready]),
    )


@pytest.fixture
def make_node(kube_api: client.ApiClient) -> Iterator[MakeNode]:
    """Factory for kubelet-less Node objects that look Ready with the given capacity."""
    core = client.CoreV1Api(kube_api)
    created: list[str] = []

    def make(
        name: str,
        cpu: str = "8",
        memory: str = "32Gi",
        pods: int = 110,
        labels: dict[str, str] | None = None,
        taints: list[Any] | None = None,
        extended: dict[str, str] | None = None,
        unschedulable: bool = False,
    ) -> client.V1Node:
        resources = {"cpu": cpu, "memory": memory, "pods": str(pods), **(extended or {})}
        body = _node_body(name, resources, labels or {}, list(taints or []), unschedulable)
        # Node create keeps .status (verified on 1.35; only updates go through nodes/status).
        node = core.create_node(body)
        created.append(name)
        assert node.spec is not None
        # The TaintNodesByCondition admission plugin adds the not-ready taint on create; the
        # node-lifecycle controller (not run here) would lift it once Ready, so do it here.
        kept = [t for t in node.spec.taints or [] if _taint_key(t) != NOT_READY_TAINT]
        if len(kept) != len(node.spec.taints or []):
            node.spec.taints = kept or None
            node = core.replace_node(name, node)
        return node

    yield make
    for name in created:
        _delete_ignoring_missing(core.delete_node, name)


def _taint_key(taint: Any) -> str:
    return str(taint["key"] if isinstance(taint, dict) else taint.key)
