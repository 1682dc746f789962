"""The scheduler's records are the same whether the API server sends an object as JSON or as
protobuf: random pods and nodes, and objects of every other kind the scheduler reads as
protobuf, are created in the real API server, then read both ways (one list at one
resourceVersion, and the watch) and compared record by record (every field of every record)
and dict by dict (every value JSON has, protobuf has too, but the fields
``protobuf.SKIPPED`` leaves out; what protobuf adds is a zero value)."""

from __future__ import annotations

import dataclasses
import itertools
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduling.cluster import protobuf
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.informer import Informer
from coscheduling.groups.table import KindTable
from coscheduling.service.wiring import _watches
from tests.integration.kube import bound_count, create_pod, create_podgroup, pod_body

Json = dict[str, Any]
SKIPPED_NAMES = frozenset().union(*protobuf.SKIPPED.values())
DRA = "/apis/resource.k8s.io/v1"

words = st.sampled_from(["a", "b", "web", "g1", "zone-1", "x.y"])
label_keys = st.sampled_from([
    "app", "tier", "topology.kubernetes.io/zone", "group.batch.scheduler.tencent.com",
    "scheduling.x-k8s.io/pod-group", "batch.scheduler.tencent.com/subgroup",
    "pod-group.scheduling.sigs.k8s.io/name", "pod-group.scheduling.sigs.k8s.io/min-available"])
annotation_keys = st.sampled_from([
    "scheduling.k8s.io/group-name", "volcano.sh/task-spec", "note",
    "batch.scheduler.tencent.com/expected-runtime"])
annotation_values = st.sampled_from(["g1", "ps", "120", "1h", "worker", "2"])
quantities = st.sampled_from(["100m", "1", "2500m", "64Mi", "1Gi", "0", "1.5", "3e3"])
requirements = st.fixed_dictionaries(
    {"key": label_keys, "operator": st.sampled_from(["In", "NotIn"]),
     "values": st.lists(words, min_size=1, max_size=3)})
exists = st.fixed_dictionaries(
    {"key": label_keys, "operator": st.sampled_from(["Exists", "DoesNotExist"])})
terms = st.fixed_dictionaries({"matchExpressions": st.lists(st.one_of(requirements, exists),
                                                            min_size=1, max_size=3)})
selectors = st.fixed_dictionaries({}, optional={
    "matchLabels": st.dictionaries(label_keys, words, max_size=2),
    "matchExpressions": st.lists(requirements, max_size=2)})
pod_terms = st.fixed_dictionaries(
    {"labelSelector": selectors, "topologyKey": st.sampled_from(
        ["kubernetes.io/hostname", "topology.kubernetes.io/zone"])},
    optional={"namespaces": st.lists(words, max_size=2),
              "matchLabelKeys": st.lists(st.just("app"), max_size=1)})
affinities = st.fixed_dictionaries({}, optional={
    "nodeAffinity": st.fixed_dictionaries({}, optional={
        "requiredDuringSchedulingIgnoredDuringExecution": st.fixed_dictionaries(
            {"nodeSelectorTerms": st.lists(terms, min_size=1, max_size=2)}),
        "preferredDuringSchedulingIgnoredDuringExecution": st.lists(st.fixed_dictionaries(
            {"weight": st.integers(1, 100), "preference": terms}), max_size=2)}),
    "podAffinity": st.fixed_dictionaries({}, optional={
        "requiredDuringSchedulingIgnoredDuringExecution": st.lists(pod_terms, max_size=2)}),
    "podAntiAffinity": st.fixed_dictionaries({}, optional={
        "preferredDuringSchedulingIgnoredDuringExecution": st.lists(st.fixed_dictionaries(
            {"weight": st.integers(1, 100), "podAffinityTerm": pod_terms}), max_size=2)}),
})
tolerations = st.one_of(
    st.fixed_dictionaries({"key": label_keys, "operator": st.just("Exists")},
                          optional={"effect": st.sampled_from(["NoSchedule", "PreferNoSchedule"])}),
    st.fixed_dictionaries({"key": label_keys, "operator": st.just("Equal"), "value": words,
                           "effect": st.just("NoExecute"),
                           "tolerationSeconds": st.integers(0, 600)}))
