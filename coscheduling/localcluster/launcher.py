"""Start a real etcd + kube-apiserver + kube-controller-manager on loopback.

The cluster has no kubelets unless real nodes are asked for (realnodes.py): tests create
Node objects themselves, and the controller manager runs only the workload controllers the
project needs (no node-lifecycle, which would taint kubelet-less nodes). Every process is
started by us, tracked by pid in `cluster.json`, and stopped by pid, so a crashed test run
leaves nothing behind.
"""

from __future__ import annotations

import atexit
import base64
import contextlib
import http.client
import json
import os
import secrets
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from .build import KUBERNETES_VERSION, Binaries, cache_dir, ensure_binaries, ensure_kube_proxy
from .certs import ClusterCerts, create_certs, create_client_cert
from .incluster import (
    KUBE_PROXY,
    KUBE_PROXY_USER,
    KUBE_SCHEDULER,
    KUBE_SCHEDULER_USER,
    kube_proxy_argv,
    kube_scheduler_argv,
    other_proxies,
    remove_proxy_rules,
)
from .processes import (
    ClusterStartError,
    child_setup,
    free_ports,
    log_tail,
    process_start_time,
    threads_stopped,
    wait_gone,
)
from .realnodes import RealNodes, node_address, stop_recorded_nodes
from .workload_api import WorkloadAPI, workload_api

__all__ = [
    "COMPONENTS",
    "CONTROLLERS",
    "ClusterStartError",
    "LocalCluster",
    "child_setup",
    "free_ports",
    "http_ok",
    "log_tail",
    "running_components",
    "stop_from_state",
]

Log = Callable[[str], None]

ETCD = "etcd"
APISERVER = "kube-apiserver"
CONTROLLER_MANAGER = "kube-controller-manager"
COMPONENTS = (ETCD, APISERVER, CONTROLLER_MANAGER, KUBE_SCHEDULER, KUBE_PROXY)

# kube-controller-manager controllers the project relies on (names as `--help` lists them).
CONTROLLERS = (
    "persistentvolume-binder-controller",  # binds claims (volume binding waits for it)
    "persistentvolume-protection-controller",  # so that claims and volumes can be deleted
    "persistentvolumeclaim-protection-controller",
    "job-controller",
    "statefulset-controller",
    "replicaset-controller",
    "deployment-controller",
    "namespace-controller",
    "garbage-collector-controller",
    "serviceaccount-controller",
    "serviceaccount-token-controller",
    "disruption-controller",  # PodDisruptionBudget status, which preemption respects
    # ResourceClaims from a pod's ResourceClaimTemplates (DRA; resource.k8s.io/v1 is served
    # by default since 1.34), and claims given back when their pods are gone.
    "resourceclaim-controller",
    # The kube-root-ca.crt ConfigMap of every namespace, which a real node's kubelet
    # mounts into each pod with its service-account token.
    "root-ca-certificate-publisher-controller",
)

SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc"
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/24"
READY_TIMEOUT = 60.0
# etcd drains client streams for up to 7s (its request timeout) when clients are attached.
STOP_GRACE = 8.0
STATE_FILE = "cluster.json"


def _default_log(message: str) -> None:
    print(f"[localcluster] {message}", file=sys.stderr, flush=True)


def http_ok(url: str, context: ssl.SSLContext | None, token: str | None = None) -> bool:
    request = urllib.request.Request(url)
    if token is not None:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=2) as response:
            return bool(response.status == 200)
    except (OSError, http.client.HTTPException):  # URLError and ssl errors are OSErrors
        return False


