"""NodeName: a pod that names its node in spec.nodeName fits only there."""

from coscheduling.plugins.nodename.plugin import NAME, REASON, NodeName

__all__ = ["NAME", "REASON", "NodeName"]