spread = st.fixed_dictionaries(
    {"maxSkew": st.integers(1, 3), "topologyKey": st.just("topology.kubernetes.io/zone"),
     "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
     "labelSelector": selectors},
    optional={"matchLabelKeys": st.lists(st.just("tier"), max_size=1),
              "nodeAffinityPolicy": st.sampled_from(["Honor", "Ignore"])})
resources = st.fixed_dictionaries({}, optional={
    "requests": st.dictionaries(st.sampled_from(["cpu", "memory", "ephemeral-storage"]),
                                quantities, max_size=3)})
volumes = st.sampled_from([
    {"emptyDir": {}},
    {"configMap": {"name": "settings", "optional": True}},
    {"persistentVolumeClaim": {"claimName": "data"}},
    {"ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}}},
    {"image": {"reference": "example.com/model:v1", "pullPolicy": "IfNotPresent"}},
    {"secret": {"secretName": "token"}},
])
images = st.sampled_from(["busybox", "registry.k8s.io/pause:3.10", "example.com/a/b:1",
                          "localhost:5000/train"])


@st.composite
def containers(draw: st.DrawFn, prefix: str, sidecar: bool = False) -> list[Json]:
    made = []
    for index in range(draw(st.integers(1, 3))):
        container: Json = {"name": f"{prefix}{index}", "image": draw(images),
                           "resources": draw(resources),
                           "env": [{"name": "A", "value": draw(words)}],
                           "command": ["sleep", "1"]}
        if draw(st.booleans()):
            container["ports"] = [{"containerPort": 8000 + index,
                                   "protocol": draw(st.sampled_from(["TCP", "UDP"])),
                                   **({"hostPort": 9000 + index} if draw(st.booleans())
                                      else {})}]
        if sidecar and draw(st.booleans()):
            container["restartPolicy"] = "Always"
        made.append(container)
    return made


@st.composite
def pod_specs(draw: st.DrawFn) -> Json:
    spec: Json = {"containers": draw(containers("c")),
                  "schedulerName": draw(st.sampled_from(["coscheduling", "default-scheduler"]))}
    optional: dict[str, st.SearchStrategy[Any]] = {
        "initContainers": containers("i", sidecar=True),
        "nodeSelector": st.dictionaries(label_keys, words, max_size=2),
        "tolerations": st.lists(tolerations, max_size=3),
        "affinity": affinities,
        "topologySpreadConstraints": st.lists(spread, max_size=2),
        "schedulingGates": st.just([{"name": "example.com/wait"}]),
        "priorityClassName": st.sampled_from(["wire-high", "wire-never"]),
        "activeDeadlineSeconds": st.integers(1, 10**6),
        "nodeName": st.just("wire-node-0"),
        "resourceClaims": st.sampled_from([
            [{"name": "gpu", "resourceClaimName": "wire-claim"}],
            [{"name": "gpu", "resourceClaimTemplateName": "wire-template"}]]),
        "resources": st.fixed_dictionaries({"requests": st.fixed_dictionaries(
            {"cpu": st.sampled_from(["4", "8"])})}),
    }
    for field, strategy in optional.items():
        if draw(st.booleans()):
            spec[field] = draw(strategy)
    chosen = draw(st.lists(volumes, max_size=3))
    if chosen:
        spec["volumes"] = [{"name": f"v{i}", **v} for i, v in enumerate(chosen)]
    return spec


pods = st.fixed_dictionaries({
    "labels": st.dictionaries(label_keys, words, max_size=4),
    "annotations": st.dictionaries(annotation_keys, annotation_values, max_size=3),
    "owned": st.booleans(), "spec": pod_specs(),
    "status": st.one_of(st.none(), st.fixed_dictionaries(
        {"phase": st.sampled_from(["Pending", "Running", "Succeeded", "Failed"]),
         "startTime": st.just("2026-11-27T10:00:00Z"),
         "conditions": st.just([{"type": "Ready", "status": "True"}])})),
})

nodes = st.fixed_dictionaries({
    "labels": st.dictionaries(label_keys, words, max_size=4),
    "taints": st.lists(st.fixed_dictionaries(
        {"key": label_keys, "effect": st.sampled_from(["NoSchedule", "NoExecute",
                                                       "PreferNoSchedule"])},
        optional={"value": words}), max_size=3, unique_by=lambda t: (t["key"], t["effect"])),
    "unschedulable": st.booleans(),
    "allocatable": st.fixed_dictionaries({}, optional={
        "cpu": st.sampled_from(["4", "7500m", "96"]),
        "memory": st.sampled_from(["16Gi", "1000000k", "512Mi"]),
        "pods": st.sampled_from(["110", "0", "250"]),
        "nvidia.com/gpu": st.sampled_from(["2", "8"]),
        "hugepages-2Mi": st.sampled_from(["0", "2Mi", "1Gi"])}),
    "images": st.lists(st.fixed_dictionaries(
        {"names": st.lists(images, min_size=1, max_size=2),
         "sizeBytes": st.integers(0, 10**10)}), max_size=3),
})


def test_records_from_protobuf_equal_those_from_json(
        kube: KubeClient, namespace: str, wait_for: Callable[..., Any]) -> None:
    prefix = f"wire-{uuid.uuid4().hex[:6]}"
    _fixed_objects(kube, namespace, prefix)
    owner = kube.create(f"/api/v1/namespaces/{namespace}/configmaps",
                        {"metadata": {"name": "owner"}})["metadata"]
    watched = _start_informers(kube)
    counter = itertools.count()
    created = {"pods": 0, "nodes": 0}

    @settings(max_examples=80, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(pods)
    def one_pod(pod: Json) -> None:
        name = f"p{next(counter)}"
        meta: Json = {"name": name, "labels": pod["labels"], "annotations": pod["annotations"]}
        if pod["owned"]:
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "ConfigMap",
                                        "name": "owner", "uid": owner["uid"],
                                        "controller": True}]
        try:
            kube.create(f"/api/v1/namespaces/{namespace}/pods",
                        {"metadata": meta, "spec": pod["spec"]})
        except ApiError as err:
            assert err.status == 422, err  # a combination the API server refuses
            return
        created["pods"] += 1
        if pod["status"] is not None:
            kube.patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status",
                       {"status": pod["status"]})

    @settings(max_examples=40, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(nodes)
    def one_node(node: Json) -> None:
        name = f"{prefix}-n{next(counter)}"
        try:
            kube.create("/api/v1/nodes", {
                "metadata": {"name": name, "labels": node["labels"]},
                "spec": {"taints": node["taints"], "unschedulable": node["unschedulable"]},
                "status": {"allocatable": node["allocatable"],
                           "capacity": node["allocatable"], "images": node["images"],
                           "conditions": [{"type": "Ready", "status": "True"}]}})
        except ApiError as err:
            assert err.status == 422, err
            return
        created["nodes"] += 1

    try:
        one_pod()
        one_node()
        assert created["pods"] >= 40 and created["nodes"] >= 30, created
        compared = _compare_lists(kube)
        finished = compared["pods-succeeded"] + compared["pods-failed"]
        assert compared["pods"] + finished >= created["pods"] and finished, compared
        assert all(compared[kind] for kind in ("nodes", "persistentvolumes", "storageclasses",
                                               "csinodes", "poddisruptionbudgets",
                                               "deviceclasses", "resourceslices",
                                               "resourceclaims", "priorityclasses")), compared
        _compare_watches(watched, wait_for)
    finally:
        for json_informer, protobuf_informer in watched.values():
            json_informer.stop()
            protobuf_informer.stop()
        _delete_cluster_objects(kube, prefix)


def _delete_cluster_objects(kube: KubeClient, prefix: str) -> None:
    """The cluster-scoped objects this test made (named after ``prefix``)."""
    for path in ("/api/v1/nodes", "/api/v1/persistentvolumes",
                 "/apis/storage.k8s.io/v1/storageclasses", "/apis/storage.k8s.io/v1/csinodes",
                 f"{DRA}/deviceclasses", f"{DRA}/resourceslices"):
        for obj in kube.get(path)["items"]:
            if obj["metadata"]["name"].startswith(prefix):
                kube.delete(f"{path}/{obj['metadata']['name']}")


def test_a_scheduler_reading_protobuf_places_a_gang_whole(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: Any,
        local_cluster: Any, wait_for: Callable[..., Any]) -> None:
    """acceptContentTypes with protobuf first: built-in kinds are watched as protobuf (the
    PodGroup CRD stays JSON), and a gang waits whole until the room for all of it comes."""
    sched = start_scheduler({"clientConnection": {
        "kubeconfig": str(local_cluster.kubeconfig), "qps": 500, "burst": 1000,
        "acceptContentTypes": "application/vnd.kubernetes.protobuf,application/json"}})
    formats = {i.name: i.binary is not None for i in sched.service.informers}
    assert formats["pods"] and formats["nodes"] and formats["resourceclaims"], formats
    assert not formats["podgroups.batch.scheduler.tencent.com"], formats
    make_node("pb-a", cpu="3")
    make_node("pb-b", cpu="2")  # room for 5 of the 6
    create_podgroup(kube, namespace, "pb", 6)
    for index in range(6):
        create_pod(kube, namespace, pod_body(f"pb-{index}", scheduler=sched.name, cpu="1",
                                             group="pb"))
    wait_for(lambda: sched.service.scheduler.cache.pod(f"{namespace}/pb-5") is not None,
             what="the watch of pods, in protobuf, to see all six")
    assert bound_count(kube, namespace, "pb") == 0
    make_node("pb-c", cpu="1")
    wait_for(lambda: bound_count(kube, namespace, "pb") == 6, what="all 6 bound")
    sched.watcher.check_settled()


def _protobuf_watches() -> list[Any]:
    """The scheduler's watches of kinds it reads as protobuf."""
    found = [w for w in _watches(KindTable()) if protobuf.kind_of(w.path) is not None]
    assert {w.name for w in found} >= {"pods", "nodes", "resourceclaims"}, found
    return found


def _compare_lists(kube: KubeClient) -> dict[str, int]:
    """Every protobuf kind's list, read both ways at one resourceVersion; how many objects
    each had."""
    counts: dict[str, int] = {}
    for watch in _protobuf_watches():
        query: Json = {"fieldSelector": watch.field_selector} if watch.field_selector else {}
        binary = protobuf.kind_of(watch.path)
        from_protobuf = kube.list_page(watch.path, query, binary)
        assert isinstance(from_protobuf, protobuf.FromProtobuf), watch.path
        version = from_protobuf["metadata"]["resourceVersion"]
        from_json = kube.list_page(watch.path, {**query, "resourceVersion": version,
                                                "resourceVersionMatch": "Exact"}, None)
        assert not isinstance(from_json, protobuf.FromProtobuf)
        assert from_protobuf.left_out == []
        json_items, protobuf_items = from_json["items"], from_protobuf["items"]
        assert len(json_items) == len(protobuf_items), watch.name
        for json_obj, protobuf_obj in zip(json_items, protobuf_items, strict=True):
            where = f"{watch.name} {json_obj['metadata']['name']}"
            assert _shape_differences(json_obj, protobuf_obj) == [], where
            assert _fields(watch.parse(protobuf_obj)) == _fields(watch.parse(json_obj)), where
        counts[watch.name] = len(json_items)
    return counts


def _start_informers(kube: KubeClient) -> dict[str, tuple[Informer[Any], Informer[Any]]]:
    """Per protobuf kind, an informer reading JSON and one reading protobuf, both started
    before the objects are made (their watches see every add and update)."""
    class Ignore:
        def on_add(self, record: Any) -> None: ...
        def on_update(self, old: Any, new: Any) -> None: ...
        def on_delete(self, record: Any) -> None: ...

    informers = {}
    for watch in _protobuf_watches():
        pair = tuple(Informer[Any](kube, watch.path, watch.parse, watch.key, Ignore(),
                                   field_selector=watch.field_selector, name=watch.name,
                                   watch_read_timeout=30, protobuf=binary)
                     for binary in (False, True))
        for informer in pair:
            informer.start()
        assert all(i.synced.wait(30) for i in pair)
        assert pair[0].binary is None and pair[1].binary is not None, watch.name
        informers[watch.name] = pair
    return informers


def _compare_watches(watched: dict[str, tuple[Informer[Any], Informer[Any]]],
                     wait_for: Callable[..., Any]) -> None:
    """What each pair's watches built is the same, once both have seen every change."""
    for name, (json_informer, protobuf_informer) in watched.items():
        def records(informer: Informer[Any]) -> dict[str, Any]:
            return {key: _fields(record) for key, record in informer.store.items()}

        def same(a: Informer[Any] = json_informer, b: Informer[Any] = protobuf_informer
                 ) -> bool:
            return records(a) == records(b)

        try:
            wait_for(same, timeout=30, what=f"both {name} watches to build the same records")
        except AssertionError:
            json_records, protobuf_records = records(json_informer), records(protobuf_informer)
            differing = {key: (record, protobuf_records.get(key))
                         for key, record in json_records.items()
                         if protobuf_records.get(key) != record}
            raise AssertionError(f"{name}: JSON and protobuf records differ: "
                                 f"{list(differing.items())[:1]}") from None
        assert protobuf_informer.errors == 0, name
        assert json_informer.store or name.startswith("pods-"), f"{name}: nothing watched"


def _fields(record: Any) -> Any:
    """Every field of a record, nested records included, for comparing two records."""
    return dataclasses.asdict(record) if dataclasses.is_dataclass(record) else record


def _shape_differences(json_value: Any, protobuf_value: Any, path: str = "") -> list[str]:
    """Where the protobuf dict lacks a value the JSON one has (but SKIPPED fields), has a
    different one, or adds one that is not a zero value."""
    if isinstance(json_value, dict) and isinstance(protobuf_value, dict):
        found = []
        for key, value in json_value.items():
            if key in SKIPPED_NAMES or (value is None and key not in protobuf_value):
                continue
            if key not in protobuf_value:
                found.append(f"{path}.{key}: missing")
            else:
                found += _shape_differences(value, protobuf_value[key], f"{path}.{key}")
        found += [f"{path}.{key}: added {value!r}" for key, value in protobuf_value.items()
                  if key not in json_value and not _zero(value)]
        return found
    if isinstance(json_value, list) and isinstance(protobuf_value, list):
        if len(json_value) != len(protobuf_value):
            return [f"{path}: {len(json_value)} items, {len(protobuf_value)} in protobuf"]
        return [d for i, (j, p) in enumerate(zip(json_value, protobuf_value, strict=True))
                for d in _shape_differences(j, p, f"{path}[{i}]")]
    if json_value == protobuf_value or (json_value is None and _zero(protobuf_value)):
        return []
    return [f"{path}: {json_value!r} in JSON, {protobuf_value!r} in protobuf"]


def _zero(value: Any) -> bool:
    if isinstance(value, dict):
        return all(_zero(v) for v in value.values())
    return value in (None, "", 0, False, [])


def _fixed_objects(kube: KubeClient, namespace: str, prefix: str) -> None:
    """One or two objects of every other kind the scheduler reads as protobuf, with the
    fields their records read (a CEL selector, opaque driver parameters, a percentage)."""
    ns = f"/api/v1/namespaces/{namespace}"
    for name, value, policy in (("wire-high", 1000, "PreemptLowerPriority"),
                                ("wire-never", 500, "Never")):
        _create(kube, "/apis/scheduling.k8s.io/v1/priorityclasses",
                {"metadata": {"name": name}, "value": value, "preemptionPolicy": policy})
    for name, bound in (("one", 1), ("half", "50%")):
        kube.create(f"/apis/policy/v1/namespaces/{namespace}/poddisruptionbudgets", {
            "metadata": {"name": name},
            "spec": {"minAvailable": bound, "selector": {"matchLabels": {"app": "a"}}}})
    kube.create(f"{ns}/persistentvolumeclaims", {
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": f"{prefix}-local",
                 "resources": {"requests": {"storage": "1Gi"}}}})
    kube.create("/apis/storage.k8s.io/v1/storageclasses", {
        "metadata": {"name": f"{prefix}-local"}, "provisioner": "csi.example.com",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["a", "b"]}]}]})
    kube.create("/api/v1/persistentvolumes", {
        "metadata": {"name": f"{prefix}-pv"},
        "spec": {"capacity": {"storage": "10Gi"}, "accessModes": ["ReadWriteOnce"],
                 "storageClassName": f"{prefix}-local",
                 "csi": {"driver": "csi.example.com", "volumeHandle": "h1"},
                 "claimRef": {"namespace": namespace, "name": "data"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "kubernetes.io/hostname", "operator": "In",
                      "values": ["wire-node-0"]}]}]}}}})
    kube.create("/apis/storage.k8s.io/v1/csinodes", {
        "metadata": {"name": f"{prefix}-csinode"},
        "spec": {"drivers": [{"name": "csi.example.com", "nodeID": "n1",
                              "allocatable": {"count": 8},
                              "topologyKeys": ["topology.kubernetes.io/zone"]}]}})
    _dra_objects(kube, namespace, prefix)


