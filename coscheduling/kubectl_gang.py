"""kubectl gang: every gang in the cluster, why one waits, and whether a job would fit.

A kubectl plugin (an executable named ``kubectl-gang`` on PATH, installed with the package):

  kubectl gang list [-A] [-l SELECTOR] [-o json|yaml|wide|name] [--watch]
                                          every gang of every producer: phase, placed/min,
                                          queue, age, why pending
  kubectl gang explain NAMESPACE/NAME     why a gang is where it is
  kubectl gang whatif -f job.yaml         would it fit now, after preempting, after its
                                          queue reclaims, once room frees, or never; and
                                          what it is short of (asks the scheduler's gRPC
                                          server; nothing is created)

Credentials as kubectl finds them: --kubeconfig, $KUBECONFIG, ~/.kube/config, then the
in-cluster service account; --context; -n/--namespace (default: the context's namespace).
These, and -A, go before the command or after it, as with kubectl.
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import yaml
from google.protobuf.json_format import MessageToDict

from coscheduling.api.membership import LABEL_ONLY
from coscheduling.api.pods import parse_pod
from coscheduling.api.times import format_rfc3339, parse_rfc3339
from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient, q
from coscheduling.cluster.informer import Informer, object_key, wait_synced
from coscheduling.cluster.kubeconfig import (
    CredentialsError,
    context_namespace,
    kubectl_kubeconfig,
)
from coscheduling.commands.explain import explain
from coscheduling.groups import APIS, GroupApi
from coscheduling.groups.derive import DERIVED_FROM_LABEL
from coscheduling.server.commands import UsageError, channel_for, rpc
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.server import DEFAULT_ADDRESS

ADDRESS_ENV = "COSCHEDULING_GRPC_ADDRESS"
PROG = "kubectl gang"
# list --watch: how long the first listing may take, and how long a burst of changes (a
# gang's members bound one after another) is let settle into one printed change.
WATCH_SYNC_SECONDS = 60.0
WATCH_SETTLE_SECONDS = 0.2


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


# -- list: the gangs, as machine values ---------------------------------------------------
LABEL_ONLY_SOURCE = "label-only group"


@dataclass(frozen=True, slots=True)
class Gang:
    """One gang as ``list`` shows it: numbers and times, formatted only for a table."""

    namespace: str
    name: str
    source: str  # which producer's object: "PodGroup", "Volcano PodGroup", or label-only
    api_version: str  # of the group object ("" for a label-only group: no object)
    kind: str
    phase: str  # "" for a label-only group (no status)
    min_member: int
    members: int  # member pods not yet finished
    placed: int  # of them, bound to a node
    running: int
    queue: str
    priority_class: str
    nodes: tuple[str, ...]
    created: float  # seconds since the epoch; 0.0 when unknown
    why: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.name, self.source)


@dataclass(slots=True)
class Snapshot:
    """What ``list`` reads: the group objects of every served kind and the pods, and with
    ``-l`` the keys of the pods the selector matches (a label-only gang has no object, so
    the selector is asked of its members)."""

    groups: list[tuple[GroupApi, dict[str, Any]]]
    pods: list[dict[str, Any]]
    selected_pods: set[str] | None = None


def _collection(api: GroupApi, namespace: str) -> str:
    base = f"/apis/{api.group}/{api.version}"
    return f"{base}/namespaces/{q(namespace)}/{api.plural}" if namespace else \
        f"{base}/{api.plural}"


def _pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{q(namespace)}/pods" if namespace else "/api/v1/pods"


def _selector_query(selector: str) -> dict[str, str]:
    return {"labelSelector": selector} if selector else {}


def served_apis(client: KubeClient, namespace: str, selector: str = "",
                ) -> list[tuple[GroupApi, list[dict[str, Any]]]]:
    """Each served kind of group object with its objects (``-l`` applied by the server)."""
    found = []
    for api in APIS:
        try:
            items = client.get(_collection(api, namespace),
                               **_selector_query(selector)).get("items") or []
        except ApiError as err:
            if err.not_found:
                continue  # the kind is not served here
            raise
        found.append((api, items))
    return found


def read_snapshot(client: KubeClient, namespace: str, selector: str) -> Snapshot:
    groups = [(api, obj) for api, items in served_apis(client, namespace, selector)
              for obj in items]
    pods = client.get(_pods_path(namespace)).get("items") or []
    selected = None
    if selector:
        chosen = client.get(_pods_path(namespace), labelSelector=selector).get("items") or ()
        selected = {object_key(pod) for pod in chosen}
    return Snapshot(groups, pods, selected)


def _why(status: dict[str, Any], members: list[dict[str, Any]]) -> str:
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Unschedulable" and condition.get("status") == "True":
            return str(condition.get("message") or condition.get("reason") or "")
    for pod in members:
        for condition in (pod.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return str(condition.get("message") or "")
    return ""


def gangs_of(snapshot: Snapshot) -> list[Gang]:
    """Every gang: one per group object, and one per label-only group (members alone)."""
    by_gang: dict[str, list[dict[str, Any]]] = {}
    label_only: dict[str, int] = {}
    for raw in snapshot.pods:
        pod = parse_pod(raw)
        if pod.group_key and not pod.terminal:
            by_gang.setdefault(pod.group_key, []).append(raw)
            if pod.membership.tag == LABEL_ONLY:
                label_only[pod.group_key] = pod.membership.min_available
    found = []
    for api, obj in snapshot.groups:
        record = api.parse(obj)
        status = obj.get("status") or {}
        derived = ((obj.get("metadata") or {}).get("labels") or {}).get(DERIVED_FROM_LABEL)
        found.append(_gang(record.namespace, record.name, api, str(obj.get("kind") or ""),
                           str(status.get("phase") or "Pending"), by_gang.pop(record.key, []),
                           record.min_member, record.queue, record.priority_class_name,
                           record.created, status,
                           # its pods carry no marker: the scheduler's count of them
                           placed=int(status.get("scheduled") or 0) if derived else None))
    for key, members in sorted(by_gang.items()):
        if key in label_only and (snapshot.selected_pods is None or any(
                object_key(m) in snapshot.selected_pods for m in members)):
            namespace, _, name = key.partition("/")
            oldest = min(parse_rfc3339(m["metadata"].get("creationTimestamp")) for m in members)
            found.append(_gang(namespace, name.rsplit("@", 1)[0], None, "", "", members,
                               label_only[key], "", "", oldest, {}))
    return sorted(found, key=lambda g: g.key)


def _gang(namespace: str, name: str, api: GroupApi | None, kind: str, phase: str,
          members: list[dict[str, Any]], minimum: int, queue: str, priority_class: str,
          created: float, status: dict[str, Any], placed: int | None = None) -> Gang:
    """One gang's row; ``placed`` when its members cannot be counted (a derived group's)."""
    nodes = [str((m.get("spec") or {}).get("nodeName") or "") for m in members]
    running = sum(1 for m in members if (m.get("status") or {}).get("phase") == "Running")
    return Gang(namespace=namespace, name=name,
                source=api.title.split(" (")[0] if api else LABEL_ONLY_SOURCE,
                api_version=api.api_version if api else "", kind=kind, phase=phase,
                min_member=minimum, members=len(members),
                placed=sum(1 for n in nodes if n) if placed is None else placed,
                running=running, queue=queue, priority_class=priority_class,
                nodes=tuple(sorted({n for n in nodes if n})), created=created,
                why=_why(status, members))


# -- list: the output formats --------------------------------------------------------------
def as_item(gang: Gang) -> dict[str, Any]:
    """The gang for -o json/yaml: numbers as numbers, times in RFC 3339, absent as null."""
    return {
        "namespace": gang.namespace, "name": gang.name, "source": gang.source,
        "object": {"apiVersion": gang.api_version, "kind": gang.kind}
        if gang.api_version else None,
        "phase": gang.phase or None, "minMember": gang.min_member, "members": gang.members,
        "placed": gang.placed, "running": gang.running, "queue": gang.queue or None,
        "priorityClassName": gang.priority_class or None, "nodes": list(gang.nodes),
        "creationTimestamp": format_rfc3339(gang.created) if gang.created else None,
        "why": gang.why or None,
    }


def as_name(gang: Gang) -> str:
    """The group object as kubectl names it (``podgroup.batch.scheduler.tencent.com/g``),
    usable with ``kubectl get`` in the gang's namespace; "" for a label-only group."""
    if not gang.api_version:
        return ""
    group = gang.api_version.rpartition("/")[0]
    return f"{gang.kind.lower()}.{group}/{gang.name}" if group else \
        f"{gang.kind.lower()}/{gang.name}"


