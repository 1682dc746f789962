"""Objects the scheduler cannot read, on the real API server: each is set aside (a Warning
names the field), the rest of its list and watch go on, and gangs elsewhere are bound.

Every case runs twice: with the scheduler running before the object is written, and with
the scheduler started after it exists (its informers list it first). The quantity cases
(``1E``, ``1Ei``) must pass whether the quantity parser refuses exa quantities (then the
object is unreadable) or reads them (then it is an ordinary object); the deep objects stay
unreadable either way.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coscheduling.api.pods import Pod, parse_pod
from coscheduling.cluster.client import ApiError, KubeClient
from coscheduling.cluster.deepjson import Decoded
from coscheduling.cluster.informer import Informer, object_key
from coscheduling.cluster.unreadable import UNREADABLE, UnreadableObjects
from coscheduling.commands.explain import explain
from coscheduling.localcluster import LocalCluster
from tests.integration.fixtures import COMPAT_CRDS, crd_path, kubectl
from tests.integration.kube import (
    create_pod,
    create_podgroup,
    events_for,
    list_pods,
    pod_body,
    pod_condition,
    wait_until,
)
from tests.integration.test_client import Recorder

DRA = "/apis/resource.k8s.io/v1"
QUEUES = "/apis/batch.scheduler.tencent.com/v1/queues"
DEPTH = 3000
PARAMETERS_FIELD = "spec.devices.config[0].opaque.parameters"
BOUND_WITHIN = 30.0  # "within seconds": generous on a loaded 2-core machine

StartScheduler = Callable[..., Any]


DEEP = "__deep__"


def with_deep(body: dict[str, Any], depth: int = DEPTH) -> str:
    """``body`` as JSON text, its ``DEEP`` string replaced by an object holding ``depth``
    levels of lists (2 bytes a level, under the API server's 10 KiB limit on opaque
    parameters). Python's own encoder recurses too, so the text is made by hand."""
    value = '{"a": ' + "[" * (depth - 1) + "1" + "]" * (depth - 1) + "}"
    return json.dumps(body).replace(json.dumps(DEEP), value)


def write_raw(cluster: LocalCluster, verb: str, path: str, text: str) -> None:
    """POST (``create``) or PUT (``replace``) JSON text as it is, through kubectl."""
    kubectl(cluster, verb, "--raw", path, "-f", "-", stdin=text)


def deep_claim(namespace: str, name: str) -> str:
    return with_deep({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                      "metadata": {"name": name, "namespace": namespace},
                      "spec": {"devices": {
                          "requests": [{"name": "gpu", "exactly": {"deviceClassName": "none"}}],
                          "config": [{"opaque": {"driver": "deep.example.com",
                                                 "parameters": DEEP}}]}}})


@pytest.fixture(params=["scheduler first", "object first"])
def scheduler_first(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "scheduler first")


def _with_bad_object(start_scheduler: StartScheduler, scheduler_first: bool,
                     write: Callable[[], None]) -> Any:
    """A scheduler (named before it starts) and the bad object, in the order asked."""
    sched = start_scheduler(start=False)
    if scheduler_first:
        sched.start()
    write()
    if not scheduler_first:
        sched.start()  # fails unless every informer syncs with the object there
    return sched


def _good_gang(kube: KubeClient, namespace: str, scheduler: str, pool: str,
               group: str = "good", size: int = 3) -> None:
    create_podgroup(kube, namespace, group, size)
    for i in range(size):
        body = pod_body(f"{group}-{i}", scheduler=scheduler, cpu="100m", group=group)
        body["spec"]["nodeSelector"] = {"test-pool": pool}
        create_pod(kube, namespace, body)


def _wait_bound(kube: KubeClient, namespace: str, group: str, size: int = 3) -> None:
    def bound() -> bool:
        return sum(1 for p in list_pods(kube, namespace)
                   if p["metadata"]["name"].startswith(f"{group}-")
                   and p["spec"].get("nodeName")) == size
    wait_until(bound, timeout=BOUND_WITHIN, what=f"gang {group} bound whole")


def _unreadable_warnings(kube: KubeClient, namespace: str, name: str) -> list[str]:
    return [e.get("message", "") for e in events_for(kube, namespace, name)
            if e.get("reason") == UNREADABLE and e.get("type") == "Warning"]


