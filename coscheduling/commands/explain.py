"""``coscheduling explain NAMESPACE/GROUP[@KIND]``: why a gang is where it is, for a person.

Everything comes from the API server (the PodGroup's status and conditions, the members'
PodScheduled conditions and the scheduler's events), so it works from any machine with read
access, whichever replica is leading.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.dra import (
    ALL,
    API_PATH,
    DeviceId,
    ResourceClaim,
    parse_device_class,
    parse_resource_claim,
    parse_resource_slice,
)
from coscheduling.api.membership import LABEL_ONLY, OURS
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import parse_pod
from coscheduling.api.queues import PLURAL as QUEUES
from coscheduling.api.times import format_duration, parse_rfc3339
from coscheduling.cluster.client import ApiError, KubeClient, q
from coscheduling.cluster.unreadable import READABLE, SET_ASIDE, UNREADABLE
from coscheduling.groups import apis_for_tag
from coscheduling.groups.derive import (
    KINDS,
    Workload,
    controller_of,
    derived_membership,
    read_workload,
    resolve,
)
from coscheduling.plugins.dynamicresources.cel import CelRuntimeError, compile_selector


def _table(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return ["  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
            for row in rows]


def _latest_events(client: KubeClient, namespace: str) -> dict[str, dict[str, Any]]:
    events = client.get(f"/api/v1/namespaces/{q(namespace)}/events").get("items") or []
    latest: dict[str, dict[str, Any]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        if involved.get("kind") != "Pod":
            continue
        name = involved.get("name", "")
        stamp = parse_rfc3339(event.get("lastTimestamp") or event.get("eventTime"))
        if name not in latest or stamp >= latest[name]["_stamp"]:
            latest[name] = {**event, "_stamp": stamp}
    return latest


def _member_row(pod: dict[str, Any], event: dict[str, Any] | None) -> list[str]:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    node = spec.get("nodeName") or "-"
    phase = status.get("phase", "Pending")
    why = ""
    for condition in status.get("conditions") or ():
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            why = condition.get("message", "")
    if node != "-":
        state, why = ("bound" if phase == "Pending" else phase.lower()), ""
    elif status.get("nominatedNodeName"):
        state = f"nominated to {status['nominatedNodeName']}"
    elif event is not None and event.get("reason") == "Waiting":
        state, why = "waiting", event.get("message", why)
    else:
        state = "pending"
    return [meta["name"], node, state, why or "-"]


def _queue_line(client: KubeClient, name: str) -> str:
    """The gang's Queue: its weight and share as the scheduler last wrote them."""
    try:
        raw = client.get(f"/apis/{GROUP_API}/{GROUP_VERSION}/{QUEUES}/{q(name)}")
    except ApiError as err:
        if err.not_found:
            return f'  Queue "{name}" not found: the gang waits until it exists'
        raise
    spec, status = raw.get("spec") or {}, raw.get("status") or {}

    def amounts(key: str) -> str:
        return ", ".join(f"{r} {v}" for r, v in sorted((status.get(key) or {}).items())) or "-"

    return (f'  Queue "{name}": weight {spec.get("weight", 1)}, deserved {amounts("deserved")}'
            f', allocated {amounts("allocated")}; gangs pending {status.get("pending", 0)}, '
            f'running {status.get("running", 0)}')


def _reservation_lines(reservation: object) -> list[str]:
    """Room held for the gang first in line: per node, held against needed; when it runs
    out, and when the gang is expected to start."""
    if not isinstance(reservation, dict) or not reservation.get("nodes"):
        return []
    start = reservation.get("estimatedStart")
    lines = [f"Reservation since {reservation.get('since', '-')}, until "
             f"{reservation.get('expiresAt', '-')}; estimated start: "
             + (start or "unknown (running pods of unknown runtime)")]

    def amounts(node: dict[str, Any]) -> str:
        held, needed = node.get("held") or {}, node.get("needed") or {}
        return ", ".join(f"{r} {held.get(r, '0')}/{v}" for r, v in sorted(needed.items()))

    lines += _table([["NODE", "MEMBERS", "HELD/NEEDED"]] + [
        [str(n.get("node", "")), str(n.get("members", "")), amounts(n)]
        for n in reservation["nodes"] if isinstance(n, dict)])
    return lines