def _columns(wide: bool, all_namespaces: bool) -> list[str]:
    names = ["NAME", "KIND", "PHASE", "PLACED/MIN"]
    names += ["MEMBERS", "RUNNING", "QUEUE", "PRIORITY", "NODES"] if wide else ["QUEUE"]
    return (["NAMESPACE"] if all_namespaces else []) + names + ["AGE", "WHY"]


def age(seconds: float) -> str:
    """An age as kubectl's AGE column shows it (two units while short: 4m20s, 5h3m, 2d4h)."""
    whole = int(seconds)
    minutes, hours, days = whole // 60, whole // 3600, whole // 86400
    if whole < 120:
        return f"{whole}s"
    if minutes < 10:
        return f"{minutes}m{whole % 60}s" if whole % 60 else f"{minutes}m"
    if hours < 3:
        return f"{minutes}m"
    if hours < 8:
        return f"{hours}h{minutes % 60}m" if minutes % 60 else f"{hours}h"
    if hours < 48:
        return f"{hours}h"
    if days < 8:
        return f"{days}d{hours % 24}h" if hours % 24 else f"{days}d"
    if days < 365 * 2:
        return f"{days}d"
    return f"{days // 365}y{days % 365}d" if days < 365 * 8 else f"{days // 365}y"


def as_row(gang: Gang, columns: list[str], now: float) -> list[str]:
    cells = {
        "NAMESPACE": gang.namespace, "NAME": gang.name, "KIND": gang.source,
        "PHASE": gang.phase or "-", "PLACED/MIN": f"{gang.placed}/{gang.min_member}",
        "MEMBERS": str(gang.members), "RUNNING": str(gang.running), "QUEUE": gang.queue or "-",
        "PRIORITY": gang.priority_class or "-", "NODES": ",".join(gang.nodes) or "-",
        "AGE": age(now - gang.created) if gang.created else "-", "WHY": gang.why or "-",
    }
    return [cells[column] for column in columns]


