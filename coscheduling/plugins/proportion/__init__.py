"""Queues: the cluster divided between them by weight, gangs admitted by their share."""

from coscheduling.plugins.proportion.plugin import NAME, Proportion

__all__ = ["NAME", "Proportion"]
