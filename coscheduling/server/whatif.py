"""The what-if's answer as the Simulate RPC sends it."""

from __future__ import annotations

from collections.abc import Callable

from coscheduling.server.gen import scheduling_pb2 as pb
from coscheduling.whatif.simulate import Answer


def answer_pb(answer: Answer,
              may_see: Callable[[str], bool] = lambda namespace: True) -> pb.SimulateResponse:
    """Every field of ``answer``; amounts in the scheduler's integer units. Victims in a
    namespace ``may_see`` refuses are only counted: a caller limited to some namespaces
    does not learn the pods of others."""
    victims = [v for v in answer.victims if may_see(v.partition("/")[0])]
    hidden = len(answer.victims) - len(victims)
    notes = [*answer.notes, *([f"{hidden} more victim(s) in namespaces outside this "
                               "caller's reach"] if hidden else [])]
    response = pb.SimulateResponse(
        verdict=pb.Verdict.Value(answer.verdict), source=answer.source, group=answer.group,
        min_member=answer.min_member, pods=answer.pods,
        placements=[pb.Placement(pod=pod, node=node) for pod, node in answer.placements],
        domain=answer.domain, reason=answer.reason, notes=notes,
        victims=[_key(v) for v in victims], reserve_nodes=answer.reserve_nodes,
        reservations_ahead=answer.reservations_ahead, estimated_start=answer.estimated_start,
    )
    gap = answer.shortfall
    if gap is not None:
        response.need, response.fit_now, response.fit_empty = gap.need, gap.fit_now, \
            gap.fit_empty
        response.nodes_needed = gap.nodes_needed
        response.shortfall.extend(
            pb.ResourceShortfall(resource=g.resource, need=g.need, free=g.free,
                                 allocatable=g.allocatable, text=g.text())
            for g in gap.resources)
        response.domains.extend(
            pb.DomainShortfall(domain=d.domain, fit_now=d.fit_now, fit_empty=d.fit_empty,
                               need=d.need) for d in gap.domains)
    return response


def _key(pod_key: str) -> pb.ObjectKey:
    namespace, _, name = pod_key.partition("/")
    return pb.ObjectKey(namespace=namespace, name=name)



