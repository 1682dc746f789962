"""NodeAffinity: nodeSelector and required node affinity."""

from coscheduling.plugins.nodeaffinity.plugin import NAME, REASON, NodeAffinity, matches

__all__ = ["NAME", "REASON", "NodeAffinity", "matches"]
