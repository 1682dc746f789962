"""The Scheduling service: each RPC is one framework call of the running scheduler.

Nothing here decides anything: the answers come from the scheduler's own framework, cache,
gang manager and waiting pods, under the cache lock, as in the scheduling loop; the
read-only questions that run plugins (Filter, Score, Simulate) run them on a view of the
cache (``coscheduling.core.view``) and hold the lock only to take it. What this
module adds is the bookkeeping of a cycle that a caller drives across several calls
(:mod:`coscheduling.server.remote`).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import grpc

from coscheduling.core.view import simulating
from coscheduling.framework.cycle_state import FAILURE, CycleFailure, CycleState
from coscheduling.framework.interfaces import GangReporter, GangSummary
from coscheduling.framework.status import SUCCESS, Code, Status
from coscheduling.framework.waiting import MAX_UNREAD
from coscheduling.server.auth import Authorizer, Caller
from coscheduling.server.convert import (
    PodArg,
    RequestError,
    invalid,
    node_name,
    not_found,
    object_key,
    precondition,
    read_pod,
    resolve_node,
    resolve_nodes,
    status_pb,
)
from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.server.ratelimit import PerCaller
from coscheduling.server.remote import RemoteCycle, remote_cycles
from coscheduling.server.whatif import answer_pb
from coscheduling.whatif.derive import ManifestError, derive
from coscheduling.whatif.simulate import NoSimulator, simulate

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.core.scheduler import Scheduler
    from coscheduling.framework.waiting import Decision

log = logging.getLogger(__name__)

SERVICE_NAME = pb.DESCRIPTOR.services_by_name["Scheduling"].full_name
SUBSCRIBED_METADATA = ("coscheduling-subscribed", "1")
STOPPED_REASON = "the gRPC server stopped"


class SchedulingServicer:
    """The RPCs over one Scheduler's instances (no second framework, no copy of its state)."""

    def __init__(self, scheduler: Scheduler, max_streams: int = 16, *,
                 reservation_timeout: float = 60.0,
                 clock: Callable[[], float] | None = None,
                 authorizer: Authorizer | None = None,
                 simulates_per_minute: int = 30) -> None:
        self._s = scheduler
        self._simulates = PerCaller(simulates_per_minute)
        self._max_streams = max_streams
        self._authorizer = authorizer or Authorizer.of((), (), enforced=False)
        self._reservation_timeout = reservation_timeout
        self._fw = scheduler.framework
        self._lock = scheduler.cache.lock
        self._cycles = remote_cycles(scheduler)
        if clock is not None:  # tests: reservation ages on a clock they move
            self._cycles.clock = clock
        # Open decision streams -> (caller identity, whether it may mutate).
        self._streams: dict[queue.SimpleQueue[Decision | None], tuple[str, bool]] = {}
        self._streams_lock = threading.Lock()
        self._closing = False

    def _caller(self, rpc: str, context: Any, arg: PodArg) -> Caller:
        """The caller of ``rpc``, refused unless ``arg``'s namespace is within its reach."""
        caller = self._authorizer.caller(rpc, context)
        caller.check_namespace(arg.namespace, f"{arg.field}.namespace")
        return caller

    # -- the same answer the loop would get ------------------------------------------------
    def Less(self, request: Any, context: Any) -> pb.LessResponse:
        a, b = read_pod(request, "a"), read_pod(request, "b")
        caller = self._caller("Less", context, a)
        caller.check_namespace(b.namespace, "b")
        with self._lock:
            less = self._fw.queue_sort.less(a.resolve(self._s, watched=False),
                                            b.resolve(self._s, watched=False))
        return pb.LessResponse(less=less)

    def PreFilter(self, request: Any, context: Any) -> pb.PreFilterResponse:
        """Not stateless: a gang member's PreFilter claims room for its gang, freezes it, or
        preempts for it. So it acts only on the watched pod (a pod_json names which one, and
        its uid, when given, must match); a pod the watch has not seen is refused."""
        arg = read_pod(request, "pod")
        self._caller("PreFilter", context, arg)
        with self._lock:
            status = self._s.cycles.pre_filter(CycleState(), arg.resolve(self._s, watched=True))
        return pb.PreFilterResponse(status=status_pb(status))

    def Filter(self, request: Any, context: Any) -> pb.FilterResponse:
        """Filter plugins need no PreFilter state to be right (they compute what is missing),
        so a fresh CycleState gives the loop's answer without PreFilter's side effects. On a
        view of the cache (the lock is held only to take it)."""
        arg = read_pod(request, "pod")
        self._caller("Filter", context, arg)
        with simulating(self._s.cache):
            pod = arg.resolve(self._s, watched=False)
            nodes = resolve_nodes(self._s, request.node_names, "node_names")
            state = CycleState()
            results = [(n.name, self._fw.run_filter(state, pod, n)) for n in nodes]
        return pb.FilterResponse(nodes=[pb.NodeStatus(node_name=name, status=status_pb(status))
                                        for name, status in results])

    def Score(self, request: Any, context: Any) -> pb.ScoreResponse:
        arg = read_pod(request, "pod")
        self._caller("Score", context, arg)
        with simulating(self._s.cache):  # a view: the lock is held only to take it
            pod = arg.resolve(self._s, watched=False)
            state = CycleState()
            if request.node_names:
                nodes = resolve_nodes(self._s, request.node_names, "node_names")
            else:
                run_filter = self._fw.run_filter
                nodes = [n for n in self._s.cache.nodes() if run_filter(state, pod, n).ok]
            totals = self._fw.run_score(state, pod, nodes)
        return pb.ScoreResponse(scores=[pb.NodeScore(node_name=name, score=score)
                                        for name, score in totals.items()])

    # -- a cycle the caller drives ----------------------------------------------------------
    def Reserve(self, request: Any, context: Any) -> pb.ReserveResponse:
        """The node's Filter first (the loop's own filters): a node the pod does not fit is
        refused with Filter's status, and nothing is held."""
        arg = read_pod(request, "pod")
        caller = self._caller("Reserve", context, arg)
        with self._lock:
            pod = arg.resolve(self._s, watched=True)
            node = resolve_node(self._s, request.node_name, "node_name")
            held = self._held(pod, node.name, caller)
            if held is not None:
                held.touched = self._cycles.clock()
                return pb.ReserveResponse(status=status_pb(SUCCESS))  # a retried Reserve
            cycle = RemoteCycle(pod, node.name, touched=self._cycles.clock(),
                                owner=caller.identity)
            status = self._s.cycles.reserve_chosen(cycle.state, pod, node)
            if status.ok:
                self._cycles.add(cycle)
        return pb.ReserveResponse(status=status_pb(status))

    def Permit(self, request: Any, context: Any) -> pb.PermitResponse:
        arg = read_pod(request, "pod")
        node = node_name(request)
        caller = self._caller("Permit", context, arg)
        with self._lock:
            cycle = self._reserved(arg.resolve(self._s, watched=True), node)
            _check_owner(cycle, caller, "Permit")
            if cycle.permit is not None:
                raise precondition("pod", f"Permit was already called for pod {cycle.pod.key} "
                                          f"(it answered {cycle.permit.code.name})")
            status, timeout = self._permit(cycle)
        return _verdict(pb.PermitResponse(), status, timeout)

    def Schedule(self, request: Any, context: Any) -> pb.ScheduleResponse:
        """The loop's own cycle (Cycles.select, PostFilter's preemption included, then
        Reserve and Permit as those RPCs run them) in one call; a pod that cannot be placed
        keeps nothing: a Permit that refuses it is undone at once, as Unreserve would."""
        arg = read_pod(request, "pod")
        caller = self._caller("Schedule", context, arg)
        with self._lock:
            pod = arg.resolve(self._s, watched=True)
            self._held(pod, None, caller)
            state = CycleState()
            selected = self._s.cycles.select(state, pod)  # Filter ran on the node it chose
            if selected.node is None:
                return _refused(selected.status, selected.failures)
            cycle = RemoteCycle(pod, selected.node, state, touched=self._cycles.clock(),
                                owner=caller.identity)
            status, timeout = self._reserve(cycle), 0.0
            if status.ok:
                status, timeout = self._permit(cycle)
                if not status.ok and status.code != Code.WAIT:
                    self._unreserve(cycle, status.message)
            if not status.ok and status.code != Code.WAIT:
                return _refused(status)
        return _verdict(pb.ScheduleResponse(node_name=cycle.node_name), status, timeout)

    def _held(self, pod: Pod, node: str | None, caller: Caller) -> RemoteCycle | None:
        """Whether ``pod`` may be reserved (under the cache lock): the caller's own
        reservation on ``node`` is returned (a retried call); a replaced pod's is undone; any
        other, and a bound, deleted or loop-assumed pod, is refused naming why."""
        held = self._cycles.get(pod.key)
        if held is not None and held.pod.uid != pod.uid:
            self._unreserve(held, f"pod {pod.key} was replaced")  # a stale reservation
        elif held is not None and held.node_name == node:
            _check_owner(held, caller, "Reserve")
            return held
        elif held is not None:
            raise precondition("pod", f"pod {pod.key} is reserved on node "
                                      f"{held.node_name}: Unreserve it first")
        if pod.node_name:
            raise precondition("pod", f"pod {pod.key} is bound to node {pod.node_name}")
        if pod.deleting:
            raise precondition("pod", f"pod {pod.key} is being deleted")
        if self._s.cache.is_assumed(pod.key):
            raise precondition("pod", f"pod {pod.key} is assumed on node "
                                      f"{self._s.cache.assumed_node(pod.key)} by the "
                                      "scheduler's own loop")
        return None

    def _reserve(self, cycle: RemoteCycle) -> Status:
        """Reserve as the loop does on the node it selected; the cycle is kept when it
        succeeded (a failed Reserve undid itself)."""
        status = self._s.cycles.reserve(cycle.state, cycle.pod, cycle.node_name, popped=False)
        if status.ok:
            self._cycles.add(cycle)
        return status

    def _permit(self, cycle: RemoteCycle) -> tuple[Status, float]:
        """Permit for a reserved cycle, recorded in it; with how long a Wait may last."""
        pod = cycle.pod  # as in the loop: the record the cycle started with
        status = self._s.cycles.permit(cycle.state, pod, cycle.node_name)
        cycle.permit = status
        cycle.touched = self._cycles.clock()
        waiting = self._s.waiting_pods.get(pod.key)
        if status.code != Code.WAIT or waiting is None:
            return status, 0.0
        return status, max(0.0, waiting.deadline - waiting.since)

    def Unreserve(self, request: Any, context: Any) -> pb.UnreserveResponse:
        # By key only: the pod may have left the watch cache (deleted) since Reserve.
        arg = read_pod(request, "pod")
        node = node_name(request)
        caller = self._caller("Unreserve", context, arg)
        with self._lock:
            cycle = self._cycles.get(arg.key)
            if cycle is None:
                return pb.UnreserveResponse(unreserved=False)
            _check_owner(cycle, caller, "Unreserve")
            if cycle.node_name != node:
                raise precondition("node_name", f"pod {arg.key} is reserved on node "
                                                f"{cycle.node_name}, not {node}")
            self._unreserve(cycle, f"unreserved by the gRPC caller on node {node}")
        return pb.UnreserveResponse(unreserved=True)

    def PostBind(self, request: Any, context: Any) -> pb.PostBindResponse:
        arg = read_pod(request, "pod")
        node = node_name(request)
        caller = self._caller("PostBind", context, arg)
        with self._lock:
            cycle = self._cycles.get(arg.key)
            if cycle is None:  # PostBind plugins act on the watched pod only
                pod, state = arg.resolve(self._s, watched=True), CycleState()
            else:
                _check_owner(cycle, caller, "PostBind")
                if cycle.node_name != node:
                    raise precondition("node_name", f"pod {arg.key} is reserved on node "
                                                    f"{cycle.node_name}, not {node}")
                if cycle.waiting:
                    raise precondition("pod", f"pod {arg.key} is waiting at Permit: bind it "
                                              "once WatchDecisions reports it allowed")
                if not _allowed(cycle):
                    raise precondition("pod", f"pod {arg.key} was not permitted: Unreserve it")
                self._cycles.pop(arg.key)
                cycle.settle()
                pod, state = cycle.pod, cycle.state
            self._fw.run_post_bind(state, pod, node)
        return pb.PostBindResponse()

    def _reserved(self, pod: Pod, node: str) -> RemoteCycle:
        key = pod.key
        cycle = self._cycles.get(key)
        if cycle is None:
            raise precondition("pod", f"pod {key} is not reserved: call Reserve first")
        if cycle.pod.uid != pod.uid:
            raise precondition("pod", f"pod {key} was replaced since Reserve: Unreserve it")
        if cycle.node_name != node:
            raise precondition("node_name", f"pod {key} is reserved on node "
                                            f"{cycle.node_name}, not {node}")
        return cycle

    def _unreserve(self, cycle: RemoteCycle, reason: str) -> None:
        """Undo a remote cycle the way the loop undoes its own (call under the cache lock)."""
        pod = cycle.pod
        if cycle.waiting:  # its caller gives up before the decision
            self._s.waiting_pods.reject(pod.key, "gRPC", reason)
        self._cycles.pop(pod.key)
        cycle.settle()
        failure: CycleFailure | None = cycle.state.read(FAILURE)
        why = Status.unschedulable(failure.reason if failure else reason)
        self._s.cycles.undo(cycle.state, pod, cycle.node_name, why, reserved=True,
                            report=False)

    def expire_reservations(self, now: float | None = None) -> list[str]:
        """Release every reservation that no call (nor its gang's decision) has touched for
        the reservation timeout, as Unreserve would, with a FailedScheduling event: its
        caller is presumed gone, and the room must not stay held for good. A pod waiting
        at Permit is left to its gang's own timeout. Returns the released pods' keys."""
        now = self._cycles.clock() if now is None else now
        timeout = self._reservation_timeout
        expired: list[str] = []
        with self._lock:
            for key in self._cycles.pod_keys():
                cycle = self._cycles.get(key)
                if cycle is None or cycle.waiting or now - cycle.touched < timeout:
                    continue
                reason = (f"the gRPC reservation of pod {key} on node {cycle.node_name} "
                          f"expired: no call about it for {timeout:g}s")
                self._unreserve(cycle, reason)
                if self._s.reporter is not None:
                    self._s.reporter.unschedulable(cycle.pod, reason)
                expired.append(key)
        if expired:
            log.warning("released %d expired gRPC reservations: %s", len(expired),
                        ", ".join(expired))
        return expired

    # -- decisions ------------------------------------------------------------------------
    def WatchDecisions(self, request: Any, context: Any) -> Iterator[pb.Decision]:
        group = object_key(request, "group") if request.HasField("group") else ""
        caller = self._authorizer.caller("WatchDecisions", context)
        if group:
            caller.check_namespace(group.partition("/")[0], "group.namespace")
        owner = self._authorizer.stream_owner(context)
        with self._streams_lock:
            if self._closing:
                return
            self._check_stream_room(owner)
            subscriber = self._s.waiting_pods.subscribe()
            self._streams[subscriber] = owner
        context.add_callback(lambda: subscriber.put(None))  # the call ended: stop waiting
        overflowed = False
        try:
            context.send_initial_metadata((SUBSCRIBED_METADATA,))
            while True:
                decision = subscriber.get()
                if decision is None:
                    break
                if (decision.group_key == group if group else
                        caller.may_act_in(decision.pod_key.partition("/")[0])):
                    yield _decision_pb(decision)
        finally:
            overflowed = self._s.waiting_pods.unsubscribe(subscriber)
            with self._streams_lock:
                self._streams.pop(subscriber, None)
        if overflowed:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, "request",
                               f"this stream fell {MAX_UNREAD} decisions behind and was closed;"
                               " read faster, or filter by group")

    def _check_stream_room(self, owner: tuple[str, bool]) -> None:
        """At most ``max_streams`` streams; a quarter of them kept for callers that may
        mutate (a read-only dashboard cannot lock the scheduler's driver out), and at most
        half for any one caller."""
        identity, mutating = owner
        open_streams = list(self._streams.values())
        reserved = self._max_streams // 4
        read_only = sum(1 for _, may in open_streams if not may)
        mine = sum(1 for who, _ in open_streams if who == identity)
        why = ""
        if len(open_streams) >= self._max_streams:
            why = (f"{len(open_streams)} WatchDecisions streams are open, the most this server "
                   "allows")
        elif not mutating and read_only >= self._max_streams - reserved:
            why = (f"read-only callers hold {read_only} WatchDecisions streams, the most they "
                   f"may ({reserved} are kept for callers that may mutate)")
        elif identity and mine >= max(1, self._max_streams // 2):
            why = f"{identity} holds {mine} WatchDecisions streams, the most one caller may"
        if why:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, "request", why)

    def close(self) -> None:
        """End every open stream now (at shutdown), so a graceful stop need not wait them out."""
        with self._streams_lock:
            self._closing = True
            for subscriber in self._streams:
                subscriber.put(None)

    # -- reads ----------------------------------------------------------------------------
    def GetPodGroup(self, request: Any, context: Any) -> pb.GetPodGroupResponse:
        key = object_key(request, "group")
        self._authorizer.caller("GetPodGroup", context).check_namespace(
            key.partition("/")[0], "group.namespace")
        with self._lock:
            group = self._s.listers.podgroup(key)
            if group is None:
                raise not_found("group", f"PodGroup {key} not found")
            gang = self._gang_summary(key)
            members = [self._member(p) for p in sorted(self._s.cache.group_pods(key),
                                                       key=lambda p: p.name) if not p.deleting]
            response = pb.GetPodGroupResponse(
                group=pb.ObjectKey(namespace=group.namespace, name=group.name),
                min_member=group.min_member, members=members, waiting=gang.waiting,
                bound=sum(1 for m in members if m.state == pb.MEMBER_STATE_BOUND),
                claimed=gang.claimed, placed=gang.placed, phase=gang.phase,
                frozen_until=gang.frozen_until, errors=list(group.errors),
                attempt_deadline=gang.attempt_deadline,
                last_rejection_reason=gang.last_failure, attempts=gang.attempts,
                timeouts=gang.timeouts, rejections=gang.rejections,
            )
        return response

    def Simulate(self, request: Any, context: Any) -> pb.SimulateResponse:
        """What-if (read-only): the scheduler's own admission, on a gang that does not
        exist, on a view of the cache; nothing it touches outlives the call. The manifest is
        read and its size checked before the view is taken; each caller has a rate."""
        caller = self._authorizer.caller("Simulate", context)
        wait = self._simulates.take(caller.identity)
        if wait:
            raise RequestError(grpc.StatusCode.RESOURCE_EXHAUSTED, "request",
                               f"{caller.identity or 'this caller'} called Simulate more "
                               f"often than {self._simulates.per_minute} times a minute "
                               f"(grpc.simulatesPerMinute); again in {wait:.1f}s")
        if not request.manifest:
            raise invalid("manifest", "required: Kubernetes objects as YAML or JSON")
        try:
            derived = derive(bytes(request.manifest), request.namespace or "default")
            caller.check_namespace(derived.namespace, "manifest.metadata.namespace")
            answer = simulate(self._s, derived)
        except ManifestError as err:
            raise invalid(f"manifest: {err.path}", str(err).partition(": ")[2]) from None
        except NoSimulator as err:
            raise precondition("manifest", str(err)) from None
        return answer_pb(answer, caller.may_act_in)

    def _gang_summary(self, key: str) -> GangSummary:
        for plugin in self._fw.instances.values():
            if isinstance(plugin, GangReporter):
                summary = plugin.summary(key)
                if summary is not None:
                    return summary
        raise precondition("group", "no gang plugin (Coscheduling) is enabled")

    def _member(self, pod: Pod) -> pb.Member:
        cache = self._s.cache
        waiting = self._s.waiting_pods.get(pod.key)
        if pod.node_name:
            state, node = pb.MEMBER_STATE_BOUND, pod.node_name
        elif waiting is not None:
            state, node = pb.MEMBER_STATE_WAITING, waiting.node_name
        elif cache.is_assumed(pod.key):
            state, node = pb.MEMBER_STATE_ASSUMED, cache.assumed_node(pod.key)
        elif cache.claimed_node(pod.key):
            state, node = pb.MEMBER_STATE_CLAIMED, cache.claimed_node(pod.key)
        else:
            state, node = pb.MEMBER_STATE_PENDING, ""
        return pb.Member(name=pod.name, node=node, state=state)

    # -- lifetime -------------------------------------------------------------------------
    def attach(self) -> None:
        self._cycles.attach()

    def detach(self) -> None:
        """This server stopped; if it was the scheduler's last, undo the cycles callers
        left open (nobody is left to call Unreserve)."""
        if not self._cycles.detach():
            return
        with self._lock:
            for key in self._cycles.pod_keys():
                cycle = self._cycles.get(key)
                if cycle is not None:
                    self._unreserve(cycle, STOPPED_REASON)


