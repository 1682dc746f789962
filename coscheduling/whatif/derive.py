"""From a manifest a person would apply to the gang it would make: the group object its
operator would create and the pods that would join it, each with the marker that operator
puts on them. Nothing here talks to a cluster; the scheduler reads the result with the same
parsers it reads real objects with (:mod:`coscheduling.groups`, :func:`parse_pod`).

Accepted: a PodGroup (ours, scheduler-plugins' or Volcano's) with its Pods; a Job,
StatefulSet or bare Pods (a group of their own, all of them at once, unless their template
names a group); a JobSet, a LeaderWorkerSet and an MPIJob v2 (the group the scheduler
derives for them, :mod:`coscheduling.groups.derive`: a JobSet whole with a subgroup per
replicated job, one replica of a LeaderWorkerSet, an MPIJob's launcher and workers); a
Kubeflow PyTorchJob or TFJob and a KubeRay RayCluster (a scheduler-plugins PodGroup, as
those operators make one for a gang scheduler); a Volcano Job (a Volcano PodGroup, per-task
minimums as minTaskMember).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from coscheduling import GROUP_API, GROUP_LABEL, GROUP_VERSION
from coscheduling.api.membership import (
    GROUP_NAME_ANNOTATION,
    TASK_SPEC_ANNOTATION,
    X_K8S_LABEL,
    membership,
)
from coscheduling.api.podgroups import SUBGROUP_LABEL
from coscheduling.groups.derive import DerivedGroup, read_workload
from coscheduling.groups.derive import job as derived_job
from coscheduling.groups.derive import jobset as derived_jobset
from coscheduling.groups.derive import lws as derived_lws
from coscheduling.groups.derive import mpijob as derived_mpijob
from coscheduling.groups.derive.job import pods_at_once

Json = dict[str, Any]

OURS_API = f"{GROUP_API}/{GROUP_VERSION}"
X_K8S_API = "scheduling.x-k8s.io/v1alpha1"
VOLCANO_API = "scheduling.volcano.sh/v1beta1"
GROUP_APIS = (OURS_API, X_K8S_API, VOLCANO_API)
KUBEFLOW_REPLICAS = {"PyTorchJob": "pytorchReplicaSpecs", "TFJob": "tfReplicaSpecs"}
MAX_PODS = 10_000
MAX_DEPTH = 64
"""How deeply a manifest may nest. A Job's pod template with affinity terms is about 20 levels
deep; anything much deeper is no workload, and would only cost the recursive steps after
parsing (copies, the pod parser) their stack."""
MAX_VALUES = 1_000_000
"""Values in a manifest with its aliases expanded: YAML aliases can make a few hundred bytes
stand for billions of values."""
# The C parser (libyaml, in the pinned PyYAML wheels) when present: parsing in pure Python
# costs a what-if caller's manifest far more time than placing it.
_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class ManifestError(ValueError):
    """A manifest the what-if cannot read; the message starts with the field's path."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}")
        self.path = path


@dataclass
class Derived:
    """One gang: where it came from, its group object (None: the pods name a group that
    must already exist in the cluster, ``group_key``), and its pods."""

    source: str
    namespace: str
    pods: list[Json]
    group: Json | None = None
    # The workload's name (a group made for it is named after it).
    name: str = ""
    group_key: str = ""
    notes: list[str] = field(default_factory=list)
    # The spec of a group of their own, when the pods name none (None: all of them at once).
    own_spec: Json | None = None


def load_documents(data: bytes) -> list[Json]:
    """Every object of a YAML or JSON stream (``kind: List`` unpacked), in order; a stream
    nested deeper than :data:`MAX_DEPTH` or expanding to more than :data:`MAX_VALUES` values
    is refused."""
    try:
        docs = [d for d in yaml.load_all(data, Loader=_LOADER) if d is not None]
    except RecursionError:  # the pure-Python parser, where libyaml is missing
        raise ManifestError("manifest", f"nested more than {MAX_DEPTH} levels deep, the "
                                        "most a what-if reads") from None
    except (UnicodeDecodeError, yaml.YAMLError) as err:
        raise ManifestError("manifest", f"not YAML or JSON: {_first_line(err)}") from None
    _check_shape(docs)
    objects: list[Json] = []
    for index, doc in enumerate(docs):
        items = doc.get("items") if isinstance(doc, dict) and doc.get("kind") == "List" else [doc]
        for item in items or ():
            if not isinstance(item, dict) or not item.get("kind"):
                raise ManifestError(f"manifest[{index}]", "must be a Kubernetes object "
                                    "with apiVersion and kind")
            objects.append(item)
    if not objects:
        raise ManifestError("manifest", "no object in it")
    return objects


