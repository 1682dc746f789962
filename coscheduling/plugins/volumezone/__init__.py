"""VolumeZone: bound volumes keep their pods in their zones and regions."""

from coscheduling.plugins.volumezone.plugin import NAME, VolumeZone

__all__ = ["NAME", "VolumeZone"]