def _provisioning_lines(request: object) -> list[str]:
    """The gang's ProvisioningRequest: which, its state and since when, why, and when a
    failed one is asked again."""
    if not isinstance(request, dict) or not request.get("name"):
        return []
    line = (f"Scale-up: ProvisioningRequest {request['name']} for {request.get('members', '?')} "
            f"member(s), attempt {request.get('attempt', 1)}, asked "
            f"{request.get('requestedAt', '-')}: {request.get('state', 'Pending')} since "
            f"{request.get('since', '-')}")
    why = "; ".join(str(request[k]) for k in ("reason", "message") if request.get(k))
    if why:
        line += f" ({why})"
    if request.get("retryAt"):
        line += f"; asked again at {request['retryAt']}"
    return [line]


def _find(client: KubeClient, namespace: str, name: str,
          tag: str) -> tuple[PodGroup, dict[str, Any], str] | str:
    """The group object a gang key names (record, status, kind's title), or why none."""
    apis = apis_for_tag(tag)
    if not apis:  # a label-only group: made from its members' labels, no object
        return PodGroup(namespace=namespace, name=name, tag=tag, api_version=""), {}, \
            "label-only group"
    for api in apis:
        try:
            raw = client.get(api.object_path(PodGroup(namespace=namespace, name=name)))
        except ApiError as err:
            if err.not_found:
                continue
            raise
        return api.parse(raw), raw.get("status") or {}, api.title
    return " or ".join(f'{api.title} "{namespace}/{name}"' for api in apis) + " not found."


def _marked_key(pod: dict[str, Any]) -> str:
    return parse_pod(pod).group_key


# Where a walk's owner kinds are read (those of groups.derive.KINDS, and the objects walked
# through): a person's command, so plain reads, each object once.
_OWNER_APIS = {**{k.kind: f"/apis/{k.api_version}/namespaces/{{ns}}/{k.plural}"
                  for k in KINDS},
               "Pod": "/api/v1/namespaces/{ns}/pods",
               "ReplicaSet": "/apis/apps/v1/namespaces/{ns}/replicasets"}


def derived_key(client: KubeClient, namespace: str) -> Callable[[dict[str, Any]], str]:
    """A pod's gang key, its derived group's when it names none (groups.derive)."""
    seen: dict[tuple[str, str], Workload | None] = {}

    def lookup(kind: str, ns: str, name: str) -> Workload | None:
        if (kind, name) not in seen:
            path = _OWNER_APIS.get(kind)
            try:
                seen[kind, name] = read_workload({"kind": kind, **client.get(
                    f"{path.format(ns=q(ns))}/{q(name)}")}) if path else None
            except ApiError as err:
                if not err.not_found:
                    raise
                seen[kind, name] = None
        return seen[kind, name]

    def key(pod: dict[str, Any]) -> str:
        marked = parse_pod(pod)
        if marked.group_key or not marked.owner:
            return marked.group_key
        owner = controller_of(pod.get("metadata") or {})
        return derived_membership(namespace, resolve(namespace, owner, marked.labels,
                                                     lookup)).key

    return key


def explain(client: KubeClient, namespace: str, name: str) -> str:
    """``name`` is a PodGroup's name, or a gang key's ``name@kind`` (as the scheduler's
    messages name gangs of other producers' kinds, e.g. ``train@x-k8s``)."""
    name, _, tag = name.partition("@")
    found = _find(client, namespace, name, tag)
    if isinstance(found, str):
        return found
    group, status, title = found
    pods = client.get(f"/api/v1/namespaces/{q(namespace)}/pods").get("items") or ()
    member_key = derived_key(client, namespace) if tag == OURS else _marked_key
    members = [p for p in pods if member_key(p) == group.key]
    if tag == LABEL_ONLY and members:
        group.min_member = min(parse_pod(p).membership.min_available for p in members)
    return _explain(client, group, status, title, members)


