"""VolumeRestrictions: ReadWriteOncePod claims are used by one pod at a time."""

from coscheduling.plugins.volumerestrictions.plugin import NAME, VolumeRestrictions

__all__ = ["NAME", "VolumeRestrictions"]
