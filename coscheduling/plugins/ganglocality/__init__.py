"""GangLocality: prefer nodes that already hold members of the pod's own gang."""

from coscheduling.plugins.ganglocality.plugin import NAME, GangLocality

__all__ = ["NAME", "GangLocality"]
