"""Real nodes on this machine: kubelets that join the local control plane and run pods.

Each node is its own kubelet (own name, root dir, ports, client certificate) over its own
containerd (own root, state, socket, runc root and CNI network): two kubelets on one
containerd would each kill the other's pods as unknown, and clean up each other's
containers. Kubelet v1.35 (gomod/kubelet) runs against the v1.37 API server, as the skew
policy allows, because it still speaks to Debian's containerd 1.6 (a v1.37 kubelet needs
containerd 2.x, which Debian 12 does not package). containerd, runc, the CNI plugins and
busybox come from Debian packages (`make node-packages`); the images are written here.

Pods get a network from the `ptp` CNI plugin (a veth pair and an address from the node's
own /24, see pod_subnet; no bridge, no NAT), so ordinary pods and hostNetwork pods both run.
DRA nodes (`dra_driver=True`) run containerd 1.7 built from Go modules instead, with CDI on,
and the DRA example driver's kubelet plugin as a host process beside the kubelet.
The kubelets need root (they mount, make cgroups and network namespaces).
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import json
import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .build import cache_dir, ensure_containerd, ensure_dra_example_driver, ensure_kubelet
from .certs import ClusterCerts, create_client_cert, create_serving_cert
from .images import BUSYBOX, PAUSE_IMAGE, ImageArchive, ensure_images
from .processes import (
    ClusterStartError,
    child_setup,
    free_ports,
    log_tail,
    process_start_time,
    wait_gone,
)

__all__ = [
    "CNI_BIN_DIR",
    "MAX_REAL_NODES",
    "REAL_NODE_LABEL",
    "NodePackagesError",
    "RealNode",
    "RealNodes",
    "import_into_recorded_nodes",
    "missing_node_packages",
    "node_address",
    "node_versions",
    "pod_subnet",
    "stop_recorded_nodes",
]

Log = Callable[[str], None]

REAL_NODE_LABEL = "coscheduling.local/real-node"
NOT_READY_TAINT = "node.kubernetes.io/not-ready"
CNI_BIN_DIR = Path("/usr/lib/cni")
CONTAINER_LOG_LINKS = Path("/var/log/containers")
ROUTES = Path("/proc/net/route")
# What each real node needs from the machine, and the Debian package that brings it.
NODE_PACKAGES = {
    "containerd": "containerd",
    "ctr": "containerd",
    "runc": "runc",
    str(BUSYBOX): "busybox-static",
    str(CNI_BIN_DIR / "ptp"): "containernetworking-plugins",
    str(CNI_BIN_DIR / "host-local"): "containernetworking-plugins",
    str(CNI_BIN_DIR / "loopback"): "containernetworking-plugins",
}
READY_TIMEOUT = 120.0
# Each is a kubelet and a containerd; a machine that runs tests holds a few.
MAX_REAL_NODES = 50
STOP_GRACE = 10.0
SOCKET_PATH_MAX = 100  # sun_path holds 108 bytes; containerd adds ".ttrpc"
MNT_DETACH = 2
# The DRA example driver's own name and DeviceClass (its chart creates the same class).
DRA_DRIVER = "gpu.example.com"
DRA_DEVICES_PER_NODE = 4
DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": DRA_DRIVER},
    "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRA_DRIVER}'"}}]},
}


class NodePackagesError(RuntimeError):
    """The machine lacks a program the real nodes need (or is not run as root)."""


def missing_node_packages() -> dict[str, str]:
    """Programs the real nodes need that are not installed -> the Debian package to install."""
    missing = {}
    for program, package in NODE_PACKAGES.items():
        found = Path(program).is_file() if program.startswith("/") else shutil.which(program)
        if not found:
            missing[program] = package
    return missing


def _require_machine() -> None:
    missing = missing_node_packages()
    if missing:
        packages = " ".join(sorted(set(missing.values())))
        raise NodePackagesError(
            f"real nodes need {', '.join(sorted(missing))}, which are not installed; "
            f"run `make node-packages` (apt-get installs: {packages})"
        )
    if os.geteuid() != 0:
        raise NodePackagesError("real nodes need root: the kubelet and containerd mount, "
                                "make cgroups and network namespaces")


def node_versions(kubelet: Path | None = None,
                  containerd: Path | None = None) -> dict[str, str]:
    """The versions of what runs a real node: kubelet, containerd (Debian's unless given),
    runc (first lines)."""

    def first_line(*argv: str) -> str:
        result = subprocess.run(argv, capture_output=True, text=True, check=False)
        return (result.stdout or result.stderr).strip().splitlines()[0]

    return {
        "kubelet": first_line(str(kubelet or ensure_kubelet()), "--version"),
        "containerd": first_line(str(containerd or "containerd"), "--version"),
        "runc": first_line("runc", "--version"),
    }


@dataclass
class _Process:
    """One program of a node (containerd or kubelet) that we started and will stop."""

    name: str
    argv: list[str]
    log_path: Path
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any] | None:
        if self.process is None or self.process.poll() is not None:
            return None
        pid = self.process.pid
        return {"pid": pid, "start_time": process_start_time(pid),
                "exe": str(Path(self.argv[0]).resolve()), "log": str(self.log_path)}


@dataclass
class RealNode:
    """One kubelet and its containerd, with everything under `directory`."""

    name: str
    directory: Path
    kubelet_port: int
    healthz_port: int
    containerd: _Process | None = None
    kubelet: _Process | None = None
    dra_driver: _Process | None = None
    # A short name for the kubelet's root dir (see RealNodes._link_kubelet_root).
    root_link: Path | None = None

    @property
    def kubelet_root(self) -> Path:
        return self.root_link or self.directory / "kubelet"

    @property
    def processes(self) -> tuple[_Process, ...]:
        return tuple(p for p in (self.containerd, self.kubelet, self.dra_driver) if p)

    @property
    def socket(self) -> Path:
        return self.directory / "containerd.sock"

    @property
    def subnet(self) -> str:
        """The node's pod addresses, named after its kubelet port: a port is bound by one
        kubelet at a time, so nodes of two clusters on this machine never share a /24."""
        return pod_subnet(self.kubelet_port)

    @property
    def cdi_dir(self) -> Path:
        """Where a DRA driver writes the CDI specs of the devices it prepared."""
        return self.directory / "cdi"

    def containerd_config(self, cdi: bool = False) -> str:
        """containerd 1.6 or 1.7 (config version 2): every path in this node's directory;
        with `cdi` (1.7 only), containers get the CDI devices the kubelet names."""
        d = self.directory
        cri = 'plugins."io.containerd.grpc.v1.cri"'
        cdi_lines = ["  enable_cdi = true", f'  cdi_spec_dirs = ["{self.cdi_dir}"]'] if cdi else []
        return "\n".join([
            "version = 2",
            f'root = "{d / "containerd" / "root"}"',
            f'state = "{d / "containerd" / "state"}"',
            'disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", '
            '"io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", '
            '"io.containerd.snapshotter.v1.aufs", "io.containerd.tracing.processor.v1.otlp"]',
            "[grpc]",
            f'  address = "{self.socket}"',
            # Unused (pods run on runc v2) but the tasks service needs it loaded.
            '[plugins."io.containerd.runtime.v1.linux"]',
            f'  runtime_root = "{d / "runc-v1"}"',
            '[plugins."io.containerd.internal.v1.opt"]',
            f'  path = "{d / "containerd" / "opt"}"',
            f"[{cri}]",
            f'  sandbox_image = "{PAUSE_IMAGE}"',
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            "  disable_apparmor = true",
            "  netns_mounts_under_state_dir = true",
            # No oom_score_adj below containerd's own: lowering it needs CAP_SYS_RESOURCE,
            # which a sandboxed root may lack (the kubelet asks -998 for sandboxes).
            "  restrict_oom_score_adj = true",
            *cdi_lines,
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f'  Root = "{d / "runc"}"',
            f"[{cri}.cni]",
            f'  bin_dir = "{CNI_BIN_DIR}"',
            f'  conf_dir = "{d / "cni"}"',
            "",
        ])

    def cni_config(self) -> dict[str, Any]:
        """A ptp network of this node's own: veth pairs, addresses from host-local."""
        return {
            "cniVersion": "0.4.0",
            "name": f"coscheduling-{self.name}",
            "plugins": [{
                "type": "ptp",
                "ipMasq": False,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": self.subnet}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                    "dataDir": str(self.directory / "cni-ipam"),
                },
            }],
        }

    @property
    def serving_cert(self) -> tuple[Path, Path]:
        return self.directory / "kubelet-serving.crt", self.directory / "kubelet-serving.key"

    def kubelet_config(self, ca_file: Path, address: str) -> dict[str, Any]:
        """The API server dials `address` (the node's InternalIP) for logs, exec and port
        forwarding, and checks the serving certificate against the cluster CA; healthz on
        loopback, no read-only port, cgroup v1 with cgroupfs, and no per-QoS cgroups: two
        kubelets under one cgroup root would remove each other's pod cgroups as orphans."""
        cert, key = self.serving_cert
        return {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": address,
            "port": self.kubelet_port,
            "tlsCertFile": str(cert),
            "tlsPrivateKeyFile": str(key),
            "healthzBindAddress": "127.0.0.1",
            "healthzPort": self.healthz_port,
            "readOnlyPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": False},
                "x509": {"clientCAFile": str(ca_file)},
            },
            "authorization": {"mode": "AlwaysAllow"},
            "containerRuntimeEndpoint": f"unix://{self.socket}",
            "cgroupDriver": "cgroupfs",
            "failCgroupV1": False,
            "failSwapOn": False,
            "cgroupsPerQOS": False,
            "enforceNodeAllocatable": ["none"],
            "podLogsDir": str(self.directory / "pod-logs"),
            # The images cannot be pulled again: never collect them, never evict for disk.
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {"memory.available": "100Mi", "nodefs.available": "1%",
                             "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
            "maxPods": 32,
            "serializeImagePulls": False,
            "nodeStatusUpdateFrequency": "5s",
        }

    def records(self) -> dict[str, Any]:
        processes = {p.name: p.record() for p in self.processes}
        return {
            "name": self.name,
            "directory": str(self.directory),
            "socket": str(self.socket),
            "root_link": str(self.root_link) if self.root_link else None,
            "processes": {name: r for name, r in processes.items() if r is not None},
        }


