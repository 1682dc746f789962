"""PrioritySort QueueSort: higher priority first, then older pods, then by key."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import QueueSortPlugin

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import Handle

NAME = "PrioritySort"


class PrioritySort(QueueSortPlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args; the parameters exist so every plugin builds the same way."""

    def sort_key(self, pod: Pod) -> tuple[int, float, str]:
        # The key makes the order total, so equal pods do not swap between runs.
        return (-pod.priority, pod.created, pod.key)
