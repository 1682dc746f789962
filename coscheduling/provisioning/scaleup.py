"""Whole-gang scale-ups: one ProvisioningRequest for everything a gang is missing.

The scheduling cycle decides (under the cache lock, no API call); the writes and the
polling of the requests' conditions run on an :class:`ApiWorker`; housekeeping turns what
the polling saw into the gang's next step (Provisioned: try the gang now; Failed or
expired: wait, and ask again after a backoff that doubles).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from coscheduling.api.quantity import format_amounts
from coscheduling.api.times import format_rfc3339
from coscheduling.cluster.client import ApiError
from coscheduling.provisioning.args import ScaleUpArgs
from coscheduling.provisioning.guard import ScaleDownGuard
from coscheduling.provisioning.requests import (
    ACCEPTED,
    ENDED,
    FAILED,
    PENDING,
    PROVISIONED,
    WITHDRAWN,
    RequestState,
    consume_patch,
    pod_sets,
    request_body,
    request_name,
    request_state,
    requests_path,
    template_body,
)
from coscheduling.provisioning.worker import ApiWorker

if TYPE_CHECKING:
    from collections.abc import Iterable

    from coscheduling.api.podgroups import PodGroup
    from coscheduling.api.pods import Pod
    from coscheduling.framework.nodeinfo import NodeInfo


@runtime_checkable
class ProvisioningApi(Protocol):
    def get(self, path: str, **query: Any) -> dict[str, Any]: ...
    def create(self, path: str, body: Mapping[str, Any]) -> dict[str, Any]: ...
    def delete(self, path: str, **query: Any) -> dict[str, Any]: ...
    def patch(self, path: str, body: Any, *, kind: str = "merge") -> dict[str, Any]: ...


@dataclass
class Asked:
    """One gang's current request: which, for how many members, and what it says."""

    name: str
    attempt: int
    namespace: str
    members: int
    requested: float
    state: RequestState = field(default_factory=RequestState)
    seen: str = ""  # the state housekeeping last acted on
    retry_at: float = 0.0  # set once the request ended: when to ask again
    # Until when the gang waits for this scale-up before it may preempt (0: it need not).
    preempt_after: float = 0.0
    delay_told: bool = False  # housekeeping said the wait is over
    withdrawing: bool = False  # the gang was placed: the request is being withdrawn
    retry_told: bool = False  # housekeeping said the backoff is over

    def describe(self) -> str:
        text = f"ProvisioningRequest {self.name} for {self.members} member(s): {self.state.state}"
        if self.state.reason or self.state.message:
            text += f" ({'; '.join(p for p in (self.state.reason, self.state.message) if p)})"
        return text


def no_shape_holds(members: Sequence[Pod], nodes: Iterable[NodeInfo]) -> str:
    """Why no scale-up could help ("" when one might): a member that no node of any shape
    in the cluster could hold even when empty."""
    shapes = [info.node.allocatable for info in nodes if info.node is not None]
    for pod in members:
        if not any(all(shape.get(k, 0) >= v for k, v in pod.requests.items())
                   for shape in shapes):
            wants = ", ".join(f"{k} {v}" for k, v in sorted(format_amounts(pod.requests).items()))
            return (f"no node of any shape in the cluster could hold member {pod.name} even "
                    f"when empty (it requests {wants}): a scale-up of the same shapes "
                    "cannot help, so none is asked for")
    return ""


