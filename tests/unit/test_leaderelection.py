"""Lease expiry by this replica's own clock (issue 27): the holder's renewTime, written by
another machine's clock, is never compared with ours."""

from __future__ import annotations

import copy
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from coscheduling.cluster import leaderelection
from coscheduling.cluster.client import ApiError
from coscheduling.cluster.leaderelection import LeaderElector
from coscheduling.config.types import LeaderElection


class LeaseStore:
    """One Lease behind the three calls the elector makes."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.lease: dict[str, Any] = {"metadata": {"resourceVersion": "1"}, "spec": spec}

    def get(self, path: str) -> dict[str, Any]:
        return copy.deepcopy(self.lease)

    def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise ApiError(409, "exists")

    def request(self, method: str, path: str, *, body: dict[str, Any]) -> dict[str, Any]:
        version = int(self.lease["metadata"]["resourceVersion"]) + 1
        self.lease = {"metadata": {"resourceVersion": str(version)}, "spec": body["spec"]}
        return copy.deepcopy(self.lease)

    def renew(self, stamp: str) -> None:
        """The holder renews (its clock may say anything)."""
        self.request("PUT", "", body={"spec": {**self.lease["spec"], "renewTime": stamp}})


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    clock = Clock()
    monkeypatch.setattr(leaderelection.time, "monotonic", clock)
    return clock


def _elector(store: LeaseStore) -> LeaderElector:
    settings = LeaderElection(leader_elect=True, lease_duration=15.0, renew_deadline=10.0,
                              retry_period=2.0, resource_namespace="ns", resource_name="l")
    return LeaderElector(store, settings, on_started_leading=lambda: None,  # type: ignore[arg-type]
                         on_stopped_leading=lambda: None, identity="me")


@pytest.mark.parametrize("renewed", [
    "2000-01-01T00:00:00.000000Z",  # the holder's clock far behind ours
    "2999-01-01T00:00:00.000000Z",  # or far ahead
])
def test_a_lease_is_taken_only_after_it_went_unchanged_for_its_duration(
        clock: Clock, renewed: str) -> None:
    store = LeaseStore({"holderIdentity": "other", "renewTime": renewed,
                        "leaseDurationSeconds": 15})
    elector = _elector(store)
    assert not elector._try_acquire_or_renew()  # first seen now: 15 s from now at the soonest
    assert elector.holder() == "other"
    clock.now += 14.9
    assert not elector._try_acquire_or_renew()
    clock.now += 0.2
    assert elector._try_acquire_or_renew()
    assert store.lease["spec"]["holderIdentity"] == "me"


def test_a_holder_that_keeps_renewing_is_never_deposed(clock: Clock) -> None:
    store = LeaseStore({"holderIdentity": "other", "renewTime": "2000-01-01T00:00:00.000000Z",
                        "leaseDurationSeconds": 15})
    elector = _elector(store)
    for second in range(60):
        store.renew(f"2000-01-01T00:00:{second:02d}.000000Z")  # a stopped clock, still renewing
        assert not elector._try_acquire_or_renew()
        clock.now += 2


class PausingStop:
    """The elector's stop event, whose waits take ``pause`` seconds of the clock (a replica
    stopped or starved between two renewals)."""

    def __init__(self, clock: Clock, pause: float) -> None:
        self.clock, self.pause = clock, pause

    def is_set(self) -> bool:
        return False

    def wait(self, timeout: float) -> bool:
        self.clock.now += self.pause
        return False


def test_a_leader_paused_past_its_renew_deadline_ends_its_term_before_renewing(
        clock: Clock) -> None:
    """It must not renew and carry on with what it decided in the old term (another replica
    may have led meanwhile), even when the Lease is its to take again."""
    store = LeaseStore({"holderIdentity": "", "leaseDurationSeconds": 15})
    stopped: list[bool] = []
    elector = _elector(store)
    elector.on_stopped_leading = lambda: stopped.append(True)
    elector._stop = PausingStop(clock, pause=11.0)  # type: ignore[assignment]
    renewals = 0
    take = elector._try_acquire_or_renew

    def counted() -> bool:
        nonlocal renewals
        renewals += 1
        return take()

    elector._try_acquire_or_renew = counted  # type: ignore[method-assign]
    elector._run()  # acquires, is paused 11 s (renewDeadline 10 s), then ends its term
    assert renewals == 1 and stopped == [True] and not elector.leading.is_set()
    assert not elector.holds_lease()


# -- an exception in the election thread ends leadership and the process --------------------
class FailingStore(LeaseStore):
    """A Lease whose ``fail_at``-th read raises OverflowError (what a huge Content-Length
    raised in the client once); every other call works."""

    def __init__(self, fail_at: int) -> None:
        super().__init__({"holderIdentity": "", "leaseDurationSeconds": 15})
        self.reads, self.fail_at = 0, fail_at

    def get(self, path: str) -> dict[str, Any]:
        self.reads += 1
        if self.reads == self.fail_at:
            raise OverflowError("cannot fit 'int' into an index-sized integer")
        return super().get(path)


FAST = LeaderElection(leader_elect=True, lease_duration=15.0, renew_deadline=10.0,
                      retry_period=0.01, resource_namespace="ns", resource_name="l")


def test_the_failed_thread_ends_the_term_tells_the_service_and_hands_the_lease_back() -> None:
    """The real thread: on_stopped_leading is what makes `run` and `serve` exit 1."""
    store = FailingStore(fail_at=3)  # leads after read 1, fails at the second renewal
    stopped = threading.Event()
    elector = LeaderElector(store, FAST, on_started_leading=lambda: None,  # type: ignore[arg-type]
                            on_stopped_leading=stopped.set, identity="me")
    elector.start()
    try:
        assert stopped.wait(5)
        assert not elector.leading.is_set() and not elector.holds_lease()
        assert store.lease["spec"]["holderIdentity"] == ""  # handed back
    finally:
        elector.stop()
    assert not elector._thread.is_alive()  # stop() (every shutdown's) lets it end at once


EXITING = """
import logging, sys, threading
from coscheduling.cluster import leaderelection
from tests.unit.test_leaderelection import FAST, FailingStore

def stopped() -> None:
    if sys.argv[1] == "raises":
        raise RuntimeError("the service could not stop either")

logging.basicConfig(level=logging.INFO)
leaderelection.EXIT_AFTER_FAILURE = 0.5
leaderelection.LeaderElector(FailingStore(fail_at=3), FAST, identity="me",
                             on_started_leading=lambda: None,
                             on_stopped_leading=stopped).start()
threading.Event().wait(60)  # a main thread that never looks: only the elector can end it
"""


@pytest.mark.parametrize(("stopping", "said"), [
    ("returns", "the process did not stop within 0.5s of the election failing; exiting"),
    ("raises", "stopping after the election failed did not work either"),
])
def test_a_process_nothing_else_stops_is_ended_by_the_elector(stopping: str,
                                                              said: str) -> None:
    done = subprocess.run([sys.executable, "-c", EXITING, stopping], capture_output=True,
                          text=True, timeout=30, cwd=Path(__file__).parents[2])
    assert done.returncode == leaderelection.FAILURE_EXIT_CODE == 1, done.stderr
    assert "leader election failed (OverflowError: cannot fit 'int'" in done.stderr
    assert said in done.stderr, done.stderr