def _first_line(err: Exception) -> str:
    """libyaml's errors span lines ('while scanning ...\n  in "<file>", line 3'): one line."""
    return " ".join(str(err).split())


def _check_shape(docs: list[Any]) -> None:
    """Walk the parsed documents without recursion: refuse them past MAX_DEPTH levels or
    MAX_VALUES values (aliases counted as often as they are used)."""
    stack: list[tuple[Any, int]] = [(doc, 1) for doc in docs]
    seen = 0
    while stack:
        value, depth = stack.pop()
        seen += 1
        if depth > MAX_DEPTH:
            raise ManifestError("manifest", f"nested more than {MAX_DEPTH} levels deep, the "
                                            "most a what-if reads")
        if seen > MAX_VALUES:
            raise ManifestError("manifest", f"more than {MAX_VALUES} values once its aliases "
                                            "are expanded")
        if isinstance(value, dict):
            stack.extend((v, depth + 1) for v in value.values())
        elif isinstance(value, list):
            stack.extend((v, depth + 1) for v in value)


def derive(data: bytes, default_namespace: str = "default") -> Derived:
    """The gang of a manifest (see the module doc); ManifestError names what is wrong, for
    any manifest that is not one (a shape no branch expected included)."""
    try:
        return _derive(data, default_namespace)
    except ManifestError:
        raise
    except (AttributeError, KeyError, TypeError, ValueError, RecursionError) as err:
        raise ManifestError("manifest", f"malformed: {type(err).__name__}: {err}") from None


def _derive(data: bytes, default_namespace: str) -> Derived:
    objects = load_documents(data)
    for index, obj in enumerate(objects):
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) \
                or not meta["name"]:
            raise ManifestError(f"manifest[{index}].metadata.name", "required")
    namespaces = {o["metadata"].get("namespace") or default_namespace for o in objects}
    if len(namespaces) > 1:
        raise ManifestError("manifest[].metadata.namespace",
                            f"a gang lives in one namespace, got {sorted(namespaces)}")
    namespace = namespaces.pop()
    groups = [o for o in objects if o["kind"] == "PodGroup" and o.get("apiVersion") in GROUP_APIS]
    workloads = [o for o in objects if o not in groups]
    if not workloads:
        raise ManifestError("manifest", "no Pod or workload (Job, StatefulSet, JobSet, "
                                        "LeaderWorkerSet, MPIJob, PyTorchJob, TFJob, Volcano "
                                        "Job, RayCluster) to place")
    kinds = {str(o["kind"]) for o in workloads}
    if len(workloads) > 1 and kinds != {"Pod"}:
        named = ", ".join(f"{o['kind']} {o['metadata']['name']}" for o in workloads)
        raise ManifestError("manifest", f"one workload per what-if, got {named}")
    derived = _workload(workloads, namespace)
    derived.name = workloads[0]["metadata"]["name"]
    _attach_group(derived, groups)
    for pod in derived.pods:
        pod["metadata"]["namespace"] = namespace
    return derived


def _within_cap(counts: list[int], where: str) -> None:
    """Refuse a workload of more than MAX_PODS pods before any is made (a 200-byte
    StatefulSet can ask for 200,000 replicas)."""
    total = sum(counts)
    if total > MAX_PODS:
        raise ManifestError(where, f"{total} pods, more than the {MAX_PODS} a what-if places")