def _self_signed_healthz(port: int) -> bool:
    """/healthz of a component that serves a self-signed certificate of its own on loopback
    (kube-controller-manager, kube-scheduler)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return http_ok(f"https://127.0.0.1:{port}/healthz", context)


@dataclass
class _Component:
    """One control-plane program: how to run it and how to tell it is ready."""

    name: str
    argv: list[str]
    log_path: Path
    ready: Callable[[], bool]
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)


class LocalCluster:
    """A throwaway control plane in `workdir`, reachable through `workdir/kubeconfig`."""

    def __init__(
        self,
        workdir: Path,
        *,
        controller_manager: bool = True,
        apiserver_args: Sequence[str] = (),
        controller_manager_args: Sequence[str] = (),
        die_with_parent: bool = True,
        log: Log = _default_log,
        binaries: Binaries | None = None,
        real_nodes: int = 0,
        dra_driver: bool = False,
        in_cluster: bool | None = None,
    ) -> None:
        self.workdir = Path(workdir).absolute()
        # The default scheduler, kube-proxy and an API server pods can reach (incluster.py):
        # what pods on real nodes need, so on by default with them.
        self.in_cluster = real_nodes > 0 if in_cluster is None else in_cluster
        self.advertise_address = node_address() if self.in_cluster else "127.0.0.1"
        self.real_nodes_count = real_nodes
        self.dra_driver = dra_driver
        self.real_nodes: RealNodes | None = None
        self.controller_manager = controller_manager
        self.apiserver_args = list(apiserver_args)
        self.controller_manager_args = list(controller_manager_args)
        self.die_with_parent = die_with_parent
        self.log = log
        self.binaries = binaries
        self.admin_token = secrets.token_hex(24)
        self.etcd_client_port, self.etcd_peer_port, self.apiserver_port, self.kcm_port = (
            free_ports(4)
        )
        self.scheduler_port, self.proxy_healthz_port, self.proxy_metrics_port = (
            free_ports(3) if self.in_cluster else (0, 0, 0)
        )
        self._components: dict[str, _Component] = {}
        self._certs: ClusterCerts | None = None

    # -- public properties -------------------------------------------------------------

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def ca_file(self) -> Path:
        return self.workdir / "pki" / "ca.crt"

    @property
    def _kubelet_client_cert(self) -> tuple[Path, Path]:
        pki = self.workdir / "pki"
        return pki / "kubelet-client.crt", pki / "kubelet-client.key"

    @property
    def workload_api(self) -> WorkloadAPI:
        """The native gang API this cluster serves (its release's, always enabled)."""
        version = self.binaries.kubernetes_version if self.binaries else KUBERNETES_VERSION
        return workload_api(version)

    @property
    def pids(self) -> dict[str, int]:
        """Pids of the components currently running (paused ones included)."""
        return {
            name: c.process.pid
            for name, c in self._components.items()
            if c.process is not None and c.process.poll() is None
        }

    # -- lifecycle ---------------------------------------------------------------------

    def start(self) -> LocalCluster:
        """Start every component and wait until each one is ready; stop all on failure."""
        started = time.monotonic()
        binaries = self.binaries or ensure_binaries(self.log)
        self.binaries = binaries
        self.workdir.mkdir(parents=True, exist_ok=True)
        # Each start() is a new cluster: old etcd data would not match the new keys.
        shutil.rmtree(self.workdir / "etcd-data", ignore_errors=True)
        self._certs = create_certs(self.workdir / "pki", [f"IP:{self.advertise_address}"])
        # The API server's identity towards the real nodes' kubelets (logs, exec, ports).
        create_client_cert(self._certs, *self._kubelet_client_cert, "kube-apiserver-kubelet",
                           "system:masters")
        self._write_token_file()
        self._write_kubeconfig(self.kubeconfig)
        self._write_kubeconfig(self.workdir / f"{CONTROLLER_MANAGER}.kubeconfig")
        if self.in_cluster:
            for name, user in ((KUBE_SCHEDULER, KUBE_SCHEDULER_USER),
                               (KUBE_PROXY, KUBE_PROXY_USER)):
                self._write_client_cert_kubeconfig(name, user)
        self._components = self._define_components(binaries, self._certs)
        atexit.register(self.stop)
        try:
            for name in self._components:
                self.start_component(name)
        except BaseException:
            self.stop()
            raise
        self.log(f"control plane ready at {self.server} in {time.monotonic() - started:.1f}s")
        if self.real_nodes_count:
            self.start_real_nodes(self.real_nodes_count, dra_driver=self.dra_driver)
        return self

    def start_real_nodes(self, count: int, name_prefix: str = "real-node", *,
                         dra_driver: bool = False) -> RealNodes:
        """Start `count` kubelets (each over its own containerd) joined to this cluster and
        wait until they are Ready; `stop()` stops them first. With `dra_driver`, each node
        runs containerd 1.7 with CDI and the DRA example driver's kubelet plugin, and is
        Ready once its ResourceSlice is published."""
        if self._certs is None:
            raise RuntimeError("start the control plane before its real nodes")
        if self.real_nodes is not None:
            raise RuntimeError(f"real nodes {self.real_nodes.names} already run; stop them first")
        nodes = RealNodes(
            workdir=self.workdir, server=self.server, certs=self._certs,
            admin_token=self.admin_token, count=count, die_with_parent=self.die_with_parent,
            log=self.log, on_change=self._write_state, name_prefix=name_prefix,
            dra_driver=dra_driver,
        )
        if self.in_cluster and KUBE_PROXY not in self._components and other_proxies():
            raise ClusterStartError(
                f"kube-proxy already runs on this machine (pids {other_proxies()}), another "
                "local cluster's or the machine's: its chains (KUBE-SERVICES, ...) have fixed "
                "names, so each would rewrite the other's rules. Stop that cluster first "
                "(coscheduling localcluster down --workdir DIR), or start this one with "
                "in_cluster=False (no kube-scheduler, no kube-proxy)")
        self.real_nodes = nodes
        try:
            nodes.start()
            if self.in_cluster:
                self._start_proxy(nodes.names[0])
        except BaseException:
            nodes.stop()
            self.real_nodes = None
            self._write_state()
            raise
        return nodes

    def stop_real_nodes(self) -> None:
        """Stop the real nodes (their pods' containers go with them) and delete their Nodes."""
        if self.real_nodes is not None:
            self.real_nodes.stop()
            self.real_nodes = None
            self._write_state()

    def stop(self) -> None:
        """Stop every component we started (controller manager first, etcd last)."""
        atexit.unregister(self.stop)
        # kube-proxy before the nodes: it exits once its Node is gone, leaving its rules.
        others = [name for name in reversed(list(self._components)) if name != KUBE_PROXY]
        if KUBE_PROXY in self._components:
            self.stop_component(KUBE_PROXY)
        self.stop_real_nodes()
        for name in others:
            self.stop_component(name)

    def detach(self) -> None:
        """Leave the processes running after this interpreter exits (for `localcluster up`)."""
        atexit.unregister(self.stop)

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- per-component control (fault injection) ---------------------------------------

    def start_component(self, name: str) -> None:
        """(Re)start one component on its original ports and data dir; wait until ready."""
        component = self._component(name)
        if component.process is not None and component.process.poll() is None:
            return
        with component.log_path.open("ab") as log_file:
            log_file.write(f"\n=== starting {name}: {' '.join(component.argv)}\n".encode())
            log_file.flush()
            component.process = subprocess.Popen(
                component.argv,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
                preexec_fn=child_setup(self.die_with_parent),
            )
        self._write_state()
        self._wait_ready(component)
        self.log(f"{name} ready (pid {component.process.pid}, log {component.log_path})")

    def stop_component(self, name: str, *, graceful: bool = True) -> None:
        """Stop one component: SIGTERM, then SIGKILL if still running after STOP_GRACE.

        `graceful=False` sends SIGKILL at once, to simulate a crash. kube-proxy's rules go
        with it.
        """
        component = self._component(name)
        process = component.process
        if process is None or process.poll() is not None:
            return
        self._end(process, graceful)
        if name == KUBE_PROXY:
            remove_proxy_rules(component.argv[0])
        self._write_state()

    @staticmethod
    def _end(process: subprocess.Popen[bytes], graceful: bool) -> None:
        if graceful:
            process.terminate()
            with contextlib.suppress(ProcessLookupError):
                os.kill(process.pid, signal.SIGCONT)  # a paused process cannot handle SIGTERM
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(STOP_GRACE)
        if process.poll() is None:
            process.kill()
            process.wait()

    def pause_component(self, name: str) -> None:
        """Freeze one component with SIGSTOP (it keeps its sockets but stops answering).

        Returns once every thread is stopped: a signal's group stop reaches the threads one
        by one, and one still running could answer a request sent right after the kill.
        """
        pid = self._signal(name, signal.SIGSTOP)
        self._wait_threads(pid, stopped=True)

    def resume_component(self, name: str) -> None:
        pid = self._signal(name, signal.SIGCONT)
        self._wait_threads(pid, stopped=False)

    def _signal(self, name: str, signum: signal.Signals) -> int:
        process = self._component(name).process
        if process is None or process.poll() is not None:
            raise RuntimeError(f"{name} is not running")
        os.kill(process.pid, signum)
        return process.pid

    @staticmethod
    def _wait_threads(pid: int, *, stopped: bool, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while threads_stopped(pid) != stopped:
            if time.monotonic() > deadline:
                state = "stopped" if stopped else "running"
                raise RuntimeError(f"pid {pid}'s threads not all {state} after {timeout} s")
            time.sleep(0.01)

    def _component(self, name: str) -> _Component:
        try:
            return self._components[name]
        except KeyError:
            raise ValueError(
                f"unknown or disabled component {name!r}; have {sorted(self._components)}"
            ) from None

    # -- readiness ---------------------------------------------------------------------

    def _wait_ready(self, component: _Component) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        process = component.process
        assert process is not None
        while not component.ready():
            if process.poll() is not None:
                raise ClusterStartError(
                    f"{component.name} exited with code {process.returncode}; "
                    f"last lines of {component.log_path}:\n{log_tail(component.log_path)}"
                )
            if time.monotonic() > deadline:
                raise ClusterStartError(
                    f"{component.name} not ready after {READY_TIMEOUT:.0f}s; "
                    f"last lines of {component.log_path}:\n{log_tail(component.log_path)}"
                )
            time.sleep(0.1)

    def _apiserver_context(self) -> ssl.SSLContext:
        return ssl.create_default_context(cafile=str(self.ca_file))

    def _apiserver_ready(self) -> bool:
        context = self._apiserver_context()
        return http_ok(f"{self.server}/readyz", context, self.admin_token)

    def _etcd_ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.etcd_client_port}/health", None)

    def _controller_manager_ready(self) -> bool:
        return _self_signed_healthz(self.kcm_port)

    def _scheduler_ready(self) -> bool:
        return _self_signed_healthz(self.scheduler_port)

    def _proxy_ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.proxy_healthz_port}/healthz", None)

    # -- configuration -----------------------------------------------------------------

    def _define_components(self, binaries: Binaries, certs: ClusterCerts) -> dict[str, _Component]:
        components = [
            _Component(ETCD, self._etcd_argv(binaries), self._log_path(ETCD), self._etcd_ready),
            _Component(
                APISERVER,
                self._apiserver_argv(binaries, certs),
                self._log_path(APISERVER),
                self._apiserver_ready,
            ),
        ]
        if self.controller_manager:
            components.append(
                _Component(
                    CONTROLLER_MANAGER,
                    self._controller_manager_argv(binaries, certs),
                    self._log_path(CONTROLLER_MANAGER),
                    self._controller_manager_ready,
                )
            )
        if self.in_cluster:
            components += self._in_cluster_components(binaries)
        return {c.name: c for c in components}

    def _in_cluster_components(self, binaries: Binaries) -> list[_Component]:
        """kube-scheduler (incluster.py), with a kubeconfig of its own."""
        scheduler = kube_scheduler_argv(binaries.kube_scheduler, self._kubeconfig_of(
            KUBE_SCHEDULER), self.workdir, self.scheduler_port)
        return [_Component(KUBE_SCHEDULER, scheduler, self._log_path(KUBE_SCHEDULER),
                           self._scheduler_ready)]

    def _start_proxy(self, node: str) -> None:
        """kube-proxy as `node`'s (a node component: it reports healthy only once its Node
        exists), for every real node, as they share this machine's network namespace."""
        if KUBE_PROXY in self._components:
            return
        argv = kube_proxy_argv(ensure_kube_proxy(self.log), self._kubeconfig_of(KUBE_PROXY),
                               node, self.advertise_address, self.proxy_healthz_port,
                               self.proxy_metrics_port)
        self._components[KUBE_PROXY] = _Component(KUBE_PROXY, argv, self._log_path(KUBE_PROXY),
                                                  self._proxy_ready)
        self.start_component(KUBE_PROXY)

    def _kubeconfig_of(self, name: str) -> Path:
        return self.workdir / f"{name}.kubeconfig"

    def _log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def _etcd_argv(self, binaries: Binaries) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_client_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(binaries.etcd),
            "--name=local",
            f"--data-dir={self.workdir / 'etcd-data'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=local={peer}",
            "--quota-backend-bytes=2147483648",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_argv(self, binaries: Binaries, certs: ClusterCerts) -> list[str]:
        return [
            str(binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_client_port}",
            # In-cluster: on every address, and the machine's in the `kubernetes` Service's
            # endpoints (a pod cannot reach this machine's loopback).
            f"--bind-address={'0.0.0.0' if self.in_cluster else '127.0.0.1'}",
            f"--advertise-address={self.advertise_address}",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'pki'}",
            f"--tls-cert-file={certs.serving_cert}",
            f"--tls-private-key-file={certs.serving_key}",
            f"--client-ca-file={certs.ca_cert}",
            f"--token-auth-file={self.workdir / 'tokens.csv'}",
            "--authorization-mode=Node,RBAC",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={certs.service_account_pub}",
            f"--service-account-signing-key-file={certs.service_account_key}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            # A real node's kubelet serves on the machine's address (the InternalIP it
            # reports) with a certificate of the cluster CA; its hostname resolves nowhere.
            f"--kubelet-client-certificate={self._kubelet_client_cert[0]}",
            f"--kubelet-client-key={self._kubelet_client_cert[1]}",
            f"--kubelet-certificate-authority={certs.ca_cert}",
            "--kubelet-preferred-address-types=InternalIP",
            # Endpoints may not hold a loopback address, so without in-cluster pods the
            # reconciler would only log errors every few seconds.
            f"--endpoint-reconciler-type={'lease' if self.in_cluster else 'none'}",
            # Stop within ~2s on SIGTERM instead of waiting up to 60s for open watches.
            "--shutdown-send-retry-after=true",
            "--profiling=false",
            *workload_api(binaries.kubernetes_version).apiserver_flags(),
            *self.apiserver_args,
        ]

    def _controller_manager_argv(self, binaries: Binaries, certs: ClusterCerts) -> list[str]:
        return [
            str(binaries.kube_controller_manager),
            f"--kubeconfig={self.workdir / f'{CONTROLLER_MANAGER}.kubeconfig'}",
            f"--controllers={','.join(CONTROLLERS)}",
            f"--service-account-private-key-file={certs.service_account_key}",
            f"--root-ca-file={certs.ca_cert}",
            "--use-service-account-credentials=false",
            "--leader-elect=false",
            "--bind-address=127.0.0.1",
            f"--secure-port={self.kcm_port}",
            f"--cert-dir={self.workdir / 'kcm-serving'}",
            "--profiling=false",
            *workload_api(binaries.kubernetes_version).controller_manager_flags(),
            *self.controller_manager_args,
        ]

    def _write_token_file(self) -> None:
        """Static token for user `admin` in `system:masters` (bypasses RBAC, like kubeadm's)."""
        path = self.workdir / "tokens.csv"
        path.write_text(f'{self.admin_token},admin,admin,"system:masters"\n')
        path.chmod(0o600)

    def _write_kubeconfig(self, path: Path, user: dict[str, str] | None = None) -> None:
        """A kubeconfig for this cluster: the admin's token, or `user`'s credentials."""
        ca_data = base64.b64encode(self.ca_file.read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.server, "certificate-authority-data": ca_data},
                }
            ],
            "users": [{"name": "admin", "user": user or {"token": self.admin_token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
            "current-context": "local",
        }
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        path.chmod(0o600)

    def _write_client_cert_kubeconfig(self, name: str, user: str) -> None:
        """`name`.kubeconfig with a client certificate of `user` (no group)."""
        assert self._certs is not None
        cert, key = self.workdir / "pki" / f"{name}.crt", self.workdir / "pki" / f"{name}.key"
        create_client_cert(self._certs, cert, key, user, "")
        self._write_kubeconfig(self._kubeconfig_of(name), {
            "client-certificate": str(cert), "client-key": str(key)})

    def _write_state(self) -> None:
        """Record pids (with start times) so `stop_from_state` can stop them from elsewhere."""
        state: dict[str, Any] = {
            "workdir": str(self.workdir),
            "server": self.server,
            "kubeconfig": str(self.kubeconfig),
            "ca_file": str(self.ca_file),
            "ports": {
                "etcd_client": self.etcd_client_port,
                "etcd_peer": self.etcd_peer_port,
                "apiserver": self.apiserver_port,
                "controller_manager": self.kcm_port,
                "kube_scheduler": self.scheduler_port,
                "kube_proxy_healthz": self.proxy_healthz_port,
            },
            "components": {
                name: {
                    "pid": pid,
                    "start_time": process_start_time(pid),
                    "exe": self._component(name).argv[0],
                    "log": str(self._component(name).log_path),
                }
                for name, pid in self.pids.items()
            },
            "real_nodes": self.real_nodes.records() if self.real_nodes else [],
        }
        if not self.workdir.is_dir():
            return  # removed under it (a caller's temporary folder): stopping goes on
        path = self.workdir / STATE_FILE
        partial = path.with_suffix(".json.partial")
        partial.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(partial, path)


def _owned_by_us(pid: int, record: dict[str, Any]) -> bool:
    """True if `pid` still runs the recorded binary, from our cache, started when recorded."""
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False
    bin_root = (cache_dir() / "bin").resolve()
    return (
        exe == str(Path(record["exe"]).resolve())
        and Path(exe).is_relative_to(bin_root)
        and process_start_time(pid) == record["start_time"]
    )


def running_components(workdir: Path) -> dict[str, int]:
    """Components recorded in `workdir/cluster.json` that are still running, by name."""
    return {name: int(record["pid"]) for name, record in _running_records(workdir).items()}


def _running_records(workdir: Path) -> dict[str, dict[str, Any]]:
    """The records of the components of `workdir/cluster.json` that still run, by name."""
    path = Path(workdir) / STATE_FILE
    if not path.is_file():
        return {}
    records: dict[str, dict[str, Any]] = json.loads(path.read_text())["components"]
    return {name: record for name, record in records.items()
            if _owned_by_us(int(record["pid"]), record)}


def stop_from_state(workdir: Path, log: Log = _default_log) -> list[int]:
    """Stop the processes listed in `workdir/cluster.json`; return the pids that were stopped.

    Only pids that still run our cached binary since the recorded start time are
    signalled, so a recycled pid is never killed (nor a cluster run from other binaries).
    Real nodes go first, with their containers and mounts.
    """
    path = Path(workdir) / STATE_FILE
    records = _running_records(workdir)
    # kube-proxy before the nodes: it exits once its Node is gone, leaving its rules.
    stopped = [_stop_recorded(KUBE_PROXY, records.pop(KUBE_PROXY), log)
               ] if KUBE_PROXY in records else []
    if path.is_file():
        stop_recorded_nodes(json.loads(path.read_text()).get("real_nodes") or [], log)
    stopped += [_stop_recorded(name, records[name], log)
                for name in reversed(COMPONENTS) if name in records]
    return stopped


def _stop_recorded(name: str, record: dict[str, Any], log: Log) -> int:
    """SIGTERM, then SIGKILL after STOP_GRACE; kube-proxy's rules go with it. Its pid."""
    pid = int(record["pid"])
    with contextlib.suppress(ProcessLookupError):  # it may exit on its own meanwhile
        os.kill(pid, signal.SIGTERM)
        os.kill(pid, signal.SIGCONT)
        if not wait_gone(pid, STOP_GRACE):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, STOP_GRACE)
    if name == KUBE_PROXY:
        remove_proxy_rules(record["exe"])
    log(f"stopped {name} (pid {pid})")
    return pid