def _dra_objects(kube: KubeClient, namespace: str, prefix: str) -> None:
    parameters = {"sharing": {"strategy": "TimeSlicing", "levels": [1, [2, {"x": None}]]}}
    kube.create(f"{DRA}/deviceclasses", {
        "metadata": {"name": f"{prefix}-gpu"},
        "spec": {"selectors": [{"cel": {"expression":
                                        'device.driver == "gpu.example.com"'}}],
                 "config": [{"opaque": {"driver": "gpu.example.com",
                                        "parameters": parameters}}]}})
    kube.create(f"{DRA}/resourceslices", {
        "metadata": {"name": f"{prefix}-slice"},
        "spec": {"driver": "gpu.example.com", "nodeName": "wire-node-0",
                 "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": f"gpu-{i}", "attributes": {
                     "model": {"string": "a100"}, "index": {"int": i},
                     "fast": {"bool": i % 2 == 0}, "driverVersion": {"version": "1.2.3"}},
                     "capacity": {"memory": {"value": "40Gi"}}} for i in range(3)]}})
    kube.create(f"{DRA}/namespaces/{namespace}/resourceclaims", {
        "metadata": {"name": "wire-claim"},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {
                "deviceClassName": f"{prefix}-gpu", "count": 2,
                "selectors": [{"cel": {"expression": 'device.attributes["gpu.example.com"]'
                                                     '.model == "a100"'}}]}}],
            "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.example.com",
                                                         "parameters": parameters}}]}}})


def _create(kube: KubeClient, path: str, body: Json) -> None:
    """Create a cluster-scoped object another test in the session may have made."""
    try:
        kube.create(path, body)
    except ApiError as err:
        if not err.conflict:
            raise