def _pool(make_node: Any, cpu: str = "8") -> str:
    pool = uuid.uuid4().hex[:8]
    make_node(f"unread-{pool}", cpu=cpu, labels={"test-pool": pool})
    return pool


def test_a_claim_nested_3000_deep_is_set_aside_and_gangs_are_bound(
        kube: KubeClient, local_cluster: LocalCluster, namespace: str, make_node: Any,
        start_scheduler: StartScheduler, scheduler_first: bool) -> None:
    pool = _pool(make_node)
    sched = _with_bad_object(start_scheduler, scheduler_first, lambda: write_raw(
        local_cluster, "create", f"{DRA}/namespaces/{namespace}/resourceclaims",
        deep_claim(namespace, "deep")))
    _good_gang(kube, namespace, sched.name, pool)
    _wait_bound(kube, namespace, "good")
    wait_until(lambda: _unreadable_warnings(kube, namespace, "deep"),
               what="a Warning on the deep claim")
    message = _unreadable_warnings(kube, namespace, "deep")[0]
    assert PARAMETERS_FIELD in message and "nested deeper than" in message, message
    # Counted (other tests' namespaces may still be terminating with their deep claims).
    assert f"{namespace}/deep" in sched.service.unreadable.keys("resourceclaims.resource.k8s.io")
    gauge = sched.service.scheduler.metrics.objects_unreadable
    assert gauge.value("resourceclaims.resource.k8s.io") >= 1
    shown = explain(kube, namespace, "good")
    assert "Set aside, unreadable" in shown and f"{namespace}/deep" in shown, shown
    assert PARAMETERS_FIELD in shown


def test_the_api_server_stores_the_claim_that_deep(
        kube: KubeClient, local_cluster: LocalCluster, namespace: str) -> None:
    """The depth the other cases use is one the API server accepts and that the C JSON
    decoder cannot read, so they test what a tenant can really write."""
    write_raw(local_cluster, "create", f"{DRA}/namespaces/{namespace}/resourceclaims",
              deep_claim(namespace, "stored"))
    raw = kube.get(f"{DRA}/namespaces/{namespace}/resourceclaims/stored")
    assert raw["metadata"]["name"] == "stored"
    assert isinstance(raw, Decoded), "the C decoder read it: the depth tests nothing"
    [(path, why)] = raw.left_out
    assert path[:6] == ("spec", "devices", "config", 0, "opaque", "parameters"), path
    assert why == "nested deeper than 512 levels"


def test_a_bound_pod_that_cannot_be_read_keeps_gangs_off_its_node(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        scheduler_first: bool) -> None:
    """4 cpu bound on a 4-cpu node with ``limits.memory: 1E``: unreadable to a parser that
    refuses exa quantities (the node then takes nothing new), 4 cpu to one that reads them
    (the node is full). Either way a 4-cpu gang member does not go there."""
    pool = uuid.uuid4().hex[:8]
    full = f"unread-{pool}-full"
    make_node(full, cpu="4", labels={"test-pool": pool})

    def bound_pod() -> None:
        body = pod_body("occupant", scheduler="default-scheduler", cpu="4", node_name=full)
        body["spec"]["containers"][0]["resources"]["limits"]["memory"] = "1E"
        create_pod(kube, namespace, body)

    sched = _with_bad_object(start_scheduler, scheduler_first, bound_pod)
    create_podgroup(kube, namespace, "big", 1)
    body = pod_body("big-0", scheduler=sched.name, cpu="4", group="big")
    body["spec"]["nodeSelector"] = {"test-pool": pool}
    create_pod(kube, namespace, body)

    def refused() -> str:
        condition = pod_condition(kube, namespace, "big-0", "PodScheduled")
        return str(condition.get("message", "")) if condition.get("status") == "False" else ""
    message = wait_until(refused, what="big-0 refused")
    assert "a pod on the node cannot be read" in message \
        or "Insufficient cpu" in message, message
    assert not kube.get(f"/api/v1/namespaces/{namespace}/pods/big-0")["spec"].get("nodeName")
    occupant = parse_pod(kube.get(f"/api/v1/namespaces/{namespace}/pods/occupant"))
    if occupant.parse_error:  # the field is named on the pod, and counted
        wait_until(lambda: _unreadable_warnings(kube, namespace, "occupant"),
                   what="a Warning on the unreadable bound pod")
        assert "spec.containers" in _unreadable_warnings(kube, namespace, "occupant")[0]
    make_node(f"unread-{pool}-free", cpu="4", labels={"test-pool": pool})
    wait_until(lambda: kube.get(f"/api/v1/namespaces/{namespace}/pods/big-0")["spec"].get(
        "nodeName") == f"unread-{pool}-free", timeout=BOUND_WITHIN,
        what="big-0 bound to the node with room")


