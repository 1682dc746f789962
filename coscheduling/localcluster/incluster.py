"""What pods on real nodes need from the control plane, as a cluster has it: the default
scheduler (kube-scheduler binds pods that name no other scheduler, the chart's own among
them), and kube-proxy (iptables mode, on this machine, where every real node's pods are
routed) so a pod reaches Services, the `kubernetes` Service of the API server first.

The API server then serves on every address and advertises the machine's (the address the
kubelets serve on), which kube-proxy's rules send 10.0.0.1:443 to. Each program runs as the
identity the default RBAC already grants it: system:kube-scheduler, system:kube-proxy.

kube-proxy's chains (KUBE-SERVICES and the rest) have fixed names in the machine's network
namespace: one local cluster at a time runs it. Its rules are removed when it stops.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from pathlib import Path

__all__ = [
    "KUBE_PROXY",
    "KUBE_PROXY_USER",
    "KUBE_SCHEDULER",
    "KUBE_SCHEDULER_USER",
    "kube_proxy_argv",
    "kube_scheduler_argv",
    "other_proxies",
    "remove_proxy_rules",
]

KUBE_SCHEDULER = "kube-scheduler"
KUBE_PROXY = "kube-proxy"
# The users the API server's bootstrap RBAC binds to system:kube-scheduler and
# system:node-proxier.
KUBE_SCHEDULER_USER = "system:kube-scheduler"
KUBE_PROXY_USER = "system:kube-proxy"


def kube_scheduler_argv(binary: Path, kubeconfig: Path, workdir: Path, port: int) -> list[str]:
    """The default scheduler, alone (no leader election), serving health on loopback."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--leader-elect=false",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={workdir / 'kube-scheduler-serving'}",
        "--profiling=false",
    ]


def kube_proxy_argv(binary: Path, kubeconfig: Path, node: str, address: str,
                    healthz_port: int, metrics_port: int) -> list[str]:
    """kube-proxy for the whole machine, as real node `node`'s: its node IP is the machine's
    `address` (every real node's InternalIP); its servers on loopback ports of this
    cluster; conntrack sysctls left as they are (a shared machine's, not ours)."""
    return [
        str(binary),
        f"--kubeconfig={kubeconfig}",
        "--proxy-mode=iptables",
        f"--hostname-override={node}",
        f"--bind-address={address}",
        f"--healthz-bind-address=127.0.0.1:{healthz_port}",
        f"--metrics-bind-address=127.0.0.1:{metrics_port}",
        "--conntrack-max-per-core=0",
        "--conntrack-tcp-timeout-established=0",
        "--conntrack-tcp-timeout-close-wait=0",
        "--iptables-localhost-nodeports=false",
        "--profiling=false",
    ]


def other_proxies(proc: Path = Path("/proc")) -> list[int]:
    """Pids of kube-proxy processes running on this machine (another local cluster's, or
    the machine's own): their chains would be ours, each rewriting the other's rules."""
    found = []
    for entry in proc.iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                exe = os.readlink(entry / "exe").removesuffix(" (deleted)")
                if Path(exe).name == KUBE_PROXY:
                    found.append(int(entry.name))
    return sorted(found)


def remove_proxy_rules(binary: str) -> None:
    """kube-proxy's own cleanup: every chain and rule it made in this network namespace."""
    subprocess.run([binary, "--cleanup"], capture_output=True, check=False, timeout=60)
