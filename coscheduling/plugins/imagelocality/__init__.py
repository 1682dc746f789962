"""ImageLocality: prefer nodes that already hold the pod's images."""

from coscheduling.plugins.imagelocality.plugin import NAME, ImageIndex, ImageLocality, priority

__all__ = ["NAME", "ImageIndex", "ImageLocality", "priority"]