def _workload(workloads: list[Json], namespace: str) -> Derived:
    first = workloads[0]
    kind, api = first["kind"], str(first.get("apiVersion") or "")
    name = first["metadata"]["name"]
    if kind == "Pod":
        _within_cap([len(workloads)], "manifest")
        pods = [copy.deepcopy(o) for o in workloads]
        return Derived(f"{len(pods)} Pod(s) in {namespace}", namespace, pods)
    if kind == "Job" and api.startswith("batch/"):
        return _job(first, namespace)
    if kind == "StatefulSet" and api.startswith("apps/"):
        replicas = _count(first, "spec.replicas", 1)
        _within_cap([replicas], "spec.replicas")
        template = _template(first, "spec.template")
        pods = [_pod(template, f"{name}-{i}") for i in range(replicas)]
        return Derived(f"StatefulSet {namespace}/{name} ({replicas} replicas)", namespace, pods)
    if kind == "JobSet" and api.startswith("jobset.x-k8s.io/"):
        return _jobset(first, namespace)
    if kind == "LeaderWorkerSet" and api.startswith("leaderworkerset.x-k8s.io/"):
        return _leaderworkerset(first, namespace)
    if kind == "MPIJob" and api.startswith("kubeflow.org/v2"):
        return _mpijob(first, namespace)
    if kind in KUBEFLOW_REPLICAS and api.startswith("kubeflow.org/"):
        return _kubeflow(first, namespace)
    if kind == "Job" and api.startswith("batch.volcano.sh/"):
        return _volcano_job(first, namespace)
    if kind == "RayCluster" and api.startswith("ray.io/"):
        return _ray_cluster(first, namespace)
    raise ManifestError("manifest.kind", f"{api} {kind} is not a workload the what-if knows "
                                         "(Pod, Job, StatefulSet, JobSet, LeaderWorkerSet, "
                                         "MPIJob, PyTorchJob, TFJob, Volcano Job, RayCluster, "
                                         "with a PodGroup)")


def _job(job: Json, namespace: str) -> Derived:
    name = job["metadata"]["name"]
    _count(job, "spec.parallelism", 1)  # refused by name when malformed
    parallelism = pods_at_once(_spec(job))
    _within_cap([parallelism], "spec.parallelism")
    template = _template(job, "spec.template")
    pods = [_pod(template, f"{name}-{i}") for i in range(parallelism)]
    [group] = derived_job.groups(read_workload({**job, "metadata": {
        **job["metadata"], "namespace": namespace}}))  # its overrides, as the scheduler's
    return Derived(f"Job {namespace}/{name} ({parallelism} pods at once)", namespace, pods,
                   own_spec=_derived_group(group, namespace)["spec"])


def _derived_group(group: DerivedGroup, namespace: str) -> Json:
    """Our PodGroup of a group derived as the scheduler derives it; a malformed override
    is refused naming its annotation."""
    if group.errors:
        first = group.errors[0]
        raise ManifestError(first.split(":", 1)[0], first.split(": ", 1)[-1])
    return {"apiVersion": OURS_API, "kind": "PodGroup",
            "metadata": {"name": group.name, "namespace": namespace}, "spec": group.spec}


def _jobset(obj: Json, namespace: str) -> Derived:
    """Every pod the JobSet runs at once, one gang with a subgroup per replicated job."""
    name = obj["metadata"]["name"]
    replicated = _list(_spec(obj).get("replicatedJobs"), "spec.replicatedJobs")
    entries = [_mapping(raw, f"spec.replicatedJobs[{i}]") for i, raw in enumerate(replicated)]
    for index, entry in enumerate(entries):  # refused by name when malformed
        _count({"spec": entry}, "spec.replicas", 1,
               shown=f"spec.replicatedJobs[{index}].replicas")
    [group] = derived_jobset.groups(read_workload({**obj, "metadata": {
        **obj["metadata"], "namespace": namespace}}))
    per_role = {s["name"]: s["minMember"] for s in group.spec.get("subGroups") or ()}
    counts = [per_role.get(str(entry.get("name") or ""), 0) for entry in entries]
    _within_cap(counts, "spec.replicatedJobs[].replicas")
    pods: list[Json] = []
    parts = []
    for index, (entry, count) in enumerate(zip(entries, counts, strict=True)):
        role = str(entry.get("name") or f"job{index}")
        path = f"spec.replicatedJobs[{index}].template"
        template = _template(_mapping(entry.get("template"), path), "spec.template",
                             shown=f"{path}.spec.template")
        parts.append(f"{count} {role}")
        pods += [_pod(template, f"{name}-{role}-{i}", labels={
            GROUP_LABEL: group.name, SUBGROUP_LABEL: role}) for i in range(count)]
    return Derived(f"JobSet {namespace}/{name} ({', '.join(parts)})", namespace, pods,
                   _derived_group(group, namespace))


