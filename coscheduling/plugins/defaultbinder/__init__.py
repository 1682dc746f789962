"""DefaultBinder: binds through the Binding API."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.cycle_state import CycleState
from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import BindPlugin
from coscheduling.framework.status import Status

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod


class DefaultBinder(BindPlugin):
    name = "DefaultBinder"

    def __init__(self, args: Mapping[str, Any], handle: Handle) -> None:
        self.handle = handle

    def bind(self, state: CycleState, pod: Pod, node_name: str) -> Status:
        return self.handle.binder.bind(pod, node_name)


__all__ = ["DefaultBinder"]
