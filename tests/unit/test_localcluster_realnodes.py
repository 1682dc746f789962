"""Real nodes without starting them: what each node is given (nothing shared that would
collide), the images written here, the checks that name what is missing, and which
recorded processes a stop may signal."""

from __future__ import annotations

import argparse
import hashlib
import ipaddress
import json
import os
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import Any

import pytest

from coscheduling.localcluster import build, commands, realnodes
from coscheduling.localcluster.certs import ClusterCerts
from coscheduling.localcluster.images import (
    PAUSE_IMAGE,
    TEST_IMAGE,
    ImageError,
    busybox_layer,
    ensure_images,
    is_dynamic_elf,
)
from coscheduling.localcluster.processes import ClusterStartError, process_start_time
from coscheduling.localcluster.realnodes import MAX_REAL_NODES, RealNode, RealNodes

FAKE_BUSYBOX = "#!/bin/sh\n[ \"$1\" = --list ] && printf 'sh\\nsleep\\nbusybox\\nls\\n'\n"


def _certs(tmp_path: Path) -> ClusterCerts:
    pki = tmp_path / "pki"
    return ClusterCerts(pki / "ca.crt", pki / "ca.key", pki / "apiserver.crt",
                        pki / "apiserver.key", pki / "sa.key", pki / "sa.pub")


def _nodes(tmp_path: Path, count: int = 3) -> RealNodes:
    return RealNodes(workdir=tmp_path, server="https://127.0.0.1:1", certs=_certs(tmp_path),
                     admin_token="t", count=count, die_with_parent=True, log=lambda _: None)


