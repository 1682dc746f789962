"""NodePorts Filter: a host port (protocol + port) can be bound once per host IP.

A wildcard host IP (``0.0.0.0``, what an empty hostIP means) takes the port on every
address, so it conflicts with any use of that protocol and port, and any use conflicts
with it.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import FilterPlugin, PreFilterPlugin
from coscheduling.framework.status import SKIP, SUCCESS, Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "NodePorts"
REASON = "node(s) didn't have free ports for the requested pod ports"
WILDCARD_IP = "0.0.0.0"

_REJECTED = Status.unschedulable(REASON, plugin=NAME)


def conflicts(
    wanted: tuple[tuple[str, str, int], ...], used: Mapping[tuple[str, str, int], int]
) -> bool:
    """Whether any wanted (hostIP, protocol, port) collides with ports in use on a node.

    ``used`` maps ports to how many pods hold them (entries may linger at 0).
    """
    if not used:
        return False
    for entry in wanted:
        ip, protocol, port = entry
        if ip == WILDCARD_IP or not ip:
            for (_, other_protocol, other_port), count in used.items():
                if count > 0 and other_port == port and other_protocol == protocol:
                    return True
        elif used.get(entry, 0) > 0 or used.get((WILDCARD_IP, protocol, port), 0) > 0:
            return True
    return False


class NodePorts(PreFilterPlugin, FilterPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def pre_filter(self, state: CycleState, pod: Pod) -> Status:
        """Most pods use no host port: skip Filter for them."""
        return SUCCESS if pod.host_ports else SKIP

    def sign(self, pod: Pod) -> Hashable:
        return pod.host_ports

    def filter(self, state: CycleState, pod: Pod, node: NodeInfo) -> Status:
        wanted = pod.host_ports
        if not wanted or not conflicts(wanted, node.ports):
            return SUCCESS
        return _REJECTED