def render(gangs: list[Gang], output: str, all_namespaces: bool, now: float) -> str:
    """The whole listing in ``output`` ("" for the table)."""
    if output in ("json", "yaml"):
        listing = {"apiVersion": "v1", "kind": "List", "items": [as_item(g) for g in gangs]}
        return json.dumps(listing, indent=2) if output == "json" else \
            yaml.safe_dump(listing, sort_keys=False).rstrip("\n")
    if output == "name":
        return "\n".join(name for name in map(as_name, gangs) if name)
    columns = _columns(output == "wide", all_namespaces)
    return "\n".join(_table([columns, *(as_row(g, columns, now) for g in gangs)]))


def _list(args: argparse.Namespace) -> int:
    client = client_for(args)
    namespace = "" if args.all_namespaces else namespace_for(args)
    if args.watch:
        return watch_gangs(client, namespace, args)
    gangs = gangs_of(read_snapshot(client, namespace, args.selector or ""))
    _note_unnamed(gangs, args.output)
    if not gangs and args.output not in ("json", "yaml", "name"):
        print(f"No gangs found{'' if not namespace else f' in {namespace}'}.", file=sys.stderr)
        return 0
    text = render(gangs, args.output or "", args.all_namespaces, time.time())
    if text:
        print(text)
    return 0


def _note_unnamed(gangs: list[Gang], output: str | None) -> None:
    """-o name has nothing to print for a label-only group: say so on stderr."""
    if output == "name":
        for gang in gangs:
            if not gang.api_version:
                print(f"{gang.namespace}/{gang.name}: a label-only group, no object to name",
                      file=sys.stderr)


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["   ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
            for row in rows]


# -- list --watch ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Watched:
    """A watched object as the informer keeps it (its resourceVersion tells updates)."""

    obj: dict[str, Any]
    resource_version: str


class _Changed:
    """An informer handler that only says something changed; the listing is recomputed."""

    def __init__(self, signal: queue.SimpleQueue[None]) -> None:
        self.signal = signal

    def on_add(self, record: Watched) -> None:
        self.signal.put(None)

    def on_update(self, old: Watched, new: Watched) -> None:
        self.signal.put(None)

    def on_delete(self, record: Watched) -> None:
        self.signal.put(None)