def _fields(node: RealNode, ca: Path) -> dict[str, Any]:
    """Everything of one node that another node on the machine must not share."""
    containerd = tomllib.loads(node.containerd_config())
    cri = containerd["plugins"]["io.containerd.grpc.v1.cri"]
    kubelet = node.kubelet_config(ca, "192.0.2.2")
    cni = node.cni_config()
    return {
        "name": node.name,
        "kubelet port": kubelet["port"],
        "healthz port": kubelet["healthzPort"],
        "containerd socket": containerd["grpc"]["address"],
        "containerd root": containerd["root"],
        "containerd state": containerd["state"],
        "runc root": cri["containerd"]["runtimes"]["runc"]["options"]["Root"],
        "CNI conf dir": cri["cni"]["conf_dir"],
        "CNI network": cni["name"],
        "pod subnet": cni["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
        "IPAM data dir": cni["plugins"][0]["ipam"]["dataDir"],
        "pod logs dir": kubelet["podLogsDir"],
        "runtime endpoint": kubelet["containerRuntimeEndpoint"],
    }


def test_no_two_nodes_share_a_name_port_directory_socket_or_subnet(tmp_path: Path) -> None:
    nodes = _nodes(tmp_path).nodes
    fields = [_fields(node, tmp_path / "ca.crt") for node in nodes]
    for key in fields[0]:
        values = [f[key] for f in fields]
        assert len(set(values)) == len(nodes), f"{key} is shared: {values}"
    for node, node_fields in zip(nodes, fields, strict=True):
        for key in ("containerd socket", "containerd root", "containerd state", "runc root",
                    "CNI conf dir", "IPAM data dir", "pod logs dir"):
            assert Path(node_fields[key]).is_relative_to(node.directory), key


@pytest.mark.parametrize(("key", "expected"), [
    ("address", "192.0.2.2"),  # the InternalIP the API server dials for logs and exec
    ("healthzBindAddress", "127.0.0.1"),
    ("readOnlyPort", 0),
    ("failCgroupV1", False),  # the machine has cgroup v1; kubelet 1.35+ refuses it otherwise
    ("failSwapOn", False),
    ("cgroupDriver", "cgroupfs"),
    ("cgroupsPerQOS", False),  # kubelets sharing one cgroup root would remove each other's
    ("enforceNodeAllocatable", ["none"]),
    ("authentication", {"anonymous": {"enabled": False}, "webhook": {"enabled": False},
                        "x509": {"clientCAFile": "/ca.crt"}}),
])
def test_kubelet_configuration(tmp_path: Path, key: str, expected: Any) -> None:
    config = _nodes(tmp_path, 1).nodes[0].kubelet_config(Path("/ca.crt"), "192.0.2.2")
    assert config[key] == expected


def test_the_kubelet_serves_with_a_certificate_of_its_own_node(tmp_path: Path) -> None:
    node = _nodes(tmp_path, 1).nodes[0]
    config = node.kubelet_config(Path("/ca.crt"), "192.0.2.2")
    assert (config["tlsCertFile"], config["tlsPrivateKeyFile"]) == tuple(
        str(path) for path in node.serving_cert)
    assert Path(config["tlsCertFile"]).parent == node.directory


def test_only_a_dra_node_has_containerd_inject_cdi_devices(tmp_path: Path) -> None:
    node = _nodes(tmp_path, 1).nodes[0]
    plain, dra = (tomllib.loads(node.containerd_config(cdi))["plugins"][
        "io.containerd.grpc.v1.cri"] for cdi in (False, True))
    assert "enable_cdi" not in plain  # Debian's containerd 1.6 has no CDI
    assert (dra["enable_cdi"], dra["cdi_spec_dirs"]) == (True, [str(node.cdi_dir)])


@pytest.mark.parametrize(("path", "expected"), [
    (("sandbox_image",), PAUSE_IMAGE),
    (("restrict_oom_score_adj",), True),
    (("netns_mounts_under_state_dir",), True),
    (("containerd", "runtimes", "runc", "options", "SystemdCgroup"), False),
    (("cni", "bin_dir"), str(realnodes.CNI_BIN_DIR)),
])
def test_containerd_configuration(tmp_path: Path, path: tuple[str, ...], expected: Any) -> None:
    config = tomllib.loads(_nodes(tmp_path, 1).nodes[0].containerd_config())
    value: Any = config["plugins"]["io.containerd.grpc.v1.cri"]
    for key in path:
        value = value[key]
    assert value == expected


@pytest.mark.parametrize("count", [0, -1, MAX_REAL_NODES + 1])
def test_a_count_out_of_range_is_refused(tmp_path: Path, count: int) -> None:
    with pytest.raises(ValueError, match=rf"count must be from 1 to {MAX_REAL_NODES}, got"):
        _nodes(tmp_path, count)


@pytest.mark.parametrize("count", [0, MAX_REAL_NODES - 2])
def test_adding_out_of_range_is_refused_before_anything_starts(tmp_path: Path,
                                                               count: int) -> None:
    nodes = _nodes(tmp_path, 3)
    with pytest.raises(ValueError, match=rf"add count must be from 1 to {MAX_REAL_NODES - 3}"):
        nodes.add(count)
    assert nodes.names == ["real-node-1", "real-node-2", "real-node-3"]


@pytest.mark.parametrize(("argument", "count"), [
    ("0", 0), ("2", 2), (str(MAX_REAL_NODES), MAX_REAL_NODES),
    ("two", None), ("-1", None), ("1.5", None), (str(MAX_REAL_NODES + 1), None),
])
def test_real_nodes_option(argument: str, count: int | None,
                           capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    commands.add_parser(parser.add_subparsers())
    argv = ["localcluster", "up", "--workdir", "w", "--real-nodes", argument]
    if count is not None:
        assert parser.parse_args(argv).real_nodes == count
        return
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert f"--real-nodes must be a whole number from 0 to {MAX_REAL_NODES}, got " \
        f"'{argument}'" in capsys.readouterr().err


def test_the_dra_driver_option_needs_real_nodes(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    commands.add_parser(parser.add_subparsers())
    args = parser.parse_args(["localcluster", "up", "--workdir", str(tmp_path), "--dra-driver"])
    assert args.func(args) == 2
    assert "give --real-nodes N too" in capsys.readouterr().err
    assert not (tmp_path / "cluster.json").exists()


def test_missing_programs_are_named_with_their_package(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    missing = realnodes.missing_node_packages()
    assert {k: v for k, v in missing.items() if not k.startswith("/")} == {
        "containerd": "containerd", "ctr": "containerd", "runc": "runc"}
    with pytest.raises(realnodes.NodePackagesError, match=r"run `make node-packages`"):
        realnodes._require_machine()


def _record(changes: dict[str, Any]) -> dict[str, Any]:
    """This test process as a record, then changed."""
    pid = os.getpid()
    record = {"pid": pid, "start_time": process_start_time(pid),
              "exe": os.readlink(f"/proc/{pid}/exe")}
    return {**record, **changes}


@pytest.mark.parametrize(("changes", "owned"), [
    ({}, True),
    ({"start_time": -1}, False),  # the pid was recycled by another process
    ({"exe": "/usr/bin/containerd"}, False),  # another program
    ({"pid": 2**22 + 1}, False),  # gone
])
def test_only_the_recorded_process_may_be_signalled(changes: dict[str, Any],
                                                     owned: bool) -> None:
    assert realnodes._owned(_record(changes)) is owned


@pytest.fixture
def fake_busybox(tmp_path: Path) -> Path:
    path = tmp_path / "busybox"
    path.write_text(FAKE_BUSYBOX)
    path.chmod(0o755)
    return path


def _archive(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore[union-attr]
                if m.isfile()}


def test_images_are_oci_archives_ctr_can_name(tmp_path: Path, fake_busybox: Path) -> None:
    pause, test = ensure_images(tmp_path / "images", fake_busybox)
    assert (pause.reference, test.reference) == (PAUSE_IMAGE, TEST_IMAGE)
    for image in (pause, test):
        files = _archive(image.path)
        for name, data in files.items():
            if name.startswith("blobs/sha256/"):
                assert name.removeprefix("blobs/sha256/") == hashlib.sha256(data).hexdigest()
        [entry] = json.loads(files["index.json"])["manifests"]
        assert entry["annotations"]["io.containerd.image.name"] == image.reference
        manifest = json.loads(files[f"blobs/sha256/{entry['digest'][7:]}"])
        config = json.loads(files[f"blobs/sha256/{manifest['config']['digest'][7:]}"])
        assert config["rootfs"]["diff_ids"] == [manifest["layers"][0]["digest"]]
    pause_config = json.loads(_archive(pause.path)["index.json"])
    assert pause_config != json.loads(_archive(test.path)["index.json"])


def test_the_layer_holds_busybox_and_a_link_per_applet(fake_busybox: Path,
                                                       tmp_path: Path) -> None:
    layer = tmp_path / "layer.tar"
    layer.write_bytes(busybox_layer(fake_busybox))
    with tarfile.open(layer) as tar:
        members = {m.name: m for m in tar.getmembers()}
    assert members["bin/busybox"].isfile()
    assert {n: m.linkname for n, m in members.items() if m.issym()} == {
        "bin/sh": "busybox", "bin/sleep": "busybox", "bin/ls": "busybox"}
    assert members["tmp"].mode == 0o1777
    assert busybox_layer(fake_busybox) == layer.read_bytes(), "the layer is not reproducible"


def test_images_are_written_once_per_busybox(tmp_path: Path, fake_busybox: Path) -> None:
    first = ensure_images(tmp_path, fake_busybox)
    stamps = [image.path.stat().st_mtime_ns for image in first]
    assert [image.path.stat().st_mtime_ns for image in ensure_images(tmp_path, fake_busybox)] \
        == stamps
    fake_busybox.write_text(FAKE_BUSYBOX + "# another build\n")
    assert {i.path for i in ensure_images(tmp_path, fake_busybox)}.isdisjoint(
        {i.path for i in first})


def test_a_missing_busybox_names_its_package(tmp_path: Path) -> None:
    with pytest.raises(ImageError, match=r"static busybox.*busybox-static"):
        busybox_layer(tmp_path / "absent")


def _minor(version: str) -> int:
    return int(version.split(".")[1])


@pytest.mark.parametrize("server", sorted(build.available_kubernetes_versions()))
def test_the_kubelet_is_within_the_skew_policy_of_every_control_plane(server: str) -> None:
    """A kubelet may be up to three minor releases older than its API server, never newer."""
    assert 0 <= _minor(server) - _minor(build.KUBELET_VERSION) <= 3


@pytest.mark.parametrize(("ensure", "out", "module_dir", "package", "stamp"), [
    (build.ensure_kubelet, f"kubelet-v{build.KUBELET_VERSION}/kubelet", "gomod/kubelet",
     "k8s.io/kubernetes/cmd/kubelet", f"gitVersion=v{build.KUBELET_VERSION}"),
    (build.ensure_containerd, f"containerd-v{build.CONTAINERD_VERSION}/containerd",
     "gomod/containerd", "github.com/containerd/containerd/cmd/containerd",
     f"-tags=no_btrfs no_devmapper no_zfs -ldflags -s -w -X github.com/containerd/"
     f"containerd/version.Version=v{build.CONTAINERD_VERSION}"),
    (build.ensure_dra_example_driver,
     f"dra-example-driver-v{build.DRA_EXAMPLE_DRIVER_VERSION}/dra-example-kubeletplugin",
     "gomod/dra-example-driver",
     "sigs.k8s.io/dra-example-driver/cmd/dra-example-kubeletplugin", "-ldflags -s -w"),
])
def test_node_programs_are_built_once_from_their_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ensure: Any, out: str,
    module_dir: str, package: str, stamp: str,
) -> None:
    monkeypatch.setenv("COSCHEDULING_CACHE_DIR", str(tmp_path / "cache"))
    fake = tmp_path / "bin" / "go"
    fake.parent.mkdir()
    calls = tmp_path / "calls"
    fake.write_text(f"#!/bin/sh\necho \"$PWD $*\" >> {calls}\n"
                    "while [ \"$1\" != -o ]; do shift; done; printf '#!/bin/sh\\n' > \"$2\"\n"
                    "/bin/chmod +x \"$2\"\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(fake.parent))
    built = ensure(log=lambda _: None)
    assert built == tmp_path / "cache" / "bin" / out
    assert ensure(log=lambda _: None) == built
    [call] = calls.read_text().splitlines()
    assert call.split()[0].endswith(module_dir)
    assert call.endswith(package)
    assert stamp in call


@pytest.mark.parametrize(("port", "subnet"), [
    (10000, "10.39.16.0/24"), (10001, "10.39.17.0/24"), (32767, "10.127.255.0/24"),
])
def test_a_node_takes_the_pod_subnet_its_kubelet_port_names(port: int, subnet: str) -> None:
    assert realnodes.pod_subnet(port) == subnet


@pytest.mark.parametrize(("routed", "found"), [
    ([], True),
    (["10.0.0.0/8"], False),  # every subnet the ports can name is routed already
])
def test_pod_subnets_avoid_the_machines_routes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, routed: list[str], found: bool
) -> None:
    networks = [ipaddress.IPv4Network(n) for n in routed]
    monkeypatch.setattr(realnodes, "_routed_networks", lambda: networks)
    if not found:
        with pytest.raises(ClusterStartError, match="pod subnets clear of the machine's routes"):
            _nodes(tmp_path, 2)
        return
    for node in _nodes(tmp_path, 2).nodes:
        assert not any(ipaddress.IPv4Network(node.subnet).overlaps(n) for n in networks)


ROUTE_TABLE = """Iface\tDestination\tGateway\tFlags\tRefCnt\tUse\tMetric\tMask\tMTU\tWindow\tIRTT
eth0\t00000000\t010200C0\t0003\t0\t0\t0\t00000000\t0\t0\t0
eth0\t000200C0\t00000000\t0001\t0\t0\t0\t00FFFFFF\t0\t0\t0
veth1\t0210270A\t00000000\t0005\t0\t0\t0\tFFFFFFFF\t0\t0\t0
"""


def test_the_machines_routes_are_read_without_the_default_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE)
    monkeypatch.setattr(realnodes, "ROUTES", routes)
    assert realnodes._routed_networks() == [
        ipaddress.IPv4Network("192.0.2.0/24"), ipaddress.IPv4Network("10.39.16.2/32")]


def test_the_node_address_is_the_one_towards_the_default_gateway(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    routes = tmp_path / "route"
    routes.write_text(ROUTE_TABLE)
    monkeypatch.setattr(realnodes, "ROUTES", routes)
    assert realnodes._default_gateway() == ipaddress.IPv4Address("192.0.2.1")
    routes.write_text("\n".join(ROUTE_TABLE.splitlines()[::2]))  # header and veth1 only
    with pytest.raises(realnodes.NodePackagesError, match="no default route"):
        realnodes.node_address()


def _elf(*segment_types: int) -> bytes:
    """A 64-bit ELF header with one program header per segment type (56 bytes each)."""
    header = bytearray(64)
    header[:5] = b"\x7fELF\x02"
    header[0x20:0x28] = (64).to_bytes(8, "little")
    header[0x36:0x38] = (56).to_bytes(2, "little")
    header[0x38:0x3A] = len(segment_types).to_bytes(2, "little")
    return bytes(header) + b"".join(t.to_bytes(4, "little") + bytes(52) for t in segment_types)


@pytest.mark.parametrize(("binary", "dynamic"), [
    (_elf(1, 1), False),  # PT_LOAD only: static
    (_elf(6, 3, 1), True),  # PT_PHDR, PT_INTERP, PT_LOAD: needs ld.so
    (b"#!/bin/sh\n", False),
    (Path(sys.executable).resolve().read_bytes(), True),  # the Python interpreter links libc
])
def test_a_dynamic_executable_is_told_apart(binary: bytes, dynamic: bool) -> None:
    assert is_dynamic_elf(binary) is dynamic


def test_a_dynamic_busybox_is_refused_with_its_package(tmp_path: Path) -> None:
    fake = tmp_path / "busybox"
    fake.write_bytes(Path(sys.executable).resolve().read_bytes())
    fake.chmod(0o755)
    with pytest.raises(ImageError, match=r"dynamically linked.*busybox-static"):
        busybox_layer(fake)


@pytest.mark.parametrize(("into_node", "removed"), [(True, True), (False, False)])
def test_a_stop_removes_the_kubelet_root_link_only_into_its_node(
    tmp_path: Path, into_node: bool, removed: bool
) -> None:
    directory, elsewhere = tmp_path / "node", tmp_path / "elsewhere"
    (directory / "kubelet").mkdir(parents=True)
    elsewhere.mkdir()
    link = tmp_path / "cs-kubelet-1"
    link.symlink_to(directory / "kubelet" if into_node else elsewhere)
    record = {"name": "n", "directory": str(directory), "socket": str(directory / "s"),
              "root_link": str(link), "processes": {}}
    realnodes.stop_recorded_nodes([record], log=lambda _: None)
    assert link.is_symlink() is not removed
    assert elsewhere.is_dir()


@pytest.mark.parametrize(("state", "archive", "code", "said"), [
    (None, True, 1, "no cluster.json in"),
    ({"components": {}, "real_nodes": []}, False, 2, "is not a file"),
    ({"components": {}, "real_nodes": []}, True, 1, "no real node runs in"),
])
def test_import_image_names_what_is_missing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], state: dict[str, Any] | None,
    archive: bool, code: int, said: str,
) -> None:
    if state is not None:
        (tmp_path / "cluster.json").write_text(json.dumps(state))
    image = tmp_path / "image.tar"
    if archive:
        image.write_bytes(b"")
    parser = argparse.ArgumentParser()
    commands.add_parser(parser.add_subparsers())
    args = parser.parse_args(["localcluster", "import-image", "--workdir", str(tmp_path),
                              str(image)])
    assert args.func(args) == code
    assert said in capsys.readouterr().err