def _leaderworkerset(obj: Json, namespace: str) -> Derived:
    """One replica (a leader and its workers): every replica is a gang of its own."""
    name = obj["metadata"]["name"]
    template = _mapping(_spec(obj).get("leaderWorkerTemplate"), "spec.leaderWorkerTemplate")
    size = _count({"spec": template}, "spec.size", 1, shown="spec.leaderWorkerTemplate.size")
    _within_cap([size], "spec.leaderWorkerTemplate.size")
    workload = read_workload({**obj, "metadata": {**obj["metadata"], "namespace": namespace}})
    groups = derived_lws.groups(workload)
    if not groups:
        raise ManifestError("spec.replicas", "no replica to place")
    group = groups[0]
    worker = _template({"spec": template}, "spec.workerTemplate",
                       shown="spec.leaderWorkerTemplate.workerTemplate")
    leader = _template({"spec": template}, "spec.leaderTemplate",
                       shown="spec.leaderWorkerTemplate.leaderTemplate") \
        if template.get("leaderTemplate") else worker
    label = {GROUP_LABEL: group.name}
    pods = [_pod(leader, f"{name}-0", labels=label)]
    pods += [_pod(worker, f"{name}-0-{i}", labels=label) for i in range(1, size)]
    derived = Derived(f"LeaderWorkerSet {namespace}/{name} (replica 0: 1 leader, "
                      f"{size - 1} workers)", namespace, pods,
                      _derived_group(group, namespace))
    replicas = _count(obj, "spec.replicas", 1)
    if replicas > 1:
        derived.notes.append(f"each of the {replicas} replicas is a gang of its own; "
                             "this places one")
    return derived


def _mpijob(obj: Json, namespace: str) -> Derived:
    """The launcher and the workers the MPI operator starts together (the workers alone
    when its launcher waits for them), as the scheduler derives the gang."""
    name = obj["metadata"]["name"]
    specs = _mapping(_spec(obj).get("mpiReplicaSpecs"), "spec.mpiReplicaSpecs")
    [group] = derived_mpijob.groups(read_workload({**obj, "metadata": {
        **obj["metadata"], "namespace": namespace}}))
    members = {s["name"]: s["minMember"] for s in group.spec.get("subGroups") or ()}
    _within_cap(list(members.values()), "spec.mpiReplicaSpecs[].replicas")
    pods: list[Json] = []
    for role, key in derived_mpijob.ROLES.items():
        if not members.get(role):
            continue
        path = f"spec.mpiReplicaSpecs.{key}"
        _count({"spec": _mapping(specs.get(key), path)}, "spec.replicas", 1,
               shown=f"{path}.replicas")  # refused by name when malformed
        template = _template({"spec": specs[key]}, "spec.template", shown=f"{path}.template")
        pods += [_pod(template, f"{name}-{role}-{i}", labels={
            GROUP_LABEL: group.name, SUBGROUP_LABEL: role}) for i in range(members[role])]
    parts = ", ".join(f"{count} {role}" for role, count in members.items())
    return Derived(f"MPIJob {namespace}/{name} ({parts})", namespace, pods,
                   _derived_group(group, namespace))


def _kubeflow(job: Json, namespace: str) -> Derived:
    kind, name = job["kind"], job["metadata"]["name"]
    field_name = KUBEFLOW_REPLICAS[kind]
    specs = _mapping(_spec(job).get(field_name), f"spec.{field_name}")
    roles = [(str(role), _mapping(raw, f"spec.{field_name}.{role}"))
             for role, raw in specs.items()]
    counts = [_count({"spec": replica}, "spec.replicas", 1,
                     shown=f"spec.{field_name}.{role}.replicas") for role, replica in roles]
    _within_cap(counts, f"spec.{field_name}[].replicas")
    pods: list[Json] = []
    parts = []
    for (role, replica), count in zip(roles, counts, strict=True):
        template = _template({"spec": replica}, "spec.template",
                             shown=f"spec.{field_name}.{role}.template")
        parts.append(f"{count} {role}")
        pods += [_pod(template, f"{name}-{role.lower()}-{i}", labels={X_K8S_LABEL: name})
                 for i in range(count)]
    policy = _mapping(_mapping(_spec(job).get("runPolicy") or {}, "spec.runPolicy")
                      .get("schedulingPolicy") or {}, "spec.runPolicy.schedulingPolicy")
    minimum = policy.get("minAvailable", len(pods))
    group = {"apiVersion": X_K8S_API, "kind": "PodGroup",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"minMember": minimum}}
    return Derived(f"{kind} {namespace}/{name} ({', '.join(parts)})", namespace, pods, group)