def _watched(obj: dict[str, Any]) -> Watched:
    return Watched(obj, str((obj.get("metadata") or {}).get("resourceVersion") or ""))


def _key(record: Watched) -> str:
    return object_key(record.obj)


class GangWatch:
    """Informers (the scheduler's own list+watch, cluster/informer.py) on every served kind
    of group object and on the pods; each change recomputes the gangs."""

    def __init__(self, client: KubeClient, namespace: str, selector: str) -> None:
        self.changes: queue.SimpleQueue[None] = queue.SimpleQueue()
        handler = _Changed(self.changes)

        def informer(path: str, label_selector: str = "") -> Informer[Watched]:
            return Informer(client, path, _watched, _key, handler,
                            label_selector=label_selector, name=f"kubectl-gang:{path}")

        self.groups = [(api, informer(_collection(api, namespace), selector))
                       for api, _ in served_apis(client, namespace, selector)]
        self.pods = informer(_pods_path(namespace))
        self.selected = informer(_pods_path(namespace), selector) if selector else None
        self.informers = [i for _, i in self.groups] + [self.pods] + (
            [self.selected] if self.selected else [])

    def start(self, timeout: float) -> bool:
        for informer in self.informers:
            informer.start()
        return wait_synced(self.informers, timeout)

    def stop(self) -> None:
        for informer in self.informers:
            informer.stop()

    def wait(self) -> None:
        """Until something changed, and then the rest of its burst (a gang's members bound
        one after another) is let settle into one printed change. Waits in short steps, so
        Ctrl-C is seen at once."""
        while True:
            try:
                self.changes.get(timeout=0.5)
                break
            except queue.Empty:
                continue
        time.sleep(WATCH_SETTLE_SECONDS)
        while not self.changes.empty():
            self.changes.get_nowait()

    def snapshot(self) -> Snapshot:
        groups = [(api, w.obj) for api, inf in self.groups for w in list(inf.store.values())]
        pods = [w.obj for w in list(self.pods.store.values())]
        selected = set(self.selected.store) if self.selected else None
        return Snapshot(groups, pods, selected)


def watch_gangs(client: KubeClient, namespace: str, args: argparse.Namespace) -> int:
    """``list --watch``: the listing, then a line (or document) per gang that changes, as
    ``kubectl get -w`` prints; Ctrl-C ends it."""
    watch = GangWatch(client, namespace, args.selector or "")
    try:
        if not watch.start(WATCH_SYNC_SECONDS):
            raise ApiError(0, f"the watches did not sync in {WATCH_SYNC_SECONDS:g}s")
        printer = WatchPrinter(args.output or "", args.all_namespaces)
        while True:
            printer.show(gangs_of(watch.snapshot()), time.time())
            watch.wait()
    except KeyboardInterrupt:
        return 0
    finally:
        watch.stop()


