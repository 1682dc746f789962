"""A PodGroup's phase as its members run and end one by one: it moves forward only."""

from __future__ import annotations

import pytest

from coscheduling.api import podgroups as pg
from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod
from coscheduling.plugins.coscheduling.manager import GangCounts
from coscheduling.plugins.coscheduling.status import GroupView, Tally, gang_phase


def _phase(running: int, succeeded: int, bound_idle: int, min_member: int = 4) -> str:
    """The phase of a gang whose ``running`` members run, ``succeeded`` ended well and
    ``bound_idle`` are bound but not started."""
    members = [Pod(namespace="ns", name=f"m{i}", uid=f"u{i}", node_name="n",
                   phase="Running" if i < running else "Pending")
               for i in range(running + bound_idle)]
    finished = {f"ns/done{i}": "Succeeded" for i in range(succeeded)}
    view = GroupView(PodGroup(namespace="ns", name="g", min_member=min_member), members,
                     finished, GangCounts(len(members), len(members), 0, 0, []), None,
                     0.0, "", 0.0)
    return gang_phase(view, Tally.of(view))


@pytest.mark.parametrize(("running", "succeeded", "bound_idle", "phase"), [
    (0, 0, 4, pg.PHASE_SCHEDULED),   # bound, not started
    (2, 0, 2, pg.PHASE_SCHEDULED),   # half started
    (4, 0, 0, pg.PHASE_RUNNING),
    (3, 1, 0, pg.PHASE_RUNNING),     # one ended: still running as a gang
    (1, 3, 0, pg.PHASE_RUNNING),
    (0, 4, 0, pg.PHASE_FINISHED),
])
def test_phase_follows_the_members_forward(running: int, succeeded: int, bound_idle: int,
                                           phase: str) -> None:
    assert _phase(running, succeeded, bound_idle) == phase
