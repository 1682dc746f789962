"""What a local control plane runs for pods on real nodes (incluster.py): the API server
on an address pods reach, the default scheduler; nothing of it without them."""

from __future__ import annotations

from pathlib import Path

import pytest

from coscheduling.localcluster import Binaries, LocalCluster
from coscheduling.localcluster.certs import ClusterCerts
from coscheduling.localcluster.incluster import kube_proxy_argv, other_proxies
from coscheduling.localcluster.realnodes import node_address


def _argv(cluster: LocalCluster) -> dict[str, list[str]]:
    binaries = Binaries(*(Path(f"/bin/{n}") for n in ("etcd", "apiserver", "kcm", "sched")))
    certs = ClusterCerts(*(Path(f"/pki/{n}") for n in ("ca", "ca.key", "s", "s.key", "sa",
                                                       "sa.pub")))
    return {name: c.argv for name, c in cluster._define_components(binaries, certs).items()}


@pytest.mark.parametrize(("real_nodes", "in_cluster", "expected"), [
    (0, None, False),
    (2, None, True),
    (2, False, False),
    (0, True, True),
])
def test_real_nodes_bring_the_scheduler_and_a_reachable_api_server(
    tmp_path: Path, real_nodes: int, in_cluster: bool | None, expected: bool,
) -> None:
    cluster = LocalCluster(tmp_path, real_nodes=real_nodes, in_cluster=in_cluster,
                           log=lambda _: None)
    argv = _argv(cluster)
    apiserver = argv["kube-apiserver"]
    address = node_address() if expected else "127.0.0.1"
    assert f"--advertise-address={address}" in apiserver
    assert ("--bind-address=0.0.0.0" in apiserver) is expected
    assert ("--endpoint-reconciler-type=lease" in apiserver) is expected
    assert ("kube-scheduler" in argv) is expected
    assert "kube-proxy" not in argv  # started with the first real node, as that node's


def test_kube_proxy_runs_as_a_node_on_the_machine_address() -> None:
    argv = kube_proxy_argv(Path("/bin/kube-proxy"), Path("/k.conf"), "real-node-1",
                           "192.0.2.2", 1001, 1002)
    assert {"--proxy-mode=iptables", "--hostname-override=real-node-1",
            "--bind-address=192.0.2.2", "--healthz-bind-address=127.0.0.1:1001",
            "--metrics-bind-address=127.0.0.1:1002", "--conntrack-max-per-core=0"} <= set(argv)


def test_a_kube_proxy_running_on_the_machine_is_found(tmp_path: Path) -> None:
    """Another cluster's kube-proxy (by its program's name, whatever its path) is found;
    other programs and entries that are not processes are not."""
    programs = {"101": "/cache/bin/kubernetes-v1.37.2/kube-proxy",
                "102": "/usr/local/bin/kube-proxy (deleted)", "103": "/bin/sh",
                "self": "/cache/bin/kubernetes-v1.37.2/kube-proxy"}
    for entry, exe in programs.items():
        (tmp_path / entry).mkdir()
        (tmp_path / entry / "exe").symlink_to(exe)
    (tmp_path / "104").mkdir()  # a process whose exe cannot be read
    assert other_proxies(tmp_path) == [101, 102]
