"""Which gang a pod belongs to, read from the markers the producers of gangs put on pods.

A pod may carry several markers (an operator's label and a user's, say); it belongs to the
first in ``PRECEDENCE`` and the others are reported as ignored. The gang key ends with the
marker's tag, so groups of different kinds with the same name never merge.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from coscheduling import GROUP_LABEL
from coscheduling.api.podgroups import SUBGROUP_LABEL, gang_key

NATIVE = "native"  # spec.schedulingGroup.podGroupName: a scheduling.k8s.io PodGroup
SCHEDULER_PLUGINS = "x-k8s"  # label scheduling.x-k8s.io/pod-group
GROUP_NAME = "group-name"  # annotation scheduling.k8s.io/group-name: Volcano or kube-batch
OURS = ""  # label group.batch.scheduler.tencent.com
LABEL_ONLY = "label"  # the first coscheduling plugin's two labels, no object

X_K8S_LABEL = "scheduling.x-k8s.io/pod-group"
GROUP_NAME_ANNOTATION = "scheduling.k8s.io/group-name"
LABEL_ONLY_NAME = "pod-group.scheduling.sigs.k8s.io/name"
LABEL_ONLY_MIN = "pod-group.scheduling.sigs.k8s.io/min-available"
TASK_SPEC_ANNOTATION = "volcano.sh/task-spec"  # a Volcano member's task (its role)

PRECEDENCE = (NATIVE, SCHEDULER_PLUGINS, GROUP_NAME, OURS, LABEL_ONLY)

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


@dataclass(frozen=True, slots=True)
class Membership:
    """The gang a pod belongs to ("" key: none) and how the pod names it."""

    key: str = ""
    tag: str = ""
    name: str = ""
    marker: str = ""  # e.g. "label scheduling.x-k8s.io/pod-group=train", for messages
    min_available: int = 0  # label-only groups: what this pod's min-available label says
    ignored: tuple[str, ...] = ()  # markers of lower precedence the pod also carries
    error: str = ""  # a malformed marker: the pod is refused with this message
    # The member's role, naming its subgroup: our label batch.scheduler.tencent.com/
    # subgroup, or Volcano's annotation volcano.sh/task-spec ("" when it names none).
    role: str = ""
    # The controller the gang counts the pod as owned by, when not the pod's own: a derived
    # group's workload ("Kind/name/uid"), whose pods several controllers make.
    owner: str = ""


NO_GROUP = Membership()


def membership(namespace: str, labels: dict[str, str], annotations: dict[str, Any],
               spec: dict[str, Any]) -> Membership:
    """The pod's gang, from its labels, annotations and spec. A marker with an empty value
    is no marker; a malformed marker is an error only when it is the one the pod follows."""
    found: list[tuple[str, str, str, str]] = []  # (tag, name, marker, error), by precedence
    group_ref = spec.get("schedulingGroup")
    if group_ref is not None:
        name = group_ref.get("podGroupName") if isinstance(group_ref, dict) else None
        if not isinstance(name, str) or not name:
            found.append((NATIVE, "", "spec.schedulingGroup", "spec.schedulingGroup."
                          f"podGroupName: must name a PodGroup, got {name!r}"))
        else:
            found.append((NATIVE, name, f"spec.schedulingGroup.podGroupName={name}", ""))
    if labels.get(X_K8S_LABEL):
        name = labels[X_K8S_LABEL]
        found.append((SCHEDULER_PLUGINS, name, f"label {X_K8S_LABEL}={name}", ""))
    raw_name = annotations.get(GROUP_NAME_ANNOTATION)
    if raw_name:
        marker = f"annotation {GROUP_NAME_ANNOTATION}={raw_name}"
        valid = isinstance(raw_name, str) and len(raw_name) <= 253 and _NAME.match(raw_name)
        found.append((GROUP_NAME, str(raw_name), marker, "" if valid else (
            f"metadata.annotations[{GROUP_NAME_ANNOTATION}]: {raw_name!r} is not a valid "
            "PodGroup name")))
    if labels.get(GROUP_LABEL):
        name = labels[GROUP_LABEL]
        found.append((OURS, name, f"label {GROUP_LABEL}={name}", ""))
    minimum = 0
    if labels.get(LABEL_ONLY_NAME) or labels.get(LABEL_ONLY_MIN):
        name, raw = labels.get(LABEL_ONLY_NAME, ""), labels.get(LABEL_ONLY_MIN, "")
        marker = f"labels {LABEL_ONLY_NAME}={name}, {LABEL_ONLY_MIN}={raw}"
        error = ""
        if not name or not raw:
            missing = LABEL_ONLY_MIN if not raw else LABEL_ONLY_NAME
            error = (f"metadata.labels[{missing}]: a label-only group needs both "
                     f"{LABEL_ONLY_NAME} and {LABEL_ONLY_MIN}")
        elif not raw.isdigit() or int(raw) < 1:
            error = (f"metadata.labels[{LABEL_ONLY_MIN}]: must be an integer >= 1, "
                     f"got {raw!r}")
        else:
            minimum = int(raw)
        found.append((LABEL_ONLY, name, marker, error))
    if not found:
        return NO_GROUP
    tag, name, marker, error = found[0]
    ignored = tuple(m for _, _, m, _ in found[1:])
    if error:
        return Membership(marker=marker, ignored=ignored, error=error)
    return Membership(key=gang_key(namespace, name, tag), tag=tag, name=name, marker=marker,
                      min_available=minimum if tag == LABEL_ONLY else 0, ignored=ignored,
                      role=_role(tag, labels, annotations))


def _role(tag: str, labels: dict[str, str], annotations: dict[str, Any]) -> str:
    """The role a member's producer gave it, read where that producer writes it."""
    if tag == OURS:
        return labels.get(SUBGROUP_LABEL, "")
    if tag == GROUP_NAME:
        task = annotations.get(TASK_SPEC_ANNOTATION)
        return task if isinstance(task, str) else ""
    return ""
