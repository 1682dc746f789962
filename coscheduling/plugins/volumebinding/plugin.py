"""VolumeBinding: a pod goes only where its claims can be met, and its volumes are bound
before the pod is (PreFilter, Filter, Reserve/Unreserve, PreBind)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.api.volumes import has_claims
from coscheduling.config.errors import as_float, reject_unknown
from coscheduling.framework.interfaces import PreBindPlugin, ReservePlugin
from coscheduling.framework.status import SUCCESS, Status
from coscheduling.plugins.volumebinding.binder import PodClaims, bindings_on, sort_claims
from coscheduling.plugins.volumebinding.claims import ClaimsPlugin
from coscheduling.plugins.volumebinding.prebind import bind_and_wait

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.api.volumes import Claim
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import ApiWriter, Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "VolumeBinding"
STATE_KEY = "VolumeBinding/claims"
DEFAULT_BIND_TIMEOUT = 600.0  # kube-scheduler's bindTimeoutSeconds


def validate_args(raw: Mapping[str, Any], path: str) -> Mapping[str, Any]:
    """``bindTimeoutSeconds`` (default 600): how long PreBind waits for claims to bind."""
    reject_unknown(raw, {"bindTimeoutSeconds"}, path)
    return {"bindTimeoutSeconds": as_float(raw.get("bindTimeoutSeconds", DEFAULT_BIND_TIMEOUT),
                                           f"{path}.bindTimeoutSeconds", minimum=0.0)}


class VolumeBinding(ClaimsPlugin, ReservePlugin, PreBindPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None,
                 handle: Handle | None = None) -> None:
        super().__init__(args, handle)
        self.timeout: float = validate_args(args or {}, "args")["bindTimeoutSeconds"]
        # PreBind writes claimRefs and annotations through the scheduler's client.
        self.api: ApiWriter | None = handle.api if handle is not None else None

    def pre_filter_claims(self, state: CycleState, pod: Pod, claims: list[Claim]) -> Status:
        sorted_claims, why = sort_claims(claims, self.store)
        if sorted_claims is None:
            return Status.unresolvable(why, plugin=NAME)
        state.write(STATE_KEY, sorted_claims)
        return SUCCESS

    def _claims(self, state: CycleState, pod: Pod) -> PodClaims | None:
        claims = state.read(STATE_KEY)
        if claims is None and has_claims(pod):  # Filter without PreFilter (a claimed node)
            self.pre_filter(state, pod)
            claims = state.read(STATE_KEY)
        return claims if isinstance(claims, PodClaims) else None

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        claims = self._claims(state, pod)
        if claims is None:
            return SUCCESS if not has_claims(pod) else Status.unresolvable(
                "the pod's claims could not be read", plugin=NAME)
        labels = node.node.labels if node.node is not None else {}
        chosen, why = bindings_on(claims, self.store, labels, node.name)
        return SUCCESS if chosen is not None else Status.unresolvable(why, plugin=NAME)

    def reserve(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        """Assume the volumes chosen on ``node_name`` (found again: Filter keeps no
        per-node answers), so no other pod is offered them."""
        claims = self._claims(state, pod)
        if claims is None or not claims.to_bind:
            return SUCCESS
        info = self.handle.cache.node(node_name)
        labels = info.node.labels if info is not None and info.node is not None else {}
        chosen, why = bindings_on(claims, self.store, labels, node_name)
        if chosen is None:
            return Status.unschedulable(why, plugin=NAME)
        self.store.assume(pod.key, chosen)
        return SUCCESS

    def unreserve(self, state: CycleState, pod: Pod, node_name: str) -> None:
        self.store.forget(pod.key)

    def pre_bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        chosen = self.store.assumed.get(pod.key)
        if chosen is None or not (chosen.static or chosen.provision):
            return SUCCESS
        client = self.api
        if client is None:
            return Status.error("no API client: volumes cannot be bound", plugin=NAME)
        why = bind_and_wait(client, self.store, chosen, self.timeout)
        if why:
            return Status.error(why, plugin=NAME)
        # The claims are Bound; the assumption goes when the watch sees the pod bound
        # (under the cache lock, where cycles read it), or at Unreserve if the bind fails.
        return SUCCESS
