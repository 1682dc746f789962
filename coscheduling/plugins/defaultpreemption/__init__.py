"""DefaultPreemption: a pod that fits nowhere evicts lower-priority pods to make room."""

from coscheduling.plugins.defaultpreemption.plugin import NAME, DefaultPreemption

__all__ = ["NAME", "DefaultPreemption"]
