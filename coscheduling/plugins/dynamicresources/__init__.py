"""DynamicResources: devices of ResourceSlices allocated to pods' ResourceClaims."""

from coscheduling.plugins.dynamicresources.plugin import NAME, DynamicResources

__all__ = ["NAME", "DynamicResources"]