def _volcano_job(job: Json, namespace: str) -> Derived:
    name = job["metadata"]["name"]
    spec = _spec(job)
    tasks = spec.get("tasks")
    if not isinstance(tasks, list) or not tasks:
        raise ManifestError("spec.tasks", "a Volcano Job needs at least one task")
    entries = [_mapping(raw, f"spec.tasks[{index}]") for index, raw in enumerate(tasks)]
    counts = [_count({"spec": task}, "spec.replicas", 1, shown=f"spec.tasks[{index}].replicas")
              for index, task in enumerate(entries)]
    _within_cap(counts, "spec.tasks[].replicas")
    pods: list[Json] = []
    minimums: dict[str, int] = {}
    parts = []
    for index, (task, count) in enumerate(zip(entries, counts, strict=True)):
        path = f"spec.tasks[{index}]"
        task_name = str(task.get("name") or f"task{index}")
        if "minAvailable" in task:
            minimums[task_name] = _count({"spec": task}, "spec.minAvailable", 1,
                                         shown=f"{path}.minAvailable")
        template = _template({"spec": task}, "spec.template", shown=f"{path}.template")
        parts.append(f"{count} {task_name}")
        pods += [_pod(template, f"{name}-{task_name}-{i}", annotations={
            GROUP_NAME_ANNOTATION: name, TASK_SPEC_ANNOTATION: task_name}) for i in range(count)]
    group_spec: Json = {"minMember": spec.get("minAvailable", len(pods)),
                        "queue": spec.get("queue") or "default"}
    if spec.get("priorityClassName"):
        group_spec["priorityClassName"] = spec["priorityClassName"]
    if minimums:
        group_spec["minTaskMember"] = minimums
    group = {"apiVersion": VOLCANO_API, "kind": "PodGroup",
             "metadata": {"name": name, "namespace": namespace}, "spec": group_spec}
    return Derived(f"Volcano Job {namespace}/{name} ({', '.join(parts)})", namespace, pods,
                   group)


def _ray_cluster(cluster: Json, namespace: str) -> Derived:
    name = cluster["metadata"]["name"]
    spec = _spec(cluster)
    head = _mapping(spec.get("headGroupSpec"), "spec.headGroupSpec")
    label = {X_K8S_LABEL: name}
    template = _template({"spec": head}, "spec.template", shown="spec.headGroupSpec.template")
    workers = [_mapping(raw, f"spec.workerGroupSpecs[{index}]")
               for index, raw in enumerate(_list(spec.get("workerGroupSpecs") or [],
                                                 "spec.workerGroupSpecs"))]
    counts = [_count({"spec": group_spec}, "spec.replicas", 1,
                     shown=f"spec.workerGroupSpecs[{index}].replicas")
              for index, group_spec in enumerate(workers)]
    _within_cap([1, *counts], "spec.workerGroupSpecs[].replicas")
    pods = [_pod(template, f"{name}-head", labels=label)]
    parts = ["1 head"]
    for index, (group_spec, count) in enumerate(zip(workers, counts, strict=True)):
        group_name = str(group_spec.get("groupName") or f"group{index}")
        path = f"spec.workerGroupSpecs[{index}]"
        template = _template({"spec": group_spec}, "spec.template", shown=f"{path}.template")
        parts.append(f"{count} {group_name}")
        pods += [_pod(template, f"{name}-{group_name}-worker-{i}", labels=label)
                 for i in range(count)]
    group = {"apiVersion": X_K8S_API, "kind": "PodGroup",
             "metadata": {"name": name, "namespace": namespace},
             "spec": {"minMember": len(pods)}}
    return Derived(f"RayCluster {namespace}/{name} ({', '.join(parts)})", namespace, pods, group)


