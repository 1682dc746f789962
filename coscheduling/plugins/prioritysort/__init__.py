"""PrioritySort: the queue order of kube-scheduler."""

from coscheduling.plugins.prioritysort.plugin import NAME, PrioritySort

__all__ = ["NAME", "PrioritySort"]
