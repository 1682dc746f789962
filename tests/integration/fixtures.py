"""Fixtures that run this project's scheduler against the session's local control plane."""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.config import parse_config
from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.realnodes import RealNodes
from coscheduling.plugins.registry import default_registry
from coscheduling.service.wiring import SchedulerService
from tests.integration.kube import InvariantWatcher, exists, wait_until

REPO = Path(__file__).resolve().parents[2]
CRD_DIR = REPO / "crd"


def kubectl(cluster: LocalCluster, *args: str, check: bool = True,
            stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("kubectl")
    if binary is None:
        raise AssertionError("kubectl is not on PATH; the user-facing steps need it")
    result = subprocess.run([binary, "--kubeconfig", str(cluster.kubeconfig), *args],
                            capture_output=True, text=True, check=False, input=stdin,
                            timeout=120)
    if check and result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} failed: {result.stderr.strip()}")
    return result


@pytest.fixture(scope="session")
def kube(local_cluster: LocalCluster) -> Iterator[KubeClient]:
    """The project's own client, as the cluster admin."""
    client = KubeClient(ClientSettings(kubeconfig=str(local_cluster.kubeconfig), qps=1000,
                                       burst=2000))
    yield client
    client.close()


@pytest.fixture(scope="session")
def crd(local_cluster: LocalCluster, kube: KubeClient) -> None:
    """The PodGroup CRD, applied with kubectl as a user would, and established."""
    kubectl(local_cluster, "apply", "-f", str(CRD_DIR))

    def established() -> bool:
        crd = kube.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions/"
                       "podgroups.batch.scheduler.tencent.com")
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in (crd.get("status") or {}).get("conditions") or ())

    wait_until(established, timeout=30, what="the PodGroup CRD to be established")
    wait_until(lambda: _served(kube), timeout=30, what="podgroups to be served")


def _served(kube: KubeClient) -> bool:
    try:
        kube.get("/apis/batch.scheduler.tencent.com/v1/podgroups")
    except ApiError:
        return False
    return True


@pytest.fixture
def make_namespace(kube_api: Any, namespace: str) -> Iterator[Callable[[], str]]:
    """More fresh namespaces for one test (each with its default ServiceAccount)."""
    from kubernetes import client

    core = client.CoreV1Api(kube_api)
    made: list[str] = []

    def make() -> str:
        name = f"t-{uuid.uuid4().hex[:12]}"
        core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
        made.append(name)
        wait_until(lambda: _has_default_sa(core, name), timeout=30,
                   what=f"ServiceAccount {name}/default")
        return name

    yield make
    for name in made:
        with contextlib.suppress(client.ApiException):
            core.delete_namespace(name)


def _has_default_sa(core: Any, namespace: str) -> bool:
    from kubernetes.client.exceptions import ApiException

    try:
        core.read_namespaced_service_account("default", namespace)
    except ApiException:
        return False
    return True


def released_by(service: SchedulerService) -> Callable[[str], int]:
    """How many members of a gang the in-process scheduler released at once. The watcher
    reads this when it sees a bind, which may be after the scheduler already forgot the
    gang (its PodGroup deleted): what a forgotten gang had released is kept for that."""
    plugin = service.scheduler.framework.instances.get("Coscheduling")
    manager = plugin.manager if plugin is not None else None  # type: ignore[attr-defined]
    forgotten: dict[str, int] = {}
    if manager is not None:
        forget = manager.forget_group

        def remembering(group_key: str) -> None:
            gang = manager.gangs.get(group_key)
            if gang is not None:
                forgotten[group_key] = max(forgotten.get(group_key, 0), gang.released_members)
            forget(group_key)

        manager.forget_group = remembering

    def released(group_key: str) -> int:
        gang = manager.gangs.get(group_key) if manager is not None else None
        live = int(gang.released_members) if gang is not None else 0
        return max(live, forgotten.get(group_key, 0))

    return released