def _explain(client: KubeClient, group: PodGroup, status: dict[str, Any], title: str,
             pods: list[dict[str, Any]]) -> str:
    namespace, name = group.namespace, group.name
    lines = [f"{title} {namespace}/{name}: phase {status.get('phase') or 'Pending'}, "
             f"minMember {group.min_member}"
             + (f", maxScheduleTime {format_duration(group.max_schedule_time)}"
                if group.max_schedule_time else "")]
    if group.errors:
        lines.append("  INVALID: " + "; ".join(group.errors))
    else:
        lines.append(_queue_line(client, group.queue))
    lines.append(f"  scheduled {status.get('scheduled', 0)}, running {status.get('running', 0)}"
                 f", succeeded {status.get('succeeded', 0)}, failed {status.get('failed', 0)}"
                 + (f"; attempt started {status['scheduleStartTime']}"
                    if status.get("scheduleStartTime") else ""))
    lines += _reservation_lines(status.get("reservation"))
    lines += _provisioning_lines(status.get("provisioningRequest"))
    conditions = status.get("conditions") or []
    if conditions:
        lines.append("Conditions:")
        lines += _table([["TYPE", "STATUS", "SINCE", "MESSAGE"]] + [
            [c.get("type", ""), c.get("status", ""), c.get("lastTransitionTime", ""),
             c.get("message", "")] for c in conditions])
    events = _latest_events(client, namespace) if pods else {}
    lines.append(f"Members ({len(pods)} of minMember {group.min_member}):")
    if pods:
        rows = [_member_row(p, events.get(p["metadata"]["name"]))
                for p in sorted(pods, key=lambda p: p["metadata"]["name"])]
        lines += _table([["NAME", "NODE", "STATE", "WHY"], *rows])
        bound = sum(1 for row in rows if row[1] != "-")
        share = next((row[3] for row in rows if f'Queue "{group.queue}"' in row[3]), "")
        if bound == 0 and share:
            lines.append(f"Waiting for: its queue's share. {share}")
        elif bound < group.min_member:
            lines.append(f"Waiting for: {group.min_member - bound} more members to be placed "
                         f"together with the {bound} placed.")
    else:
        lines.append(f"  none yet in {namespace}")
    if any((p.get("spec") or {}).get("resourceClaims") for p in pods):
        lines += _devices(client, namespace, pods)
    lines += _unreadable_lines(client, namespace)
    return "\n".join(lines)


def _unreadable_lines(client: KubeClient, namespace: str) -> list[str]:
    """Objects the scheduler sets aside because it cannot read them, in the gang's
    namespace and cluster-wide (events about cluster-scoped objects are in "default"):
    those whose latest Unreadable event no Readable event followed."""
    latest: dict[tuple[str, str, str], tuple[float, dict[str, Any]]] = {}
    for where in dict.fromkeys((namespace, "default")):
        for reason in (UNREADABLE, READABLE):
            for event in client.get(f"/api/v1/namespaces/{q(where)}/events",
                                    fieldSelector=f"reason={reason}").get("items") or ():
                involved = event.get("involvedObject") or {}
                key = (str(involved.get("kind") or ""), str(involved.get("namespace") or ""),
                       str(involved.get("name") or ""))
                stamp = parse_rfc3339(event.get("lastTimestamp") or event.get("eventTime"))
                if key not in latest or stamp >= latest[key][0]:
                    latest[key] = (stamp, event)
    rows = [[kind, f"{ns}/{name}" if ns else name,
             str(event.get("message") or "").partition(SET_ASIDE)[2] or "-"]
            for (kind, ns, name), (_, event) in sorted(latest.items())
            if event.get("reason") == UNREADABLE]
    if not rows:
        return []
    return ["Set aside, unreadable (the scheduler acts as if they did not exist; a node "
            "holding such a pod takes no new pods):",
            *_table([["KIND", "OBJECT", "FIELD: WHY"], *rows])]


