"""NodeUnschedulable: keep pods off cordoned nodes unless they tolerate it."""

from coscheduling.plugins.nodeunschedulable.plugin import NAME, REASON, NodeUnschedulable

__all__ = ["NAME", "REASON", "NodeUnschedulable"]
