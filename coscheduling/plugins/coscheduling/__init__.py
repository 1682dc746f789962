"""The gang plugin: PodGroups scheduled all or nothing."""

from coscheduling.plugins.coscheduling.args import CoschedulingArgs, validate_args
from coscheduling.plugins.coscheduling.manager import GangManager, GangState
from coscheduling.plugins.coscheduling.plugin import Coscheduling

__all__ = ["Coscheduling", "CoschedulingArgs", "GangManager", "GangState", "validate_args"]
