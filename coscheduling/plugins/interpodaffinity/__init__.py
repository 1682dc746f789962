"""InterPodAffinity: pod affinity and anti-affinity, both ways, required and preferred."""

from coscheduling.plugins.interpodaffinity.plugin import (
    NAME,
    InterPodAffinity,
    present_pods,
    validate_args,
)

__all__ = ["NAME", "InterPodAffinity", "present_pods", "validate_args"]