class RunningScheduler:
    """A scheduler in this process, with its own schedulerName, and a watcher of
    the invariants on every namespace the test hands it."""

    def __init__(self, kube: KubeClient, kubeconfig: Path, namespace: str,
                 overrides: Mapping[str, Any] | None) -> None:
        self.name = f"cs-{uuid.uuid4().hex[:8]}"
        doc: dict[str, Any] = {
            "apiVersion": "config.batch.scheduler.tencent.com/v1",
            "kind": "SchedulerConfiguration",
            "schedulerName": self.name,
            "podInitialBackoffSeconds": 0.2,
            "podMaxBackoffSeconds": 2,
            "metricsBindAddress": "127.0.0.1:0",
            "clientConnection": {"kubeconfig": str(kubeconfig), "qps": 500, "burst": 1000},
        }
        if overrides and "schedulerNames" in overrides:  # several names: the first is its own
            del doc["schedulerName"]
            self.name = str(overrides["schedulerNames"][0])
        doc.update(overrides or {})
        self.config = parse_config(doc, default_registry())
        self.service = SchedulerService(self.config)
        self.watcher = InvariantWatcher(kube, [namespace], released_by(self.service))
        self.watcher.__enter__()
        self._started = False

    def watch(self, namespace: str) -> None:
        self.watcher.namespaces.add(namespace)

    def start(self, loops: bool = True) -> None:
        assert self.service.start(sync_timeout=60, schedule=loops), "caches did not sync"
        self._started = True

    def stop(self) -> None:
        if self._started:
            self.service.stop()
            self._started = False

    def close(self) -> None:
        self.stop()
        self.watcher.__exit__(None, None, None)


@pytest.fixture
def start_scheduler(kube: KubeClient, local_cluster: LocalCluster, crd: None,
                    namespace: str) -> Iterator[Callable[..., RunningScheduler]]:
    running: list[RunningScheduler] = []

    def start(overrides: Mapping[str, Any] | None = None, *,
              start: bool = True) -> RunningScheduler:
        sched = RunningScheduler(kube, local_cluster.kubeconfig, namespace, overrides)
        running.append(sched)
        if start:
            sched.start()
        return sched

    yield start
    for sched in running:
        sched.close()
    for sched in running:
        assert not sched.watcher.violations, sched.watcher.violations


# Real nodes per module that asks for them: two, so a gang of two can span them.
REAL_NODE_COUNT = 2


@pytest.fixture(scope="module")
def real_nodes(local_cluster: LocalCluster) -> Iterator[RealNodes]:
    """Kubelets that really run pods (real-node-1..2, each over its own containerd), joined
    to the session's control plane for one module; afterwards their containers, mounts and
    Node objects are gone, so later tests see only the nodes they make. Needs root and
    `make node-packages`; fails (never skips) without them."""
    nodes = local_cluster.start_real_nodes(REAL_NODE_COUNT)
    try:
        yield nodes
    finally:
        local_cluster.stop_real_nodes()


# crd/compat/: the other producers' group CRDs, for clusters that lack them.
COMPAT = REPO / "crd" / "compat"
COMPAT_CRDS = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(COMPAT.glob("*.yaml"))}


def crd_path(crd: dict[str, Any], namespace: str | None, name: str = "") -> str:
    """The API path of a CRD's objects (in ``namespace``, or cluster-wide)."""
    spec = crd["spec"]
    scope = f"namespaces/{namespace}/" if namespace else ""
    path = f"/apis/{spec['group']}/{spec['versions'][0]['name']}/{scope}{spec['names']['plural']}"
    return f"{path}/{name}" if name else path


@pytest.fixture(scope="module")
def compat_crds(local_cluster: LocalCluster, kube: KubeClient) -> Iterator[None]:
    """crd/compat/ applied as a user would, served; afterwards the cluster is left as found
    (a CRD this fixture installed is removed again, so later tests still see it absent)."""
    found = {name for name in COMPAT_CRDS if exists(
        kube, f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}")}
    kubectl(local_cluster, "apply", "-f", str(COMPAT))
    kubectl(local_cluster, "wait", "--for=condition=Established", "--timeout=60s",
            *(f"crd/{name}" for name in COMPAT_CRDS))
    for name, definition in COMPAT_CRDS.items():
        wait_until(partial(exists, kube, crd_path(definition, None)), timeout=30,
                   what=f"{name} served")
    yield
    for name in sorted(set(COMPAT_CRDS) - found):
        kubectl(local_cluster, "delete", "crd", name, "--timeout=120s")
