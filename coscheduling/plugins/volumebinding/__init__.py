"""VolumeBinding: claims decide where a pod may run, and are bound before the pod."""

from coscheduling.plugins.volumebinding.plugin import NAME, VolumeBinding, validate_args

__all__ = ["NAME", "VolumeBinding", "validate_args"]
