"""batch/v1 Job: a gang of the pods it runs at once.

The Job controller keeps ``parallelism`` pods running, fewer when fewer completions are
left (``completions`` minus those that succeeded), indexed or not. Raising parallelism
while the Job runs raises minMember: the new pods then start together, and the running ones
are never evicted (a raised minimum only changes what a waiting gang needs)."""

from __future__ import annotations

from coscheduling.groups.derive.model import (
    DerivedGroup,
    Member,
    WorkloadKind,
    count,
    mapping,
    shaped,
)
from coscheduling.groups.derive.workload import Json, Workload

PREFIX = "job-"


def pods_at_once(spec: Json, succeeded: int = 0) -> int:
    """How many pods a Job (or a JobSet's Job template) runs at the same time."""
    parallelism = count(spec.get("parallelism"), 1)
    completions = spec.get("completions")
    if isinstance(completions, int) and not isinstance(completions, bool):
        parallelism = min(parallelism, max(1, completions - succeeded))
    return parallelism


def group_name(job: Workload) -> str:
    return f"{PREFIX}{job.name}"


def groups(job: Workload) -> list[DerivedGroup]:
    succeeded = count(job.status.get("succeeded"), 0)
    return [shaped(job, group_name(job), pods_at_once(job.spec, succeeded))]


def member_of(job: Workload, labels: dict[str, str]) -> Member | None:
    return Member(group_name(job))


def templates(job: Workload) -> list[Json]:
    return [mapping(job.spec.get("template"))]


KIND = WorkloadKind("batch/v1", "Job", "jobs", groups, member_of, templates)