Verdict = TypeVar("Verdict", pb.PermitResponse, pb.ScheduleResponse)


def _verdict(response: Verdict, status: Status, timeout: float) -> Verdict:
    """Permit's answer into ``response`` (a PermitResponse or ScheduleResponse): its status,
    and allow, wait (with its timeout) or unschedulable."""
    response.status.CopyFrom(status_pb(status))
    if status.code == Code.WAIT:
        response.wait.timeout_seconds = timeout
        response.wait.reason = status.message
    elif status.ok:
        response.allow.SetInParent()
    else:
        response.unschedulable.reason = status.message
    return response


def _refused(status: Status, failures: Mapping[str, Status] | None = None,
             ) -> pb.ScheduleResponse:
    """A Schedule that placed nothing: why, and each node's Filter status if none fit."""
    nodes = [pb.NodeStatus(node_name=name, status=status_pb(failed))
             for name, failed in (failures or {}).items()]
    return _verdict(pb.ScheduleResponse(nodes=nodes), status, 0.0)


def _check_owner(cycle: RemoteCycle, caller: Caller, rpc: str) -> None:
    """Only the caller that reserved a pod may go on with its cycle or undo it."""
    if cycle.owner != caller.identity:
        raise RequestError(grpc.StatusCode.PERMISSION_DENIED, "pod",
                           f"pod {cycle.pod.key} was reserved by {cycle.owner or 'another caller'}"
                           f": {caller.identity or 'this caller'} may not call {rpc} on it")


def _allowed(cycle: RemoteCycle) -> bool:
    if cycle.decision is not None:
        return cycle.decision.ok
    return cycle.permit is not None and cycle.permit.ok


def _decision_pb(decision: Decision) -> pb.Decision:
    pod_ns, _, pod_name = decision.pod_key.partition("/")
    group_ns, _, group_name = decision.group_key.partition("/")
    status = decision.status
    return pb.Decision(
        pod=pb.ObjectKey(namespace=pod_ns, name=pod_name), pod_uid=decision.pod_uid,
        node_name=decision.node_name,
        group=pb.ObjectKey(namespace=group_ns or pod_ns, name=group_name),
        allowed=status.ok, reason=status.message, plugin=status.plugin,
        waited_seconds=decision.waited,
    )
