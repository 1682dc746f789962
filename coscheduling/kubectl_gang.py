"""kubectl gang: every gang in the cluster, why one waits, and whether a job would fit.

A kubectl plugin (an executable named ``kubectl-gang`` on PATH, installed with the package):

  kubectl gang list [-A]                  every gang of every producer: phase, placed/min,
                                          queue, age, why pending
  kubectl gang explain NAMESPACE/NAME     why a gang is where it is
  kubectl gang whatif -f job.yaml         would it fit now, after preempting, after its
                                          queue reclaims, once room frees, or never; and
                                          what it is short of (asks the scheduler's gRPC
                                          server; nothing is created)

Credentials as kubectl finds them: --kubeconfig, $KUBECONFIG, ~/.kube/config, then the
in-cluster service account; --context; -n/--namespace (default: the context's namespace).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import grpc
from google.protobuf.json_format import MessageToDict

from coscheduling.api.membership import LABEL_ONLY
from coscheduling.api.pods import parse_pod
from coscheduling.api.times import format_duration, format_rfc3339, parse_rfc3339
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient, q
from coscheduling.cluster.kubeconfig import (
    CredentialsError,
    context_namespace,
    kubectl_kubeconfig,
)
from coscheduling.explain import explain
from coscheduling.groups import APIS, GroupApi
from coscheduling.groups.derive import DERIVED_FROM_LABEL
from coscheduling.server.cli import UsageError, channel_for, rpc
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.server import DEFAULT_ADDRESS

ADDRESS_ENV = "COSCHEDULING_GRPC_ADDRESS"
PROG = "kubectl gang"


# -- the cluster, as kubectl reaches it ---------------------------------------------------
def client_for(args: argparse.Namespace) -> KubeClient:
    kubeconfig = kubectl_kubeconfig(args.kubeconfig or "")
    return KubeClient(ClientSettings(kubeconfig=kubeconfig, context=args.context or ""))


def namespace_for(args: argparse.Namespace) -> str:
    """-n, else the kubeconfig context's namespace, else "default" (kubectl's order)."""
    if args.namespace:
        return str(args.namespace)
    kubeconfig = kubectl_kubeconfig(args.kubeconfig or "")
    return context_namespace(kubeconfig, args.context or "") or "default"


# -- list ---------------------------------------------------------------------------------
def _groups(client: KubeClient, namespace: str) -> list[tuple[GroupApi, dict[str, Any]]]:
    """(kind, object) of every served kind of group object."""
    found = []
    for api in APIS:
        base = f"/apis/{api.group}/{api.version}"
        path = f"{base}/namespaces/{q(namespace)}/{api.plural}" if namespace else \
            f"{base}/{api.plural}"
        try:
            items = client.get(path).get("items") or []
        except ApiError as err:
            if err.not_found:
                continue  # the kind is not served here
            raise
        found += [(api, item) for item in items]
    return found


def _why(status: dict[str, Any], members: list[dict[str, Any]]) -> str:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "")
    for pod in members:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return str(condition.get("message") or "")
    return ""


def list_rows(client: KubeClient, namespace: str, now: float) -> list[list[str]]:
    """One row per gang: NAMESPACE NAME KIND PHASE PLACED/MIN QUEUE AGE WHY."""
    pods_path = f"/api/v1/namespaces/{q(namespace)}/pods" if namespace else "/api/v1/pods"
    by_gang: dict[str, list[dict[str, Any]]] = {}
    label_only: dict[str, int] = {}
    for raw in client.get(pods_path).get("items") or ():
        pod = parse_pod(raw)
        if pod.group_key and not pod.terminal:
            by_gang.setdefault(pod.group_key, []).append(raw)
            if pod.membership.tag == LABEL_ONLY:
                label_only[pod.group_key] = pod.membership.min_available
    rows = []
    for api, obj in _groups(client, namespace):
        record, title = api.parse(obj), api.title.split(" (")[0]
        members = by_gang.pop(record.key, [])
        status = obj.get("status") or {}
        derived = ((obj.get("metadata") or {}).get("labels") or {}).get(DERIVED_FROM_LABEL)
        rows.append(_row(record.namespace, record.name, title, status.get("phase") or "Pending",
                         members, record.min_member, record.queue,
                         now - record.created if record.created else 0.0,
                         _why(status, members),
                         # its pods carry no marker: the scheduler's count of them
                         placed=int(status.get("scheduled") or 0) if derived else None))
    for key, members in sorted(by_gang.items()):
        if key in label_only:
            ns, _, name = key.partition("/")
            oldest = min(parse_rfc3339(m["metadata"].get("creationTimestamp")) for m in members)
            rows.append(_row(ns, name.rsplit("@", 1)[0], "label-only group", "-", members,
                             label_only[key], "-", now - oldest if oldest else 0.0,
                             _why({}, members)))
    return sorted(rows, key=lambda r: (r[0], r[1], r[2]))


def _row(namespace: str, name: str, kind: str, phase: str, members: list[dict[str, Any]],
         minimum: int, queue: str, age: float, why: str,
         placed: int | None = None) -> list[str]:
    if placed is None:
        placed = sum(1 for m in members if (m.get("spec") or {}).get("nodeName"))
    return [namespace, name, kind, phase, f"{placed}/{minimum}", queue or "-",
            format_duration(round(age)) if age > 0 else "-", why or "-"]


def _list(args: argparse.Namespace) -> int:
    client = client_for(args)
    namespace = "" if args.all_namespaces else namespace_for(args)
    rows = list_rows(client, namespace, time.time())
    if args.output == "json":
        keys = ["namespace", "name", "kind", "phase", "placed", "queue", "age", "why"]
        print(json.dumps([dict(zip(keys, row, strict=True)) for row in rows], indent=2))
        return 0
    if not rows:
        print(f"No gangs found{'' if not namespace else f' in {namespace}'}.")
        return 0
    header = ["NAMESPACE", "NAME", "KIND", "PHASE", "PLACED/MIN", "QUEUE", "AGE", "WHY"]
    print("\n".join(_table([header, *rows])))
    return 0


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
            for row in rows]


# -- explain ------------------------------------------------------------------------------
def _explain(args: argparse.Namespace) -> int:
    namespace, sep, name = args.group.rpartition("/")
    if not sep:
        namespace, name = namespace_for(args), args.group
    if not namespace or not name:
        raise UsageError("explain: give the gang as NAMESPACE/NAME (or NAME with -n)")
    print(explain(client_for(args), namespace, name))
    return 0


# -- whatif -------------------------------------------------------------------------------
def _whatif(args: argparse.Namespace) -> int:
    try:
        data = sys.stdin.buffer.read() if args.filename == "-" else \
            Path(args.filename).read_bytes()
    except OSError as err:
        raise UsageError(f"-f {args.filename}: {err.strerror}") from None
    address = args.address or os.environ.get(ADDRESS_ENV) or DEFAULT_ADDRESS
    request = pb.SimulateRequest(manifest=data, namespace=namespace_for(args))
    with channel_for(address, args.ca, args.cert, args.key) as channel:
        answer = rpc(channel, "Simulate")(request, timeout=args.timeout)
    if args.output == "json":
        print(json.dumps(MessageToDict(answer, preserving_proto_field_name=True,
                                       always_print_fields_with_no_presence=True), indent=2))
    else:
        print(describe(answer))
    return 0


VERDICT_TEXT = {
    pb.FITS_NOW: "FITS NOW",
    pb.FITS_AFTER_PREEMPTION: "FITS AFTER PREEMPTING lower-priority pods",
    pb.FITS_AFTER_RECLAIM: "FITS AFTER ITS QUEUE RECLAIMS what other queues borrowed",
    pb.FITS_WHEN_ROOM_FREES: "DOES NOT FIT NOW: it waits until running pods free room "
                             "(no eviction it may make helps)",
    pb.NEVER: "NEVER FITS: not even on the empty cluster",
    pb.FITS_ONCE_RESERVED: "FITS ONCE ITS RESERVATION COMPLETES: first in line, the room "
                           "that frees is held for it",
}


def describe(answer: Any) -> str:
    """The Simulate answer for a person."""
    lines = [f"{answer.source}: gang {answer.group}, minMember {answer.min_member}, "
             f"{answer.pods} pod(s)", VERDICT_TEXT.get(answer.verdict, "unknown verdict")]
    if answer.domain:
        lines.append(f"  in topology domain {answer.domain}")
    if answer.victims:
        lines.append(f"  evicting {len(answer.victims)} pod(s): "
                     + ", ".join(f"{v.namespace}/{v.name}" for v in answer.victims))
    if answer.placements:
        lines += ["  " + row for row in _table([["POD", "NODE"]] + [
            [p.pod, p.node] for p in answer.placements])]
    if answer.reason and answer.verdict not in (pb.FITS_NOW,):
        lines.append(f"  why not now: {answer.reason}")
    if answer.need:
        lines.append(f"  members needed at once: {answer.need}; the free room holds "
                     f"{answer.fit_now}, the empty cluster {answer.fit_empty}")
        lines += [f"  short of {gap.text}" for gap in answer.shortfall]
        lines += [f"  domain {d.domain}: room for {d.fit_now} of {d.need} now, {d.fit_empty} "
                  "when empty" for d in answer.domains]
        if answer.nodes_needed:
            lines.append(f"  {answer.nodes_needed}")
    lines += _reservation_lines(answer)
    lines += [f"  note: {note}" for note in answer.notes]
    return "\n".join(lines)


def _reservation_lines(answer: Any) -> list[str]:
    lines = []
    if answer.reserve_nodes:
        start = (format_rfc3339(answer.estimated_start) if answer.estimated_start
                 else "unknown (running pods of unknown runtime)")
        lines.append(f"  would reserve room on {', '.join(answer.reserve_nodes)}; "
                     f"estimated start: {start}")
    if answer.reservations_ahead:
        lines.append("  reservations ahead of it in its queue: "
                     + ", ".join(answer.reservations_ahead))
    return lines


# -- the command --------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, "
                        "~/.kube/config, then the in-cluster service account)")
    parser.add_argument("--context", help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", help="namespace (default: the context's)")
    sub = parser.add_subparsers(dest="command", required=True)
    listing = sub.add_parser("list", help="every gang: phase, placed/min, queue, age, why")
    listing.add_argument("-A", "--all-namespaces", action="store_true")
    listing.add_argument("-o", "--output", choices=("text", "json"), default="text")
    listing.set_defaults(func=_list)
    explaining = sub.add_parser("explain", help="why a gang is where it is")
    explaining.add_argument("group", metavar="NAMESPACE/NAME")
    explaining.set_defaults(func=_explain)
    whatif = sub.add_parser("whatif", help="would a job fit? (nothing is created)")
    whatif.add_argument("-f", "--filename", required=True, help="manifest ('-': stdin)")
    whatif.add_argument("-o", "--output", choices=("text", "json"), default="text")
    whatif.add_argument("--address", help=f"the scheduler's gRPC address (default: "
                        f"${ADDRESS_ENV}, else {DEFAULT_ADDRESS}; unix:PATH for a socket)")
    whatif.add_argument("--ca", help="CA certificate (PEM) of the server's: use TLS")
    whatif.add_argument("--cert", help="client certificate (PEM), for mutual TLS")
    whatif.add_argument("--key", help="client key (PEM), for mutual TLS")
    whatif.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    whatif.set_defaults(func=_whatif)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        code: int = args.func(args)
    except UsageError as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 2
    except (ApiError, CredentialsError) as err:
        print(f"{PROG}: {err}", file=sys.stderr)
        return 1
    except grpc.RpcError as err:
        print(f"{PROG}: {err.code().name}: {err.details()}", file=sys.stderr)
        return 1
    return code


if __name__ == "__main__":
    sys.exit(main())