def _member_claims(client: KubeClient, namespace: str,
                   pod: dict[str, Any]) -> list[tuple[str, ResourceClaim | None, str]]:
    """(pod claim name, its ResourceClaim or the template's as one, template) per entry."""
    statuses = {s.get("name"): s.get("resourceClaimName")
                for s in (pod.get("status") or {}).get("resourceClaimStatuses") or ()}
    found: list[tuple[str, ResourceClaim | None, str]] = []
    for entry in (pod.get("spec") or {}).get("resourceClaims") or ():
        name = entry.get("resourceClaimName") or statuses.get(entry.get("name"))
        template = entry.get("resourceClaimTemplateName") or ""
        path = (f"{API_PATH}/namespaces/{q(namespace)}/resourceclaims/{q(name)}" if name
                else f"{API_PATH}/namespaces/{q(namespace)}/resourceclaimtemplates/"
                     f"{q(template)}")
        try:
            raw = client.get(path)
        except ApiError as err:
            if not err.not_found:
                raise
            found.append((str(entry.get("name")), None, template))
            continue
        if not name:  # the template's claim spec, as the claim will be made
            raw = {"metadata": {"namespace": namespace, "name": f"<{template}>"},
                   "spec": (raw.get("spec") or {}).get("spec") or {}}
        found.append((str(entry.get("name")), parse_resource_claim(raw), template))
    return found


def _free_by_class(client: KubeClient, classes: set[str]) -> dict[str, dict[str, int]]:
    """class -> node -> devices the class selects that no claim holds."""
    taken: set[DeviceId] = set()
    for raw in client.get(f"{API_PATH}/resourceclaims").get("items") or ():
        allocation = parse_resource_claim(raw).allocation
        if allocation is not None:
            taken.update(r.device_id for r in allocation.results)
    free: dict[str, dict[str, int]] = {name: {} for name in classes}
    selectors = {}
    for raw in client.get(f"{API_PATH}/deviceclasses").get("items") or ():
        device_class = parse_device_class(raw)
        if device_class.name in classes:
            selectors[device_class.name] = [compile_selector(t) for t in device_class.selectors]
    for raw in client.get(f"{API_PATH}/resourceslices").get("items") or ():
        piece = parse_resource_slice(raw)
        where = piece.node_name or ("all nodes" if piece.all_nodes else f"slice {piece.name}")
        for device in piece.devices:
            if device.id in taken or device.unusable:
                continue
            for name, programs in selectors.items():
                try:
                    if all(not p.error and p.matches(device) for p in programs):
                        free[name][where] = free[name].get(where, 0) + 1
                except CelRuntimeError:
                    continue
    return free


def _devices(client: KubeClient, namespace: str, pods: list[dict[str, Any]]) -> list[str]:
    """Devices the gang needs, how many are free where, and what each member got."""
    need: dict[str, int] = {}
    per_member: dict[str, set[int]] = {}
    seen: set[str] = set()
    rows = [["MEMBER", "CLAIM", "DEVICES"]]
    for pod in sorted(pods, key=lambda p: p["metadata"]["name"]):
        for entry, claim, _ in _member_claims(client, namespace, pod):
            if claim is None:
                rows.append([pod["metadata"]["name"], f"{entry} (not created yet)", "-"])
                continue
            devices = ", ".join(f"{r.pool}/{r.device}" for r in claim.allocation.results) \
                if claim.allocation is not None else "-"
            rows.append([pod["metadata"]["name"], claim.name, devices])
            if claim.key in seen:
                continue
            seen.add(claim.key)
            for request in claim.requests:
                sub = request.alternatives[0]
                count = 1 if sub.mode == ALL else sub.count
                need[sub.device_class] = need.get(sub.device_class, 0) + count
                per_member.setdefault(sub.device_class, set()).add(count)
    free = _free_by_class(client, set(need))
    lines = ["Devices:"]
    for name, total in sorted(need.items()):
        counts = per_member.get(name, set())
        each = f" ({next(iter(counts))} per member)" if len(counts) == 1 else ""
        where = free.get(name, {})
        spots = ", ".join(f"{node} {n}" for node, n in sorted(where.items()))
        lines.append(f"  needs {total} devices of class {name}{each}; "
                     f"{sum(where.values())} free" + (f": {spots}" if spots else ""))
    return lines + _table(rows)