class ScaleUps:
    """The gangs' ProvisioningRequests (keyed by group key)."""

    def __init__(self, api: ProvisioningApi, args: ScaleUpArgs, worker: ApiWorker) -> None:
        self.api = api
        self.args = args
        self.worker = worker
        self._lock = threading.Lock()
        self._asked: dict[str, Asked] = {}
        self.refused: dict[str, str] = {}
        self._polling = False

    def of(self, group_key: str) -> Asked | None:
        with self._lock:
            asked = self._asked.get(group_key)
            return replace(asked) if asked is not None else None

    def consider(self, group: PodGroup, members: Sequence[Pod], nodes: Iterable[NodeInfo],
                 now: float, delay: float = 0.0) -> tuple[str, Asked | None]:
        """What the gang's scale-up says now, and the request asked for in this call (None
        when none was): one per gang at a time, again only after its backoff."""
        current = self.of(group.key)
        ended = current is not None and current.state.state in (*ENDED, WITHDRAWN)
        if current is not None and (not ended or not current.retry_at
                                    or now < current.retry_at):
            when = f"; asked again at {format_rfc3339(current.retry_at)}" \
                if ended and current.retry_at else ""
            return f"scale-up: {current.describe()}{when}", None
        why_not = no_shape_holds(members, nodes)
        if why_not:
            self.refused[group.key] = why_not
            return f"no scale-up: {why_not}", None
        self.refused.pop(group.key, None)
        attempt = current.attempt + 1 if current is not None else 1
        asked = Asked(request_name(group, attempt), attempt, group.namespace, len(members), now,
                      preempt_after=now + delay if delay > 0 else 0.0)
        with self._lock:
            self._asked[group.key] = asked
        sets = [(pod.name, count) for pod, count in pod_sets(members)]
        names = [pod.name for pod in members]
        self.worker.submit(lambda: self._create(group, asked, sets, names))
        wait = f"; preemption waits for it until {format_rfc3339(asked.preempt_after)}" \
            if asked.preempt_after else ""
        return f"scale-up: asked {asked.describe()}{wait}", replace(asked)

    def _create(self, group: PodGroup, asked: Asked, sets: list[tuple[str, int]],
                names: list[str]) -> None:
        """PodTemplates (one per shape), the request, then the members' annotations."""
        base = f"/api/v1/namespaces/{group.namespace}"
        try:
            refs = []
            for index, (pod_name, count) in enumerate(sets):
                raw = self.api.get(f"{base}/pods/{pod_name}")
                template = f"{asked.name}-{index}"
                self.api.create(f"{base}/podtemplates", template_body(template, group, raw))
                refs.append((template, count))
            self.api.create(requests_path(group.namespace),
                            request_body(asked.name, group, self.args.provisioning_class, refs))
            for pod_name in names:
                self.api.patch(f"{base}/pods/{pod_name}",
                               consume_patch(asked.name, self.args.provisioning_class))
        except ApiError as err:
            served = "" if not err.not_found else (
                " (is the ProvisioningRequest API autoscaling.x-k8s.io/v1 served? it comes "
                "with the cluster-autoscaler)")
            self._set_state(group.key, asked.name,
                            RequestState(FAILED, "CreateFailed", f"{err}{served}"))

    def _set_state(self, group_key: str, name: str, state: RequestState) -> None:
        with self._lock:
            asked = self._asked.get(group_key)
            if asked is not None and asked.name == name:
                asked.state = state

    def poll(self) -> None:
        """Read every live request's conditions (queued: runs on the worker)."""
        with self._lock:
            if self._polling:
                return
            live = [(k, a.namespace, a.name) for k, a in self._asked.items()
                    if a.state.state not in ENDED]
            if not live:
                return
            self._polling = True
        self.worker.submit(lambda: self._read(live))

    def _read(self, live: list[tuple[str, str, str]]) -> None:
        try:
            for group_key, namespace, name in live:
                try:
                    obj = self.api.get(requests_path(namespace, name))
                except ApiError as err:
                    if not err.not_found:
                        raise
                    continue  # not written yet, or its gang is gone
                self._set_state(group_key, name, request_state(obj))
        finally:
            with self._lock:
                self._polling = False

    def changes(self, now: float) -> list[tuple[str, Asked]]:
        """Requests whose state changed since the last call; an ended one gets its retry
        time and is deleted (the autoscaler no longer guards what it booked)."""
        changed = []
        with self._lock:
            for group_key, asked in self._asked.items():
                if asked.state.state == asked.seen:
                    continue
                asked.seen = asked.state.state
                if asked.state.state == WITHDRAWN:
                    asked.retry_at = now  # should it need room again, it asks at once
                elif asked.state.state in ENDED:
                    backoff = self.args.retry_seconds * 2 ** (asked.attempt - 1)
                    asked.retry_at = now + min(backoff, self.args.max_retry_seconds)
                    path = requests_path(asked.namespace, asked.name)
                    self.worker.submit(partial(self._delete, path))
                changed.append((group_key, replace(asked)))
        return changed

    def _delete(self, path: str) -> None:
        try:
            self.api.delete(path)
        except ApiError as err:
            if not err.not_found:
                raise

    def unanswered(self) -> list[str]:
        """Gangs whose request is not answered yet (housekeeping checks if they are placed)."""
        with self._lock:
            return [k for k, a in self._asked.items()
                    if a.state.state in (PENDING, ACCEPTED) and not a.withdrawing]

    def placed(self, group_key: str, now: float) -> None:
        """The gang was placed: a request not provisioned yet is withdrawn (deleted), so
        that the autoscaler adds no node nobody needs; a provisioned one (which our last
        poll may not have seen yet) is left to be consumed, and goes with its PodGroup."""
        with self._lock:
            asked = self._asked.get(group_key)
            if asked is None or asked.state.state not in (PENDING, ACCEPTED) \
                    or asked.withdrawing:
                return
            asked.withdrawing = True
            name, path = asked.name, requests_path(asked.namespace, asked.name)
        self.worker.submit(lambda: self._withdraw(group_key, name, path, now))

    def _withdraw(self, group_key: str, name: str, path: str, now: float) -> None:
        try:
            state = request_state(self.api.get(path))
        except ApiError as err:
            if not err.not_found:
                raise
            state = RequestState()
        if state.state == PROVISIONED:
            self._set_state(group_key, name, state)
            return
        self._delete(path)
        self._set_state(group_key, name, RequestState(
            WITHDRAWN, "PlacedWithoutIt", "the gang was placed before the request was "
            "provisioned; the request was deleted", now))

    def holds_back_preemption(self, group_key: str, delay: float, now: float) -> bool:
        """Whether the gang waits for a scale-up instead of preempting now: during
        ``delay`` from its request (and before its first one), unless the request ended or
        no scale-up could help."""
        if delay <= 0 or group_key in self.refused:
            return False
        asked = self.of(group_key)
        if asked is None:
            return True  # this attempt asks first
        if asked.state.state in ENDED or asked.state.state == PROVISIONED:
            return False
        return now < asked.preempt_after

    def due(self, now: float) -> list[str]:
        """Gangs to try again now, each once: their wait for a scale-up ran out (they may
        preempt), or their ended request's backoff did (they ask again)."""
        over = []
        with self._lock:
            for group_key, asked in self._asked.items():
                if asked.preempt_after and not asked.delay_told and now >= asked.preempt_after:
                    asked.delay_told = True
                    over.append(group_key)
                elif asked.state.state in ENDED and asked.retry_at and not asked.retry_told \
                        and now >= asked.retry_at:
                    asked.retry_told = True
                    over.append(group_key)
        return over

    def forget(self, group_key: str) -> None:
        """The gang is gone: its request is deleted now (the garbage collector would, by
        its ownerReference, once it has discovered the kind, as it does the templates)."""
        with self._lock:
            asked = self._asked.pop(group_key, None)
        self.refused.pop(group_key, None)
        if asked is not None and asked.state.state not in (*ENDED, WITHDRAWN):
            path = requests_path(asked.namespace, asked.name)
            self.worker.submit(lambda: self._delete(path))

    def provisioned(self, group_key: str) -> bool:
        asked = self.of(group_key)
        return asked is not None and asked.state.state == PROVISIONED

    def report(self, group_key: str) -> tuple[dict[str, Any] | None, dict[str, str] | None]:
        """(status.provisioningRequest, the ScaleUp condition) of a gang, or Nones."""
        asked = self.of(group_key)
        refused = self.refused.get(group_key, "")
        if asked is None:
            if not refused:
                return None, None
            return None, {"type": "ScaleUp", "status": "False", "reason": "NoNodeShapeFits",
                          "message": refused}
        since = asked.state.since or asked.requested
        found: dict[str, Any] = {"name": asked.name, "state": asked.state.state,
                                 "members": asked.members, "attempt": asked.attempt,
                                 "requestedAt": format_rfc3339(asked.requested),
                                 "since": format_rfc3339(since)}
        if asked.state.reason:
            found["reason"] = asked.state.reason
        if asked.state.message:
            found["message"] = asked.state.message
        message = f"{asked.describe()} since {format_rfc3339(since)}"
        if asked.state.state in ENDED:
            when = "after a backoff"
            if asked.retry_at:
                found["retryAt"] = when = format_rfc3339(asked.retry_at)
                when = f"at {when}"
            return found, {"type": "ScaleUp", "status": "False", "reason": asked.state.state,
                           "message": f"{message}; asked again {when}"}
        return found, {"type": "ScaleUp", "status": "True", "reason": asked.state.state,
                       "message": message}


def provisioning_for(api: object, args: ScaleUpArgs) -> tuple[ScaleUps | None,
                                                              ScaleDownGuard | None]:
    """The scale-ups and the node guard the arguments turn on (one worker for both);
    without an API client that can create and delete (a unit test's handle), neither."""
    if not isinstance(api, ProvisioningApi) or not (args.enabled or args.guard_nodes):
        return None, None
    worker = ApiWorker()
    return (ScaleUps(api, args, worker) if args.enabled else None,
            ScaleDownGuard(api, worker) if args.guard_nodes else None)
