"""The running scheduler's side of derived groups (coscheduling.core.derivedgroups): a raised
count is assumed before the PodGroup says it, and older echoes of the PodGroup do not put
it back."""

from __future__ import annotations

import threading
from typing import Any, cast

from coscheduling.api.podgroups import PodGroup, parse_podgroup
from coscheduling.cluster.client import KubeClient
from coscheduling.core.derivedgroups import DerivedGroups
from coscheduling.groups.derive import job, read_workload

NAMES = ("batch-scheduler",)


def _job(parallelism: int) -> Any:
    return read_workload({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "grow", "namespace": "ns", "uid": "u"},
        "spec": {"parallelism": parallelism, "completions": 8, "template": {
            "spec": {"schedulerName": NAMES[0], "containers": [{"name": "c"}]}}}})


def _record(min_member: int) -> PodGroup:
    return parse_podgroup({"metadata": {"name": "job-grow", "namespace": "ns", "uid": "g",
                                        "resourceVersion": "1"},
                           "spec": {"minMember": min_member}})


def test_a_raised_count_is_assumed_and_kept_until_the_podgroup_says_it() -> None:
    records = {"ns/job-grow": _record(2)}
    assumed: list[tuple[int, int]] = []

    def assume(old: PodGroup, new: PodGroup) -> None:
        assumed.append((old.min_member, new.min_member))
        records[new.key] = new

    groups = DerivedGroups(cast(KubeClient, None), None, NAMES, records.get, assume,
                           threading.Event())  # not active: nothing is written
    groups.workload_changed(_job(4), job.KIND)
    assert assumed == [(2, 4)]
    assert records["ns/job-grow"].min_member == 4

    assert groups.corrected(_record(2)).min_member == 4  # an echo older than the write
    assert groups.corrected(_record(4)).min_member == 4  # the write: the assumption ends
    assert groups.corrected(_record(3)).min_member == 3  # a later change is taken as it is

    groups.workload_changed(_job(4), job.KIND)  # the same count: nothing to assume
    assert assumed == [(2, 4)]
