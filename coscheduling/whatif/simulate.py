"""Would this job fit? The running scheduler's own admission, asked about a gang that does
not exist, on the cluster as its cache shows it.

The what-if runs on a view of the cache (``coscheduling.core.view``), taken under the cache
lock in one pass over node records and pods; the lock is then free, so the scheduling loop
places and binds pods meanwhile, and the answer is the cluster as the view saw it. The
derived gang's pods go into the view and its group is listed for the what-if's thread alone,
under names no real object can have (``~whatif``): every plugin sees them as it would see
the real gang, and nothing else ever does. The gang plugin's trial forgets the gang;
nothing is written to the API server, evicted, frozen or counted, and the view is dropped.

Answers, in order: fits now (on which nodes, in which domain); fits after preempting
(which pods); fits after its queue reclaims what others borrowed (which pods); fits once the
reservation it would make completes (first in line: where, and when if the running pods'
ends are known); fits once room frees (behind other reservations, or none possible); never
(not even on the empty cluster). When it does not fit now, the shortfall says what is
missing.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from coscheduling.api.membership import Membership
from coscheduling.api.podgroups import PodGroup, gang_key
from coscheduling.api.pods import Pod, parse_pod
from coscheduling.core.view import simulating
from coscheduling.framework.interfaces import GangSimulator, GangTrial
from coscheduling.groups import APIS
from coscheduling.whatif.derive import Derived, ManifestError
from coscheduling.whatif.shortfall import Shortfall, shortfall

if TYPE_CHECKING:
    from coscheduling.core.cache import Cache
    from coscheduling.core.scheduler import Scheduler
    from coscheduling.framework.nodeinfo import NodeInfo

SUFFIX = "~whatif"
"""Appended to the names of the hypothetical gang and pods: no Kubernetes name has a ``~``."""

FITS_NOW = "FITS_NOW"
FITS_AFTER_PREEMPTION = "FITS_AFTER_PREEMPTION"
FITS_AFTER_RECLAIM = "FITS_AFTER_RECLAIM"
FITS_WHEN_ROOM_FREES = "FITS_WHEN_ROOM_FREES"
NEVER = "NEVER"
FITS_ONCE_RESERVED = "FITS_ONCE_RESERVED"
FITS_AFTER_SCALE_UP = "FITS_AFTER_SCALE_UP"
GANG_PLUGIN = "Coscheduling"


class NoSimulator(Exception):
    """The profile has no plugin that can try a gang's admission."""


@dataclass
class Answer:
    verdict: str
    source: str
    group: str
    min_member: int
    pods: int
    placements: list[tuple[str, str]] = field(default_factory=list)
    domain: str = ""
    victims: list[str] = field(default_factory=list)
    reason: str = ""
    shortfall: Shortfall | None = None
    notes: list[str] = field(default_factory=list)
    # Waiting for room: the reservation it would make, those ahead of it, its estimate.
    reserve_nodes: list[str] = field(default_factory=list)
    reservations_ahead: list[str] = field(default_factory=list)
    estimated_start: float = 0.0


def simulate(scheduler: Scheduler, derived: Derived) -> Answer:
    """The what-if of the gang ``derived`` from a manifest (:func:`derive`).

    Every step (the gang's trial; then, when it does not fit, the trial on the empty
    cluster and the shortfall) runs on one view of the cache (``coscheduling.core.view``):
    the cache lock is held only while the view is taken, the live cache is never changed,
    and the scheduling loop places and binds pods while the what-if runs."""
    simulator = _simulator(scheduler)
    parsed = _parsed(derived)
    group = _group(scheduler, derived)
    pods = _pods(scheduler, derived, parsed, group)
    answer = Answer("", derived.source, gang_key(group.namespace, _shown(group.name),
                                                 group.tag),
                    group.min_member, len(pods), notes=list(derived.notes))
    with simulating(scheduler.cache) as view, scheduler.listers.imagining(group):
        for pod in pods:
            view.set_pod(pod)
        trial = simulator.trial(group, pods, preempt=True)
        if not trial.fits:
            answer.reason = _shown(trial.reason)
            _judge_waiting(scheduler, view, simulator, group, pods, answer)
            return answer
    _record(answer, trial)
    answer.verdict = FITS_NOW if not trial.victims else (
        FITS_AFTER_RECLAIM if trial.reclaim else FITS_AFTER_PREEMPTION)
    if len(pods) > len(trial.nodes):
        answer.notes.append(f"{len(pods) - len(trial.nodes)} pod(s) beyond what the "
                            "gang needs at once are placed one by one afterwards")
    return answer


def _simulator(scheduler: Scheduler) -> GangSimulator:
    for plugin in scheduler.framework.instances.values():
        if isinstance(plugin, GangSimulator):
            return plugin
    raise NoSimulator(f"no gang plugin ({GANG_PLUGIN}) is enabled in this profile")


