"""Writes Queue status (deserved, allocated, pending, running) through the status
subresource, coalesced the same way as PodGroup status: a queue marked dirty is written at
most once per ``min_interval``, and only when its status changed."""

from __future__ import annotations

import time
from typing import Any

from coscheduling import GROUP_API, GROUP_VERSION
from coscheduling.api.queues import PLURAL
from coscheduling.cluster.client import q
from coscheduling.cluster.groupstatus import CoalescingWriter


class QueueStatusWriter(CoalescingWriter[dict[str, Any]]):
    """Keys are Queue names (cluster-scoped); the status has no conditions."""

    def _write(self, key: str) -> None:
        status = self.status_of(key)
        if status is None:
            self._written.pop(key, None)
            return
        if self._written.get(key) == status:
            return
        now = self._last_write[key] = time.monotonic()
        # A merge patch would leave resources that dropped to zero behind: replace them.
        self.client.patch(f"/apis/{GROUP_API}/{GROUP_VERSION}/{PLURAL}/{q(key)}/status",
                          [{"op": "add", "path": "/status", "value": status}],
                          kind="json")
        self._written[key] = status
        self.writes += 1
        self.history.append((key, now))