class WatchPrinter:
    """Prints the first listing whole, then only the gangs that changed or went (a table: a
    row, DELETED as the phase of a gang gone, aligned to the first listing's columns;
    json/yaml: ``{type, object}`` events, as ``kubectl get -w --output-watch-events``)."""

    def __init__(self, output: str, all_namespaces: bool) -> None:
        self.output = output
        self.columns = _columns(output == "wide", all_namespaces)
        self.widths = [len(c) for c in self.columns]
        self.shown: dict[tuple[str, str, str], Gang] | None = None

    def show(self, gangs: list[Gang], now: float) -> None:
        current = {g.key: g for g in gangs}
        before = self.shown or {}
        events = [("ADDED" if g.key not in before else "MODIFIED", g) for g in gangs
                  if before.get(g.key) != g]
        events += [("DELETED", g) for key, g in before.items() if key not in current]
        if self.output in ("json", "yaml", "name"):
            lines = [self._document(kind, gang) for kind, gang in events]
        else:
            rows = [self._cells(kind, gang, now) for kind, gang in events]
            if self.shown is None:
                rows.insert(0, self.columns)
            self.widths = [max([w, *(len(r[i]) for r in rows)])
                           for i, w in enumerate(self.widths)]
            lines = ["   ".join(cell.ljust(self.widths[i]) for i, cell in enumerate(row))
                     .rstrip() for row in rows]
        self.shown = current
        for line in lines:
            if line:
                print(line, flush=True)

    def _cells(self, kind: str, gang: Gang, now: float) -> list[str]:
        cells = as_row(gang, self.columns, now)
        if kind == "DELETED":
            cells[self.columns.index("PHASE")] = kind
        return cells

    def _document(self, kind: str, gang: Gang) -> str:
        if self.output == "name":
            return as_name(gang)
        event = {"type": kind, "object": as_item(gang)}
        if self.output == "json":
            return json.dumps(event)
        return "---\n" + yaml.safe_dump(event, sort_keys=False).rstrip("\n")


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
    if args.output in ("json", "yaml"):
        answer_dict = MessageToDict(answer, preserving_proto_field_name=True,
                                    always_print_fields_with_no_presence=True)
        print(json.dumps(answer_dict, indent=2) if args.output == "json" else
              yaml.safe_dump(answer_dict, sort_keys=False).rstrip("\n"))
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
    pb.FITS_AFTER_SCALE_UP: "FITS AFTER A SCALE-UP: the cluster-autoscaler is asked for the "
                            "nodes it is missing, all in one request",
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
def _cluster_flags(parser: argparse.ArgumentParser, *, after: bool) -> None:
    """kubectl's flags for reaching the cluster, accepted before the subcommand and after
    it (``after``: a flag left out after the subcommand keeps what was given before)."""
    unset = argparse.SUPPRESS if after else None
    parser.add_argument("--kubeconfig", default=unset, help="kubeconfig file (default: "
                        "$KUBECONFIG, ~/.kube/config, then the in-cluster service account)")
    parser.add_argument("--context", default=unset, help="the kubeconfig context to use")
    parser.add_argument("-n", "--namespace", default=unset,
                        help="namespace (default: the context's, else default)")


def _all_namespaces_flag(parser: argparse.ArgumentParser, *, after: bool) -> None:
    parser.add_argument("-A", "--all-namespaces", action="store_true",
                        default=argparse.SUPPRESS if after else False,
                        help="every namespace (list; -n is then ignored)")


def _list_parser(sub: Any) -> None:
    listing = sub.add_parser(
        "list", help="every gang: phase, placed/min, queue, age, why",
        description="Every gang of every producer (group objects, and label-only groups).")
    _cluster_flags(listing, after=True)
    _all_namespaces_flag(listing, after=True)
    listing.add_argument("-o", "--output", choices=("json", "yaml", "wide", "name"),
                         help="json/yaml: a List of gangs with numbers and RFC 3339 times; "
                         "wide: more columns (members, running, priority, nodes); name: "
                         "the group objects as kubectl names them")
    listing.add_argument("-l", "--selector", help="label selector (e.g. team=a,tier!=x) on "
                         "the group objects; a label-only group matches if a member does")
    listing.add_argument("-w", "--watch", action="store_true",
                         help="after the listing, print each gang that changes (Ctrl-C ends)")
    listing.set_defaults(func=_list)


def _whatif_parser(sub: Any) -> None:
    whatif = sub.add_parser("whatif", help="would a job fit? (nothing is created)")
    _cluster_flags(whatif, after=True)
    whatif.add_argument("-f", "--filename", required=True, help="manifest ('-': stdin)")
    whatif.add_argument("-o", "--output", choices=("text", "json", "yaml"), default="text",
                        help="text (default), or the scheduler's answer as json or yaml")
    whatif.add_argument("--address", help=f"the scheduler's gRPC address (default: "
                        f"${ADDRESS_ENV}, else {DEFAULT_ADDRESS}; unix:PATH for a socket)")
    whatif.add_argument("--ca", help="CA certificate (PEM) of the server's: use TLS")
    whatif.add_argument("--cert", help="client certificate (PEM), for mutual TLS")
    whatif.add_argument("--key", help="client key (PEM), for mutual TLS")
    whatif.add_argument("--timeout", type=float, default=30.0, help="seconds (default 30)")
    whatif.set_defaults(func=_whatif)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _cluster_flags(parser, after=False)
    _all_namespaces_flag(parser, after=False)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _list_parser(sub)
    explaining = sub.add_parser("explain", help="why a gang is where it is")
    _cluster_flags(explaining, after=True)
    explaining.add_argument("group", metavar="NAMESPACE/NAME",
                            help="the gang (NAME alone: in -n's namespace)")
    explaining.set_defaults(func=_explain)
    _whatif_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.all_namespaces and args.command != "list":
            raise UsageError(f"{args.command}: -A applies to list only")
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