def _attach_group(derived: Derived, groups: list[Json]) -> None:
    """Give the gang its group: the operator's (already set), one of the manifest's that the
    pods name, a group the pods name that must exist in the cluster, or one of their own
    (our PodGroup: all of them at once)."""
    keys = {membership(derived.namespace, _labels(p), _annotations(p), _spec(p)).key
            for p in derived.pods}
    if derived.group is not None:
        if groups:
            derived.notes.append("the manifest's PodGroup is not used: the operator makes "
                                 "its own")
        return
    if len(keys) > 1:
        raise ManifestError("metadata.labels", "the pods name several groups: "
                            + ", ".join(sorted(k or "(none)" for k in keys)))
    key = keys.pop()
    if not key:
        if groups:
            raise ManifestError("metadata.labels", f"the pods name no group; label them "
                                f"{GROUP_LABEL}: <the PodGroup's name>")
        name = f"{derived.name or derived.pods[0]['metadata']['name']}-whatif"
        for pod in derived.pods:
            pod["metadata"].setdefault("labels", {})[GROUP_LABEL] = name
        spec = derived.own_spec or {"minMember": len(derived.pods)}
        derived.group = {"apiVersion": OURS_API, "kind": "PodGroup",
                         "metadata": {"name": name, "namespace": derived.namespace},
                         "spec": spec}
        derived.notes.append(f"no group named: {len(derived.pods)} pods as one gang of "
                             f"minMember {spec['minMember']}")
        return
    for group in groups:
        meta = group["metadata"]
        if _group_key(group, derived.namespace) == key:
            derived.group = copy.deepcopy(group)
            derived.group["metadata"] = {"name": meta["name"], "namespace": derived.namespace}
            return
    derived.group_key = key


def _group_key(group: Json, namespace: str) -> str:
    tag = {OURS_API: "", X_K8S_API: "x-k8s", VOLCANO_API: "group-name"}[group["apiVersion"]]
    name = group["metadata"]["name"]
    return f"{namespace}/{name}@{tag}" if tag else f"{namespace}/{name}"


def _pod(template: Json, name: str, labels: Mapping[str, str] | None = None,
         annotations: Mapping[str, str] | None = None) -> Json:
    """A pod from a template, named as its controller would name it."""
    meta = dict(copy.deepcopy(template.get("metadata") or {}))
    meta["name"] = name
    meta["labels"] = {**(meta.get("labels") or {}), **(labels or {})}
    meta["annotations"] = {**(meta.get("annotations") or {}), **(annotations or {})}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": copy.deepcopy(template.get("spec") or {})}


def _spec(obj: Json) -> Json:
    spec = obj.get("spec")
    return spec if isinstance(spec, dict) else {}


def _labels(pod: Json) -> dict[str, str]:
    return dict((pod.get("metadata") or {}).get("labels") or {})


def _annotations(pod: Json) -> dict[str, Any]:
    return dict((pod.get("metadata") or {}).get("annotations") or {})


def _list(value: object, path: str) -> list[Any]:
    if not isinstance(value, list):
        raise ManifestError(path, f"must be a list, got {type(value).__name__}")
    return value


def _mapping(value: object, path: str) -> Json:
    if not isinstance(value, dict):
        raise ManifestError(path, f"must be an object, got {value!r}")
    return value


def _template(obj: Json, path: str, shown: str = "") -> Json:
    template = _spec(obj).get(path.split(".", 1)[1])
    if not isinstance(template, dict) or not isinstance(template.get("spec"), dict):
        raise ManifestError(shown or path, "a pod template with a spec is required")
    containers = template["spec"].get("containers")
    if not isinstance(containers, list) or not containers:
        raise ManifestError(f"{shown or path}.spec.containers", "at least one container")
    return template


def _count(obj: Json, path: str, default: int, shown: str = "") -> int:
    value = _spec(obj).get(path.split(".", 1)[1], default)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ManifestError(shown or path, f"must be an integer >= 0, got {value!r}")
    return value
