"""Priority preemption that never breaks a gang: the victim search and its API side."""

from coscheduling.preemption.evaluator import Preemption, describe_victims
from coscheduling.preemption.search import Victims

__all__ = ["Preemption", "Victims", "describe_victims"]
