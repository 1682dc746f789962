"""NodePorts: host port conflicts."""

from coscheduling.plugins.nodeports.plugin import NAME, REASON, NodePorts, conflicts

__all__ = ["NAME", "REASON", "NodePorts", "conflicts"]
