"""The start-up clock: phases in the order marked, adding up to the time since the process
started (read from /proc, so the interpreter and imports count too)."""

from __future__ import annotations

import pytest

from coscheduling.service.startup import StartupClock, process_age


def test_phases_are_named_in_order_and_add_up() -> None:
    clock = StartupClock()
    for phase in ("configuration", "lists"):
        clock.mark(phase)
    names = [name for name, _ in clock.phases]
    assert names == ["interpreter and imports", "configuration", "lists"]
    assert sum(seconds for _, seconds in clock.phases) == pytest.approx(clock.elapsed)
    assert all(seconds >= 0 for _, seconds in clock.phases)
    assert clock.summary().startswith(f"{clock.elapsed:.2f} s from process start (")


def test_the_first_phase_starts_at_the_process_start() -> None:
    age = process_age()
    assert age is not None and age > 0  # this test process started before this line
    clock = StartupClock()
    assert clock.phases[0][1] >= age
