"""TaintToleration: untolerated NoSchedule/NoExecute taints filter, PreferNoSchedule scores."""

from coscheduling.plugins.tainttoleration.plugin import NAME, TaintToleration, untolerated

__all__ = ["NAME", "TaintToleration", "untolerated"]
