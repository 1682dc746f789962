"""The scheduling framework: extension-point interfaces, statuses and the plugin runtime.

Plugins implement one small interface per extension point; :class:`Framework` runs the
plugins a profile enables, in order, and times every extension point.
"""

from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import (
    BindPlugin,
    ClusterEventsPlugin,
    FilterPlugin,
    PermitPlugin,
    Plugin,
    PostBindPlugin,
    PostFilterPlugin,
    PreBindPlugin,
    PreFilterPlugin,
    QueueSortPlugin,
    ReservePlugin,
    ScorePlugin,
)
from coscheduling.framework.status import Code, Status

__all__ = [
    "BindPlugin",
    "ClusterEventsPlugin",
    "Code",
    "CycleState",
    "FilterPlugin",
    "Handle",
    "PermitPlugin",
    "Plugin",
    "PostBindPlugin",
    "PostFilterPlugin",
    "PreBindPlugin",
    "PreFilterPlugin",
    "QueueSortPlugin",
    "ReservePlugin",
    "ScorePlugin",
    "Status",
]