class RealNodes:
    """N real nodes joined to a local control plane (see LocalCluster.start_real_nodes)."""

    def __init__(
        self,
        *,
        workdir: Path,
        server: str,
        certs: ClusterCerts,
        admin_token: str,
        count: int,
        die_with_parent: bool,
        log: Log,
        on_change: Callable[[], None] = lambda: None,
        name_prefix: str = "real-node",
        dra_driver: bool = False,
    ) -> None:
        if not 1 <= count <= MAX_REAL_NODES:
            raise ValueError(f"real nodes: count must be from 1 to {MAX_REAL_NODES}, "
                             f"got {count}")
        self.workdir = workdir
        self.server = server
        self.certs = certs
        self.admin_token = admin_token
        self.die_with_parent = die_with_parent
        self.log = log
        self.on_change = on_change
        self.name_prefix = name_prefix
        self.dra_driver = dra_driver
        self.nodes: list[RealNode] = []
        self.imported: list[ImageArchive] = []  # besides the pause and test images
        self._plan(count)
        self.startup_seconds = 0.0

    def _plan(self, count: int) -> list[RealNode]:
        """`count` more nodes, numbered on from the last one, with ports of their own."""
        ports = iter(_node_ports(count))
        first = len(self.nodes) + 1
        planned = [
            RealNode(f"{self.name_prefix}-{i}", self.workdir / "nodes" / f"{self.name_prefix}-{i}",
                     next(ports), next(ports))
            for i in range(first, first + count)
        ]
        self.nodes.extend(planned)
        return planned

    @property
    def names(self) -> list[str]:
        return [node.name for node in self.nodes]

    def records(self) -> list[dict[str, Any]]:
        """What `stop_recorded_nodes` needs to stop them from another process."""
        return [node.records() for node in self.nodes]

    # -- start -------------------------------------------------------------------------

    def start(self) -> RealNodes:
        """Start every node and wait until all are Ready (and schedulable); stop all on
        failure. `startup_seconds` says how long it took."""
        self.startup_seconds = self._start(self.nodes)
        return self

    def add(self, count: int = 1) -> list[RealNode]:
        """Start `count` more nodes (a cluster that grows while gangs wait); on failure
        all nodes are stopped, as on a failed start."""
        if not 1 <= count <= MAX_REAL_NODES - len(self.nodes):
            raise ValueError(f"real nodes: add count must be from 1 to "
                             f"{MAX_REAL_NODES - len(self.nodes)}, got {count}")
        added = self._plan(count)
        self._start(added)
        return added

    def _start(self, nodes: list[RealNode]) -> float:
        """Start `nodes`, wait until they are Ready; the seconds it took."""
        started = time.monotonic()
        _require_machine()
        kubelet = ensure_kubelet(self.log)
        images = ensure_images(cache_dir() / "images")
        # Debian's containerd 1.6 has no CDI: DRA nodes run 1.7, built from Go modules.
        containerd = ensure_containerd(self.log) if self.dra_driver else None
        driver = ensure_dra_example_driver(self.log) if self.dra_driver else None
        try:
            for node in nodes:
                self._start_containerd(node, images, containerd)
                self._start_kubelet(node, kubelet)
            for node in nodes:
                self._wait_ready(node)
            if driver is not None:
                self._api("POST", "/apis/resource.k8s.io/v1/deviceclasses", DEVICE_CLASS)
                for node in nodes:
                    self._start_dra_driver(node, driver)
        except BaseException:
            self.stop()
            raise
        seconds = time.monotonic() - started
        versions = "; ".join(node_versions(kubelet, containerd).values())
        self.log(f"real nodes {', '.join(n.name for n in nodes)} Ready in {seconds:.1f}s "
                 f"({versions})")
        return seconds

    def _spawn(self, node: RealNode, name: str, argv: list[str]) -> _Process:
        log_path = node.directory / f"{name}.log"
        with log_path.open("ab") as log_file:
            log_file.write(f"\n=== starting {name}: {' '.join(argv)}\n".encode())
            log_file.flush()
            process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                cwd=node.directory, start_new_session=True,
                preexec_fn=child_setup(self.die_with_parent),
            )
        return _Process(name, argv, log_path, process)

    def _start_containerd(self, node: RealNode, images: tuple[ImageArchive, ...],
                          binary: Path | None) -> None:
        # A node dir left by a crashed run holds mounts; a new node starts empty.
        _unmount_under(node.directory)
        shutil.rmtree(node.directory, ignore_errors=True)
        (node.directory / "cni").mkdir(parents=True)
        if len(str(node.socket)) > SOCKET_PATH_MAX:
            raise NodePackagesError(
                f"workdir {self.workdir} is too deep: containerd's socket {node.socket} "
                f"would be longer than {SOCKET_PATH_MAX} characters")
        (node.directory / "containerd.toml").write_text(
            node.containerd_config(cdi=binary is not None))
        (node.directory / "cni" / "10-ptp.conflist").write_text(
            json.dumps(node.cni_config(), indent=2))
        containerd = str(binary) if binary else shutil.which("containerd") or "containerd"
        node.containerd = self._spawn(
            node, "containerd", [containerd, "--config", str(node.directory / "containerd.toml")])
        self.on_change()
        self._wait(node, node.containerd, lambda: self._ctr(node, "version").returncode == 0)
        for image in (*images, *self.imported):
            self._import(node, image)

    def import_image(self, image: ImageArchive) -> None:
        """Import `image` into every node's containerd, and into nodes added later: no
        registry is reachable, so a pod can only run what its node's runtime already holds."""
        for node in self.nodes:
            self._import(node, image)
        self.imported.append(image)

    def _import(self, node: RealNode, image: ImageArchive) -> None:
        _import_archive(node.name, node.socket, image)

    def _ctr(self, node: RealNode, *args: str) -> subprocess.CompletedProcess[str]:
        return _ctr(node.socket, *args)


    def _start_kubelet(self, node: RealNode, kubelet: Path) -> None:
        if self.dra_driver:
            self._link_kubelet_root(node)
        cert, key = node.directory / "kubelet-client.crt", node.directory / "kubelet-client.key"
        create_client_cert(self.certs, cert, key, f"system:node:{node.name}", "system:nodes")
        kubeconfig = node.directory / "kubelet.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self._kubeconfig(cert, key), sort_keys=False))
        address = node_address()
        create_serving_cert(self.certs, *node.serving_cert, f"system:node:{node.name}",
                            [f"IP:{address}", f"DNS:{node.name}"])
        config = node.directory / "kubelet.yaml"
        config.write_text(yaml.safe_dump(node.kubelet_config(self.certs.ca_cert, address)))
        node.kubelet = self._spawn(node, "kubelet", [
            str(kubelet),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={node.kubelet_root}",
            f"--hostname-override={node.name}",
            f"--node-ip={address}",
            f"--node-labels={REAL_NODE_LABEL}=true",
            "--v=1",
        ])
        self.on_change()

    @staticmethod
    def _link_kubelet_root(node: RealNode) -> None:
        """A DRA plugin's sockets live in the kubelet's root dir, and a socket's path holds
        at most 108 bytes, which a test's work dir leaves no room for: the kubelet and the
        driver use a short symlink to it instead (mounts still show the real path, where
        the node's stop looks for them)."""
        (node.directory / "kubelet").mkdir()
        link = Path(tempfile.gettempdir()) / f"cs-kubelet-{node.kubelet_port}"
        link.unlink(missing_ok=True)  # left by a crashed run: the port was free again
        link.symlink_to(node.directory / "kubelet")
        node.root_link = link

    def _start_dra_driver(self, node: RealNode, driver: Path) -> None:
        """The DRA example driver's kubelet plugin as a host process of this node (its
        chart would run it as a DaemonSet pod): it registers with the kubelet, publishes
        the node's simulated GPUs as a ResourceSlice, and writes a CDI spec per prepared
        claim where containerd reads them. It acts as a cluster admin (a client
        certificate in system:masters), which the throwaway cluster allows."""
        cert, key = node.directory / "dra-driver.crt", node.directory / "dra-driver.key"
        create_client_cert(self.certs, cert, key, "dra-example-driver", "system:masters")
        kubeconfig = node.directory / "dra-driver.kubeconfig"
        kubeconfig.write_text(yaml.safe_dump(self._kubeconfig(cert, key), sort_keys=False))
        kubelet_root = node.kubelet_root
        node.dra_driver = self._spawn(node, "dra-driver", [
            str(driver),
            f"--node-name={node.name}",
            f"--kubeconfig={kubeconfig}",
            f"--cdi-root={node.cdi_dir}",
            f"--num-devices={DRA_DEVICES_PER_NODE}",
            f"--kubelet-registrar-directory-path={kubelet_root / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={kubelet_root / 'plugins'}",
        ])
        self.on_change()
        self._wait(node, node.dra_driver, lambda: self._has_resource_slice(node))

    def _has_resource_slice(self, node: RealNode) -> bool:
        slices = self._api("GET", "/apis/resource.k8s.io/v1/resourceslices?fieldSelector="
                           f"spec.nodeName%3D{node.name}")
        return bool(slices and slices.get("items"))

    def _kubeconfig(self, cert: Path, key: Path) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "local", "cluster": {
                "server": self.server, "certificate-authority": str(self.certs.ca_cert)}}],
            "users": [{"name": "kubelet", "user": {
                "client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "kubelet"}}],
            "current-context": "local",
        }

    def _wait(self, node: RealNode, process: _Process, ready: Callable[[], bool]) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        assert process.process is not None
        while not ready():
            if process.process.poll() is not None or time.monotonic() > deadline:
                state = (f"exited with code {process.process.returncode}"
                         if process.process.poll() is not None
                         else f"not ready after {READY_TIMEOUT:.0f}s")
                raise ClusterStartError(
                    f"{node.name}: {process.name} {state}; last lines of "
                    f"{process.log_path}:\n{log_tail(process.log_path)}")
            time.sleep(0.2)

    def _wait_ready(self, node: RealNode) -> None:
        """Ready as the kubelet reports it; then lift the not-ready taint, which the
        node-lifecycle controller (not run by the local control plane) would lift."""
        assert node.kubelet is not None
        self._wait(node, node.kubelet, lambda: _is_ready(self._api("GET", _node_path(node))))
        for _ in range(10):
            body = self._api("GET", _node_path(node))
            assert body is not None
            taints = body["spec"].get("taints") or []
            kept = [t for t in taints if t.get("key") != NOT_READY_TAINT]
            if len(kept) == len(taints):
                return
            body["spec"]["taints"] = kept
            if self._api("PUT", _node_path(node), body) is not None:
                return
        raise RuntimeError(f"{node.name}: could not lift the {NOT_READY_TAINT} taint")

    def _api(self, method: str, path: str, body: Any = None) -> dict[str, Any] | None:
        """One call as the admin: the object, or None on 404/409 (absent, or changed)."""
        request = urllib.request.Request(
            f"{self.server}{path}", method=method,
            data=None if body is None else json.dumps(body).encode(),
            headers={"Authorization": f"Bearer {self.admin_token}",
                     "Content-Type": "application/json"})
        context = ssl.create_default_context(cafile=str(self.certs.ca_cert))
        try:
            with urllib.request.urlopen(request, context=context, timeout=10) as response:
                answer: dict[str, Any] = json.loads(response.read())
                return answer
        except urllib.error.HTTPError as error:
            if error.code in (404, 409):
                return None
            raise

    # -- stop --------------------------------------------------------------------------

    def stop(self, *, delete_nodes: bool = True) -> None:
        """Stop kubelets and containerds, remove every container, mount and state dir they
        made (logs stay); delete the Node objects too (else they would stay Ready with no
        kubelet behind them)."""
        for node in self.nodes:
            _stop_node(node.records(), self.log)
            node.containerd = node.kubelet = node.dra_driver = node.root_link = None
            self.on_change()
            if delete_nodes:
                with contextlib.suppress(OSError):  # the control plane may be gone already
                    self._api("DELETE", _node_path(node))


def _ctr(socket: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """`ctr` against one node's containerd, in the namespace the kubelet uses."""
    command = ["ctr", "--address", str(socket), "--namespace", "k8s.io", *args]
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120)


def _import_archive(name: str, socket: Path, image: ImageArchive) -> None:
    result = _ctr(socket, "images", "import", str(image.path))
    if result.returncode != 0:
        raise NodePackagesError(f"{name}: importing {image.reference} from {image.path} "
                                f"failed: {result.stderr.strip()}")


def import_into_recorded_nodes(records: list[dict[str, Any]], image: ImageArchive) -> list[str]:
    """Import `image` into the containerd of every running node recorded in a cluster's
    state file (`localcluster import-image`); the names of those nodes."""
    running = [r for r in records if "containerd" in r["processes"]
               and _owned(r["processes"]["containerd"])]
    for record in running:
        _import_archive(record["name"], Path(record["socket"]), image)
    return [record["name"] for record in running]



def node_address() -> str:
    """The machine's address towards its default gateway: what every real node reports as
    its InternalIP and serves its kubelet on. A kubelet refuses a loopback node IP, and its
    node name resolves nowhere, so the API server dials this address."""
    gateway = _default_gateway()
    if gateway is None:
        raise NodePackagesError("real nodes need a non-loopback address for the API server "
                                f"to reach their kubelets: {ROUTES} has no default route")
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((str(gateway), 9))  # a datagram socket's connect sends nothing
        address: str = probe.getsockname()[0]
    return address


def _default_gateway() -> ipaddress.IPv4Address | None:
    with contextlib.suppress(OSError):
        for line in ROUTES.read_text().splitlines()[1:]:
            fields = line.split()
            if int(fields[1], 16) == 0 and int(fields[7], 16) == 0:
                return ipaddress.IPv4Address(int(fields[2], 16).to_bytes(4, "little"))
    return None


def pod_subnet(kubelet_port: int) -> str:
    """10.<port / 256>.<port % 256>.0/24: below the ephemeral range that is 10.39-10.127,
    clear of the service range (10.0.0.0/24)."""
    return f"10.{kubelet_port >> 8}.{kubelet_port & 0xFF}.0/24"


def _routed_networks() -> list[ipaddress.IPv4Network]:
    """The machine's IPv4 routes but the default one (/proc/net/route, little-endian)."""
    networks = []
    with contextlib.suppress(OSError):
        for line in ROUTES.read_text().splitlines()[1:]:
            fields = line.split()
            destination, mask = (int(fields[i], 16).to_bytes(4, "little") for i in (1, 7))
            if any(mask):
                networks.append(ipaddress.IPv4Network(
                    f"{ipaddress.IPv4Address(destination)}/{ipaddress.IPv4Address(mask)}",
                    strict=False))
    return networks


def _node_ports(count: int) -> list[int]:
    """(kubelet, healthz) port pairs whose pod subnets overlap none of the machine's routes
    (another running node's pods, or a network of the machine's own)."""
    routed = _routed_networks()
    for _ in range(20):
        ports = free_ports(2 * count)
        subnets = [ipaddress.IPv4Network(pod_subnet(port)) for port in ports[::2]]
        if not any(s.overlaps(r) for s in subnets for r in routed):
            return ports
    raise ClusterStartError(f"no {count} pod subnets clear of the machine's routes")


def _node_path(node: RealNode) -> str:
    return f"/api/v1/nodes/{node.name}"


def _is_ready(node: dict[str, Any] | None) -> bool:
    conditions = ((node or {}).get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _owned(record: dict[str, Any]) -> bool:
    """True if the recorded pid still runs the recorded program since the recorded time."""
    pid = int(record["pid"])
    try:
        exe = os.readlink(f"/proc/{pid}/exe").removesuffix(" (deleted)")
    except OSError:
        return False
    return bool(exe == record["exe"] and process_start_time(pid) == record["start_time"])


def _terminate(record: dict[str, Any]) -> None:
    if not _owned(record):
        return
    pid = int(record["pid"])
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
        if not wait_gone(pid, STOP_GRACE):
            os.kill(pid, signal.SIGKILL)
            wait_gone(pid, STOP_GRACE)


def _stop_node(record: dict[str, Any], log: Log) -> None:
    """DRA driver and kubelet first (so nothing restarts), then every container through
    containerd, then containerd and any shim it left, then the mounts; the directory goes
    last."""
    processes = record["processes"]
    for name in ("dra-driver", "kubelet"):
        if name in processes:
            _terminate(processes[name])
    if "containerd" in processes and _owned(processes["containerd"]):
        _remove_containers(Path(record["socket"]))
        _terminate(processes["containerd"])
    for pid in _shims_of(Path(record["socket"])):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    directory = Path(record["directory"])
    _unmount_under(directory)
    link = Path(record.get("root_link") or directory / "absent")
    if link.is_symlink() and Path(os.readlink(link)).is_relative_to(directory):
        link.unlink()
    _remove_log_links(directory)
    # The logs and configuration files stay, as the control plane's do, for a post-mortem.
    for entry in directory.iterdir() if directory.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        elif entry.is_socket():
            entry.unlink(missing_ok=True)
    if processes:
        log(f"stopped real node {record['name']}")


def _remove_containers(socket: Path) -> None:
    """Kill and delete every task and container of the node's containerd (pods and
    sandboxes), so no container outlives its node."""
    for task in _ctr(socket, "tasks", "list", "--quiet").stdout.split():
        _ctr(socket, "tasks", "kill", "--signal", "SIGKILL", task)
        _ctr(socket, "tasks", "delete", "--force", task)
    containers = _ctr(socket, "containers", "list", "--quiet").stdout.split()
    if containers:
        _ctr(socket, "containers", "delete", *containers)


def _shims_of(socket: Path) -> Iterator[int]:
    """Pids of containerd shims started for this node's containerd (their command line
    names its socket), e.g. when containerd was killed before its containers."""
    needle = str(socket).encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            argv = (entry / "cmdline").read_bytes().split(b"\0")
            if argv and argv[0].endswith(b"containerd-shim-runc-v2") and needle in argv:
                yield int(entry.name)


def _remove_log_links(directory: Path) -> None:
    """The kubelet links each container's log into /var/log/containers (a fixed path);
    drop the links into this node's pod logs."""
    with contextlib.suppress(OSError):
        for link in CONTAINER_LOG_LINKS.iterdir():
            with contextlib.suppress(OSError):
                if link.is_symlink() and Path(os.readlink(link)).is_relative_to(directory):
                    link.unlink()


def _unmount_under(directory: Path) -> None:
    """Detach every mount at or below `directory` (deepest first): the kubelet's own
    bind mount of its root dir, pod volumes, container root filesystems, network
    namespaces."""
    prefix = str(directory.absolute())
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    targets = {line.split()[4].replace("\\040", " ") for line in mountinfo}
    umount2 = ctypes.CDLL(None, use_errno=True).umount2
    for target in sorted(targets, key=len, reverse=True):
        if target == prefix or target.startswith(prefix + "/"):
            umount2(target.encode(), MNT_DETACH)


def stop_recorded_nodes(records: list[dict[str, Any]], log: Log) -> None:
    """Stop real nodes recorded in a cluster's state file (`localcluster down`)."""
    for record in records:
        _stop_node(record, log)
