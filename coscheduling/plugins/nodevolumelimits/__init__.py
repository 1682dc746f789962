"""NodeVolumeLimits: CSINode attach limits per driver."""

from coscheduling.plugins.nodevolumelimits.plugin import NAME, NodeVolumeLimits

__all__ = ["NAME", "NodeVolumeLimits"]
