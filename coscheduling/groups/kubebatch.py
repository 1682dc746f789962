"""kube-batch PodGroups (scheduling.incubator.k8s.io/v1alpha1), as seed 000's tutorial and
the old tf-operator create them. Pods name them with the annotation Volcano reads too
(``scheduling.k8s.io/group-name``): when both kinds of object exist under one name, the
Volcano one is used. Status is written in the same admission vocabulary as Volcano's."""

from __future__ import annotations

from typing import Any

from coscheduling.api.membership import GROUP_NAME
from coscheduling.api.podgroups import PodGroup, new_record
from coscheduling.groups import volcano
from coscheduling.groups.source import GroupApi

GROUP, VERSION = "scheduling.incubator.k8s.io", "v1alpha1"


def parse(obj: dict[str, Any]) -> PodGroup:
    group, spec, errors = new_record(obj, GROUP_NAME, f"{GROUP}/{VERSION}")
    volcano.read_admission_fields(group, spec, errors)
    group.errors = tuple(errors)
    return group


API = GroupApi(title=f"kube-batch PodGroup ({GROUP}/{VERSION})", group=GROUP, version=VERSION,
               tag=GROUP_NAME, parse=parse, shape=volcano.shape, rank=1,
               reports_admission=True,
               status_on_object_fallback=True, scheduler_name="kube-batch")
