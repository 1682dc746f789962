"""DRF: gangs ordered by priority, then dominant resource share, then age."""

from coscheduling.plugins.drf.plugin import DRF, NAME, dominant_share

__all__ = ["DRF", "NAME", "dominant_share"]
