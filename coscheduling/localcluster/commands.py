"""`coscheduling localcluster up|import-image|down`: run a local control plane outside of
pytest."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .build import (
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_VERSION_VAR,
    available_kubernetes_versions,
)
from .images import ImageArchive
from .launcher import STATE_FILE, LocalCluster, running_components, stop_from_state
from .realnodes import MAX_REAL_NODES, NodePackagesError, import_into_recorded_nodes


def add_parser(subparsers: Any) -> None:
    """Register `localcluster up` and `localcluster down` on the top-level CLI."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "localcluster", help="start or stop a local Kubernetes control plane"
    )
    commands = parser.add_subparsers(dest="localcluster_command", required=True)
    up = commands.add_parser(
        "up",
        help="start etcd, kube-apiserver and kube-controller-manager; print the kubeconfig",
        description=f"The Kubernetes release is ${KUBERNETES_VERSION_VAR} (one of "
        f"{', '.join(sorted(available_kubernetes_versions()))}; default "
        f"{DEFAULT_KUBERNETES_VERSION}), with the native Workload API enabled.",
    )
    up.add_argument("--workdir", type=Path, required=True, help="directory for data, logs, certs")
    up.add_argument(
        "--no-controller-manager",
        action="store_true",
        help="run only etcd and kube-apiserver",
    )
    up.add_argument(
        "--real-nodes",
        type=_node_count,
        default=0,
        metavar="N",
        help="also start N kubelets (real-node-1..N, each over its own containerd) that run "
        "pods, with kube-scheduler and kube-proxy so that pods are bound by default and reach "
        "the API server at the `kubernetes` Service; needs root and `make node-packages`",
    )
    up.add_argument(
        "--dra-driver",
        action="store_true",
        help="with --real-nodes: each node also runs the DRA example driver's kubelet plugin "
        "(four simulated GPUs of driver gpu.example.com) over containerd 1.7 with CDI",
    )
    up.set_defaults(func=cmd_up)
    image = commands.add_parser(
        "import-image", help="import an image archive into every real node's containerd",
        description="No registry is reachable from the real nodes: an image a pod runs must "
        "be in its node's containerd, e.g. the scheduler's, build/coscheduling-image.tar "
        "(make image), for the Helm chart's pods.")
    image.add_argument("--workdir", type=Path, required=True)
    image.add_argument("archive", type=Path, help="an OCI or Docker image archive (tar)")
    image.set_defaults(func=cmd_import_image)
    down = commands.add_parser("down", help="stop the control plane started in --workdir")
    down.add_argument("--workdir", type=Path, required=True)
    down.set_defaults(func=cmd_down)


def _node_count(text: str) -> int:
    """--real-nodes: a whole number from 0 to MAX_REAL_NODES."""
    try:
        count = int(text)
    except ValueError:
        count = -1
    if not 0 <= count <= MAX_REAL_NODES:
        raise argparse.ArgumentTypeError(
            f"--real-nodes must be a whole number from 0 to {MAX_REAL_NODES}, got {text!r}")
    return count


def cmd_up(args: argparse.Namespace) -> int:
    """Start a cluster that outlives this process; the kubeconfig path is the last line."""
    if args.dra_driver and not args.real_nodes:
        print("--dra-driver runs on real nodes: give --real-nodes N too", file=sys.stderr)
        return 2
    running = running_components(args.workdir)
    if running:
        print(
            f"a cluster is already running in {args.workdir} {running}; run down first",
            file=sys.stderr,
        )
        return 1
    cluster = LocalCluster(
        args.workdir,
        controller_manager=not args.no_controller_manager,
        die_with_parent=False,
        real_nodes=args.real_nodes,
        dra_driver=args.dra_driver,
    )
    cluster.start()
    cluster.detach()
    print(cluster.kubeconfig, flush=True)
    return 0


def cmd_import_image(args: argparse.Namespace) -> int:
    """Import the archive into the nodes recorded in `--workdir`/cluster.json."""
    state = args.workdir / STATE_FILE
    if not state.is_file():
        print(f"no {STATE_FILE} in {args.workdir}: no cluster to import into", file=sys.stderr)
        return 1
    if not args.archive.is_file():
        print(f"archive: {args.archive} is not a file", file=sys.stderr)
        return 2
    records = json.loads(state.read_text()).get("real_nodes") or []
    try:
        names = import_into_recorded_nodes(records, ImageArchive(str(args.archive),
                                                                 args.archive))
    except NodePackagesError as error:
        print(error, file=sys.stderr)
        return 1
    if not names:
        print(f"no real node runs in {args.workdir} (start with --real-nodes N)",
              file=sys.stderr)
        return 1
    print(f"imported {args.archive} into {', '.join(names)}", file=sys.stderr)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """Stop the processes recorded in `--workdir`/cluster.json."""
    if not (args.workdir / STATE_FILE).is_file():
        print(f"no {STATE_FILE} in {args.workdir}: nothing to stop", file=sys.stderr)
        return 1
    stop_from_state(args.workdir)
    return 0
