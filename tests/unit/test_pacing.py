"""Pace: a costly periodic pass runs again only once it has cost no more than its share."""

from __future__ import annotations

import pytest

from coscheduling.framework.pacing import Pace


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize(("took", "later", "due"), [
    (0.001, 0.0, True),   # cheaper than `cheap`: never held back
    (0.2, 1.0, False),    # 0.2 s at a 5% share: not before 4 s
    (0.2, 3.9, False),
    (0.2, 4.01, True),
    (0.05, 1.0, True),    # 0.05 s: due again after 1 s
])
def test_a_pass_is_due_again_once_it_cost_its_share(took: float, later: float,
                                                    due: bool) -> None:
    clock = Clock()
    pace = Pace(share=0.05, cheap=0.01, clock=clock)
    assert pace.due()
    with pace.run():
        clock.now += took
    clock.now += later
    assert pace.due() is due


def test_share_must_be_a_fraction() -> None:
    with pytest.raises(ValueError, match="share"):
        Pace(share=0)
