"""Random PodGroups through the real API server while a scheduler runs (issue 8): the CRD
refuses the invalid ones, and the scheduler survives every accepted one with a status."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coscheduling.cluster.client import ApiError, KubeClient
from tests.integration.kube import PG_API, create_pod, pod_body, wait_until

quantities = st.one_of(st.integers(-5, 10**6), st.sampled_from(
    ["1", "500m", "1Gi", "-1", "lots", "1e3", "0.5", "", "1Qi"]))
valid_specs = st.fixed_dictionaries({"minMember": st.integers(1, 100_000)}, optional={
    "maxScheduleTime": st.sampled_from(["30s", "1m", "1h30m", "500ms"]),
    "minResources": st.dictionaries(st.sampled_from(["cpu", "memory", "nvidia.com/gpu"]),
                                    st.sampled_from(["1", "500m", "1Gi", 2]), max_size=3),
    "priorityClassName": st.sampled_from(["high", "system-cluster-critical"]),
})
random_specs = st.fixed_dictionaries({}, optional={
    "minMember": st.one_of(st.integers(-3, 10**5), st.text(max_size=4), st.floats(0, 10),
                           st.none()),
    "maxScheduleTime": st.one_of(st.sampled_from(["30s", "1m", "soon", "", "5", "1h30m",
                                                  "-1s"]), st.integers(-1, 100)),
    "minResources": st.one_of(st.dictionaries(st.sampled_from(
        ["cpu", "memory", "nvidia.com/gpu", "x"]), quantities, max_size=3), st.text(max_size=3)),
    "priorityClassName": st.one_of(st.sampled_from(["high", "Not_Valid", "", "a" * 300]),
                                   st.integers()),
})
specs = st.one_of(valid_specs, random_specs)


def test_random_podgroups(kube: KubeClient, namespace: str, make_node: Any,
                          start_scheduler: Any) -> None:
    sched = start_scheduler()
    make_node("fuzz-a", cpu="4")
    accepted: list[str] = []
    counter = iter(range(10**6))

    @settings(max_examples=60, deadline=None,
              suppress_health_check=[HealthCheck.function_scoped_fixture,
                                     HealthCheck.too_slow])
    @given(specs)
    def one(spec: dict[str, Any]) -> None:
        name = f"f{next(counter)}"
        body = {"apiVersion": PG_API, "kind": "PodGroup",
                "metadata": {"name": name, "namespace": namespace}, "spec": spec}
        try:
            kube.create(f"/apis/{PG_API}/namespaces/{namespace}/podgroups", body)
        except ApiError as err:
            assert err.status == 422, err  # refused by the schema, field named
            assert "spec" in str(err), err
            return
        accepted.append(name)
        create_pod(kube, namespace, pod_body(f"{name}-0", scheduler=sched.name, group=name,
                                             cpu="100m"))

    one()
    assert accepted, "the strategy produced no valid PodGroup"
    path = f"/apis/{PG_API}/namespaces/{namespace}/podgroups"
    for name in accepted:
        wait_until(lambda n=name: kube.get(f"{path}/{n}").get("status", {}).get("phase"),
                   timeout=30, what=f"a status on accepted PodGroup {name}")
    assert sched.service.scheduler.alive(), "a scheduler thread died"
    sched.watcher.check_settled()
    print(f"{len(accepted)} accepted PodGroups, each with a status; the rest refused")