def test_a_podgroup_asking_for_1e_memory_leaves_other_gangs_bound(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        scheduler_first: bool) -> None:
    pool = _pool(make_node)
    sched = _with_bad_object(start_scheduler, scheduler_first, lambda: create_podgroup(
        kube, namespace, "exa", 1, minResources={"memory": "1E"}))
    _good_gang(kube, namespace, sched.name, pool)
    _wait_bound(kube, namespace, "good")


def test_a_queue_of_1ei_capability_leaves_other_gangs_bound(
        kube: KubeClient, namespace: str, make_node: Any, start_scheduler: StartScheduler,
        scheduler_first: bool) -> None:
    pool = _pool(make_node)
    queue = f"exa-{uuid.uuid4().hex[:8]}"
    try:  # a cluster-scoped object: removed even when the scheduler does not start
        sched = _with_bad_object(start_scheduler, scheduler_first, lambda: kube.create(QUEUES, {
            "apiVersion": "batch.scheduler.tencent.com/v1", "kind": "Queue",
            "metadata": {"name": queue},
            "spec": {"weight": 1, "capability": {"memory": "1Ei"}}}))
        _good_gang(kube, namespace, sched.name, pool)
        _wait_bound(kube, namespace, "good")
    finally:
        with contextlib.suppress(ApiError):
            kube.delete(f"{QUEUES}/{queue}")


X_K8S = COMPAT_CRDS["podgroups.scheduling.x-k8s.io"]


@pytest.mark.usefixtures("compat_crds")
def test_a_compat_podgroup_nested_3000_deep_is_set_aside(
        kube: KubeClient, local_cluster: LocalCluster, namespace: str, make_node: Any,
        start_scheduler: StartScheduler, scheduler_first: bool) -> None:
    """A CRD that keeps unknown fields stores any depth; its informer syncs all the same."""
    pool = _pool(make_node)
    body = with_deep({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": {"name": "deep", "namespace": namespace},
                      "spec": {"minMember": 1, "extra": DEEP}})
    sched = _with_bad_object(start_scheduler, scheduler_first, lambda: write_raw(
        local_cluster, "create", crd_path(X_K8S, namespace), body))
    _good_gang(kube, namespace, sched.name, pool)
    _wait_bound(kube, namespace, "good")
    wait_until(lambda: _unreadable_warnings(kube, namespace, "deep"),
               what="a Warning on the deep PodGroup")
    assert "spec.extra.a[0][0]" in _unreadable_warnings(kube, namespace, "deep")[0]


@pytest.fixture
def informer_of(kube: KubeClient) -> Iterator[Callable[..., Informer[Any]]]:
    started: list[Informer[Any]] = []

    def make(path: str, parse: Callable[[dict[str, Any]], Any], handler: Any,
             unreadable: UnreadableObjects, page_size: int = 250,
             keep_previous: bool = False) -> Informer[Any]:
        informer = Informer[Any](kube, path, parse, object_key_of, handler,
                                 page_size=page_size, watch_read_timeout=10,
                                 unreadable=unreadable, keep_previous=keep_previous)
        informer.start()
        started.append(informer)
        return informer

    yield make
    for informer in started:
        informer.stop()


def object_key_of(record: dict[str, Any]) -> str:
    return object_key(record)


def _compat_group(name: str, namespace: str, extra: object, version: str = "") -> str:
    meta = {"name": name, "namespace": namespace}
    if version:
        meta["resourceVersion"] = version
    return with_deep({"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
                      "metadata": meta, "spec": {"minMember": 1, "extra": extra}})


