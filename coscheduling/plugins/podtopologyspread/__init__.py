"""PodTopologySpread: spread matching pods evenly over topology domains."""

from coscheduling.plugins.podtopologyspread.args import SpreadArgs, validate_args
from coscheduling.plugins.podtopologyspread.plugin import NAME, PodTopologySpread

__all__ = ["NAME", "PodTopologySpread", "SpreadArgs", "validate_args"]