def _judge_waiting(scheduler: Scheduler, view: Cache, simulator: GangSimulator,
                   group: PodGroup, pods: list[Pod], answer: Answer) -> None:
    """A gang that does not fit now: would it fit the empty cluster (then when), and what
    is missing. On the what-if's view."""
    members = pods if group.subgroups is not None else pods[:group.min_member]
    usable = _Usable(scheduler)
    bound = [p for p in view.pods() if p.node_name and view.node(p.node_name) is not None]
    with view.transaction() as tx:  # discarded: the pods stay
        tx.evict(bound)
        empty = simulator.trial(group, pods, preempt=False)
        # The nodes each shape of member may use, on the empty cluster.
        for member in {usable.shape(m): m for m in members}.values():
            for info in view.nodes():
                usable(member, info)
    answer.verdict = FITS_WHEN_ROOM_FREES if empty.fits else NEVER
    answer.shortfall = shortfall(view, group, members, usable)
    if empty.fits:
        _reservation(simulator.reservation_preview(group, pods), answer)
    asks, why_not = simulator.scale_up_answer(members)
    if asks:
        answer.verdict = FITS_AFTER_SCALE_UP
        if answer.shortfall is not None and not answer.shortfall.nodes_needed:
            answer.shortfall.nodes_needed = answer.shortfall.nodes_to_add
        answer.notes.append(f"the scheduler would ask the cluster-autoscaler for the "
                            f"{len(members)} member(s) in one ProvisioningRequest")
    elif why_not:
        answer.notes.append(why_not)


def _reservation(preview: GangTrial, answer: Answer) -> None:
    """Once room frees: the reservation it would make (first in line) or those ahead."""
    answer.reservations_ahead = list(preview.ahead)
    answer.reserve_nodes = list(preview.reserve_nodes)
    answer.estimated_start = preview.estimated_start
    if preview.would_reserve and preview.reserve_nodes:
        answer.verdict = FITS_ONCE_RESERVED


class _Usable:
    """Whether a member's filters pass on a node, on the empty cluster; computed once per
    signature of the pod and node (a gang's identical members share it)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self._runner = scheduler.handle.runner
        self._fw = scheduler.framework
        self._seen: dict[tuple[object, str], bool] = {}
        self._signatures: dict[str, object] = {}  # pod key -> its signature (or its key)

    def shape(self, pod: Pod) -> object:
        """The pod's signature (its key when it cannot be signed): pods of one shape get
        the same answer from a node."""
        signature = self._signatures.get(pod.key)
        if signature is None:
            signed = self._fw.signature(pod)
            signature = self._signatures[pod.key] = signed if signed is not None else pod.key
        return signature

    def __call__(self, pod: Pod, info: NodeInfo) -> bool:
        key = (self.shape(pod), info.name)
        known = self._seen.get(key)
        if known is None:
            known = self._seen[key] = self._runner.filter_node(pod, info, GANG_PLUGIN).ok
        return known


def _record(answer: Answer, trial: GangTrial) -> None:
    answer.placements = sorted((_shown(key.rpartition("/")[2]), node)
                               for key, node in trial.nodes.items())
    answer.domain = trial.domain
    answer.victims = sorted(p.key for p in trial.victims)
    answer.reason = _shown(trial.reason)


def _shown(text: str) -> str:
    return text.replace(SUFFIX, "")


def _group(scheduler: Scheduler, derived: Derived) -> PodGroup:
    """The gang's group record under its hypothetical name."""
    if derived.group is None:
        found = scheduler.listers.podgroup(derived.group_key)
        if found is None:
            raise ManifestError("metadata.labels", f"the pods name the group "
                                f"{derived.group_key}, which neither the manifest nor the "
                                "cluster has")
        group = dataclasses.replace(found)
    else:
        api = next(a for a in APIS if a.api_version == derived.group["apiVersion"])
        group = api.parse(derived.group)
        if group.errors:
            raise ManifestError(f"PodGroup {derived.group['metadata']['name']}",
                                "; ".join(group.errors))
    group.name += SUFFIX
    group.uid, group.created = "whatif", time.time()
    return group


def _parsed(derived: Derived) -> list[Pod]:
    """The manifest's pods as the watch would parse them, or ManifestError naming the field."""
    pods = []
    for raw in derived.pods:
        pod = parse_pod(raw)
        if pod.parse_error:
            raise ManifestError(f"pod {raw['metadata']['name']}", pod.parse_error)
        pods.append(pod)
    return pods


def _pods(scheduler: Scheduler, derived: Derived, parsed: list[Pod],
          group: PodGroup) -> list[Pod]:
    """The parsed pods under their hypothetical names, in ``group``, with their priority."""
    pods = []
    for index, (raw, parsed_pod) in enumerate(zip(derived.pods, parsed, strict=True)):
        where = f"pod {raw['metadata']['name']}"
        pod = dataclasses.replace(parsed_pod, name=parsed_pod.name + SUFFIX,
                                  uid=f"whatif-{index}", created=time.time())
        pod.membership = Membership(key=group.key, tag=group.tag, name=group.name,
                                    marker=pod.membership.marker, role=pod.membership.role)
        class_name = (raw.get("spec") or {}).get("priorityClassName")
        if class_name and not pod.priority:
            value = scheduler.listers.priority_class(class_name)
            if value is None:
                raise ManifestError(f"{where}: spec.priorityClassName",
                                    f'PriorityClass "{class_name}" not found')
            pod.priority = value
        pods.append(pod)
    return pods