@pytest.mark.usefixtures("compat_crds")
def test_the_informer_sets_aside_an_object_on_one_page_and_takes_it_back(
        kube: KubeClient, local_cluster: LocalCluster, namespace: str,
        informer_of: Callable[..., Informer[Any]]) -> None:
    """The real informer on a real list and watch: the deep object is left out of its page
    of three (the others are read), leaves the store when it becomes deep on update (or
    stays as last read, with ``keep_previous``), and comes back when it can be read again."""
    path = crd_path(X_K8S, namespace)
    for name, extra in (("a", 1), ("deep", DEEP), ("c", 2)):
        write_raw(local_cluster, "create", path, _compat_group(name, namespace, extra))
    unreadable, recorder = UnreadableObjects(), Recorder()
    informer = informer_of(path, dict, recorder, unreadable, page_size=3)
    keeping = informer_of(path, dict, Recorder(), UnreadableObjects(), keep_previous=True)
    assert informer.synced.wait(30) and keeping.synced.wait(30), "an informer did not sync"
    assert sorted(informer.store) == [f"{namespace}/a", f"{namespace}/c"]
    [entry] = unreadable.entries()
    assert (entry.kind, entry.key, entry.ref.kind) == (
        "podgroups.scheduling.x-k8s.io", f"{namespace}/deep", "PodGroup")
    assert entry.field.startswith("spec.extra.a[0][0]"), entry

    def replace(name: str, extra: object) -> None:
        version = kube.get(f"{path}/{name}")["metadata"]["resourceVersion"]
        write_raw(local_cluster, "replace", f"{path}/{name}",
                  _compat_group(name, namespace, extra, version))

    replace("a", DEEP)  # readable -> unreadable: it leaves the store, as deleted
    wait_until(lambda: ("delete", f"{namespace}/a") in recorder.events, what="a removed")
    assert f"{namespace}/a" not in informer.store
    assert keeping.store[f"{namespace}/a"]["spec"]["extra"] == 1  # the last readable one
    assert unreadable.keys("podgroups.scheduling.x-k8s.io") == {
        f"{namespace}/a", f"{namespace}/deep"}
    replace("deep", 3)  # unreadable -> readable: it comes back as an add
    wait_until(lambda: ("add", f"{namespace}/deep") in recorder.events, what="deep added")
    assert informer.store[f"{namespace}/deep"]["spec"]["extra"] == 3
    kube.delete(f"{path}/a")  # deleted while set aside: forgotten
    wait_until(lambda: not unreadable.keys("podgroups.scheduling.x-k8s.io"),
               what="nothing set aside")
    assert informer.relists == 1, "the informer listed again"


def test_a_parser_exception_sets_aside_only_its_pod(
        kube: KubeClient, namespace: str,
        informer_of: Callable[..., Informer[Any]]) -> None:
    """Any exception from a parser, on the list and on the watch, costs only its object."""
    for name in ("p1", "boom", "p3"):
        create_pod(kube, namespace, pod_body(name, scheduler="nobody"))

    def parse(obj: dict[str, Any]) -> Pod:
        if obj["metadata"]["name"].startswith("boom"):
            raise OverflowError("a parser bug")
        return parse_pod(obj)

    unreadable = UnreadableObjects()
    informer = Informer[Pod](kube, f"/api/v1/namespaces/{namespace}/pods", parse,
                             lambda p: p.key, _Null(), unreadable=unreadable,
                             watch_read_timeout=10)
    informer.start()
    try:
        assert informer.synced.wait(30)
        assert sorted(informer.store) == [f"{namespace}/p1", f"{namespace}/p3"]
        create_pod(kube, namespace, pod_body("boom2", scheduler="nobody"))
        create_pod(kube, namespace, pod_body("p5", scheduler="nobody"))
        wait_until(lambda: f"{namespace}/p5" in informer.store, what="p5 after boom2")
        assert unreadable.keys("pods") == {f"{namespace}/boom", f"{namespace}/boom2"}
        assert "OverflowError: a parser bug" in unreadable.entries()[0].why
        assert informer.relists == 1
    finally:
        informer.stop()


class _Null:
    def on_add(self, record: Any) -> None:
        pass

    def on_update(self, old: Any, new: Any) -> None:
        pass

    def on_delete(self, record: Any) -> None:
        pass

