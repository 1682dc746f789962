"""The scheduling queue: ordering, backoff, parking and event-driven moves."""

from __future__ import annotations

from coscheduling.api.pods import Pod
from coscheduling.core.queue import ACTIVE, BACKOFF, UNSCHEDULABLE, SchedulingQueue


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _pod(name: str, priority: int = 0, group: str = "") -> Pod:
    labels = {"group.batch.scheduler.tencent.com": group} if group else {}
    return Pod("ns", name, uid=name, priority=priority, labels=labels)


def _queue(clock: Clock) -> SchedulingQueue:
    return SchedulingQueue(lambda p: (-p.priority, p.name), initial_backoff=1, max_backoff=10,
                           max_unschedulable_seconds=300, clock=clock)


def test_pops_by_sort_key() -> None:
    queue = _queue(Clock())
    for pod in (_pod("b"), _pod("a"), _pod("z", priority=10)):
        queue.add(pod)
    assert [queue.pop(0).key for _ in range(3)] == ["ns/z", "ns/a", "ns/b"]  # type: ignore[union-attr]
    assert queue.pop(0) is None


def test_unschedulable_waits_for_an_event_then_respects_backoff() -> None:
    clock = Clock()
    queue = _queue(clock)
    queue.add(_pod("a"))
    popped = queue.pop(0)
    assert popped is not None
    queue.requeue(popped.pod, "no room", unschedulable=True)
    assert queue.get("ns/a").where == UNSCHEDULABLE  # type: ignore[union-attr]
    assert queue.pop(0) is None
    queue.move()
    assert queue.get("ns/a").where == BACKOFF  # type: ignore[union-attr]
    clock.t += 1.01
    assert queue.pop(0).key == "ns/a"  # type: ignore[union-attr]


def test_event_during_the_attempt_is_not_lost() -> None:
    clock = Clock()
    queue = _queue(clock)
    queue.add(_pod("a"))
    popped = queue.pop(0)
    assert popped is not None
    queue.move()  # e.g. a node was added while "a" was being scheduled
    queue.requeue(popped.pod, "no room", unschedulable=True)
    assert queue.get("ns/a").where == BACKOFF  # type: ignore[union-attr]


def test_backoff_doubles_and_caps() -> None:
    clock = Clock()
    queue = _queue(clock)
    queue.add(_pod("a"))
    waits = []
    for _ in range(6):
        popped = queue.pop(0)
        assert popped is not None
        queue.requeue(popped.pod, "error", unschedulable=False)
        entry = queue.get("ns/a")
        assert entry is not None
        waits.append(entry.backoff_until - clock.t)
        clock.t = entry.backoff_until
    assert waits == [1, 2, 4, 8, 10, 10]


def test_move_keys_and_stale_flush() -> None:
    clock = Clock()
    queue = _queue(clock)
    for name in ("a", "b"):
        queue.add(_pod(name, group="g"))
        popped = queue.pop(0)
        assert popped is not None
        queue.requeue(popped.pod, "x", unschedulable=True)
    assert queue.move_keys(["ns/a"], skip_backoff=True) == 1
    assert queue.get("ns/a").where == ACTIVE  # type: ignore[union-attr]
    clock.t += 301
    assert queue.flush_stale() == 1
    assert queue.counts()[UNSCHEDULABLE] == 0


def _failed(queue: SchedulingQueue, name: str, *, unschedulable: bool) -> None:
    """``name`` tried and failed, with an event during its attempt (so it backs off)."""
    queue.add(_pod(name))
    popped = queue.pop(0)
    assert popped is not None and popped.key == f"ns/{name}"
    queue.move()
    queue.requeue(popped.pod, "no room" if unschedulable else "error",
                  unschedulable=unschedulable)
    assert queue.get(f"ns/{name}").where == BACKOFF  # type: ignore[union-attr]


def test_an_idle_loop_takes_a_backing_off_pod_at_once_but_not_one_an_error_failed() -> None:
    """Nothing active: the pod whose backoff ends first comes at once (kube-scheduler's
    pop from backoffQ), unless its attempt failed by an error; an active pod comes first."""
    clock = Clock()
    queue = _queue(clock)
    _failed(queue, "unfit", unschedulable=True)
    _failed(queue, "errored", unschedulable=False)
    queue.add(_pod("fresh"))
    assert queue.pop(0).key == "ns/fresh"  # type: ignore[union-attr]
    assert queue.pop(0).key == "ns/unfit"  # type: ignore[union-attr]
    assert queue.pop(0) is None  # "errored" waits out its backoff
    clock.t += 1.01
    assert queue.pop(0).key == "ns/errored"  # type: ignore[union-attr]


def _aged(queue: SchedulingQueue, clock: Clock, *names: str) -> None:
    """``names`` failed five times with an event during each attempt (their backoff is the
    longest, 10 s) and have waited longer than that since they were queued."""
    for name in names:
        queue.add(_pod(name))
    clock.t += 5
    keys = {f"ns/{name}" for name in names}
    for _ in range(5):
        queue.move_keys(keys, skip_backoff=True)
        tried = [queue.pop(0) for _ in names]
        assert {q.key for q in tried if q is not None} == keys
        queue.move()
        for queued in reversed(tried):  # the last in queue order backs off first
            queue.requeue(queued.pod, "no room", unschedulable=True)  # type: ignore[union-attr]
    clock.t += 6
    for name in names:
        entry = queue.get(f"ns/{name}")
        assert entry is not None and entry.where == BACKOFF and entry.backoff_until > clock.t


def test_room_freed_goes_to_an_aged_pod_before_newer_active_ones() -> None:
    """A pod waiting longer than the longest backoff comes first in queue order when room is
    freed (once per room-freeing move); otherwise newer active pods come first."""
    clock = Clock()
    queue = _queue(clock)
    _aged(queue, clock, "a")
    _failed(queue, "b", unschedulable=True)  # young: backing off 1 s
    for name in ("c", "d", "e"):
        queue.add(_pod(name))
    queue.move()  # no room freed: the active pods come first
    assert queue.pop(0).key == "ns/c"  # type: ignore[union-attr]
    queue.move(room_freed=True)
    order = [queue.pop(0).key for _ in range(4)]  # type: ignore[union-attr]
    assert order == ["ns/a", "ns/d", "ns/e", "ns/b"]


def test_the_idle_loop_takes_aged_pods_first_in_queue_order() -> None:
    clock = Clock()
    queue = _queue(clock)
    _aged(queue, clock, "z", "y")  # "z"'s backoff ends first, "y" is first in queue order
    _failed(queue, "x", unschedulable=True)  # its backoff ends first
    _failed(queue, "w", unschedulable=False)  # an error: waits its backoff out
    assert [queue.pop(0).key for _ in range(3)] == [  # type: ignore[union-attr]
        "ns/y", "ns/z", "ns/x"]
    assert queue.pop(0) is None


def test_the_age_heaps_drop_the_entries_of_pods_whose_backoff_ended() -> None:
    """Entries of pods a flush moved to active go at the next push once they are half of a
    heap: the heaps stay as large as the pods backing off, however long the loop never
    idles."""
    clock = Clock()
    queue = _queue(clock)
    for index in range(300):
        _failed(queue, f"p{index:03d}", unschedulable=True)
    clock.t += 2  # their backoff ends
    for _ in range(300):
        popped = queue.pop(0)
        assert popped is not None
        queue.done(popped.key)
    assert len(queue._young) == 300  # stale: nothing looked at them yet
    _failed(queue, "q", unschedulable=True)
    assert [key for _, _, key in queue._young] == ["ns/q"]
