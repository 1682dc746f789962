"""Leader fencing (issue 13): a leader paused past its lease binds nothing once a new leader
has taken over and bound, because the API server checks every Binding against the Lease
(deploy/40-fencing.yaml). Without the policy the same scenario shows the hazard."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient
from coscheduling.cluster.fencing import LEADER_ANNOTATION
from coscheduling.localcluster import LocalCluster
from tests.integration.fixtures import REPO, kubectl
from tests.integration.kube import (
    PG_API,
    bound_count,
    create_pod,
    create_podgroup,
    list_pods,
    pod_body,
    wait_until,
)

POLICY = "coscheduling-leader-fencing"
WRITES_POLICY = "coscheduling-leader-fencing-writes"
VAP_API = "/apis/admissionregistration.k8s.io/v1"


def _policy_document() -> dict[str, Any]:
    docs = list(yaml.safe_load_all((REPO / "deploy" / "40-fencing.yaml").read_text()))
    return next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy")


@pytest.fixture
def fencing(local_cluster: LocalCluster, kube: KubeClient, namespace: str,
            tmp_path: Path) -> Iterator[str]:
    """The shipped policy, bound for this test's namespace to this test's Lease (the shipped
    binding names the production Lease); yields the Lease name."""
    lease = f"fence-{uuid.uuid4().hex[:6]}"
    binding = apply_policy(local_cluster, kube, _policy_document(), namespace, lease, tmp_path)
    try:
        create_pod(kube, namespace, pod_body("probe", scheduler="nobody"))
        wait_until(lambda: _refused(kube, namespace, "probe", "somebody"), timeout=60,
                   what="the fencing policy in force")
        yield lease
    finally:
        kube.delete(f"{VAP_API}/validatingadmissionpolicybindings/{binding}")


def apply_policy(local_cluster: LocalCluster, kube: KubeClient, policy: dict[str, Any],
                 namespace: str, lease: str, tmp_path: Path) -> str:
    """Apply a fencing ``policy`` and bind it, for ``namespace`` only, to the Lease
    ``lease`` there (the shipped binding names the production Lease); the binding's name."""
    document = tmp_path / f"{policy['metadata']['name']}.yaml"
    document.write_text(yaml.safe_dump(policy))
    kubectl(local_cluster, "apply", "-f", str(document))
    binding = f"{policy['metadata']['name']}-{namespace}"
    kube.create(f"{VAP_API}/validatingadmissionpolicybindings", {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": binding},
        "spec": {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"],
                 "paramRef": {"namespace": namespace, "name": lease,
                              "parameterNotFoundAction": "Deny"},
                 "matchResources": {"namespaceSelector": {"matchLabels": {
                     "kubernetes.io/metadata.name": namespace}}}}})
    return binding


def writes_policy(username: str) -> dict[str, Any]:
    """The shipped policy, matching this test's ServiceAccount instead of the production one."""
    docs = list(yaml.safe_load_all((REPO / "deploy" / "40-fencing.yaml").read_text()))
    policy = next(d for d in docs if d["kind"] == "ValidatingAdmissionPolicy"
                  and d["metadata"]["name"] == WRITES_POLICY)
    condition = policy["spec"]["matchConditions"][0]
    condition["expression"] = f"request.userInfo.username == '{username}'"
    return policy


def token_for(kube: KubeClient, namespace: str, account: str, pod: dict[str, Any]) -> str:
    """A token of ``account`` bound to ``pod``, as the kubelet mounts one in that pod."""
    answer = kube.create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600, "boundObjectRef": {
             "kind": "Pod", "apiVersion": "v1", "name": pod["metadata"]["name"],
             "uid": pod["metadata"]["uid"]}}})
    return str(answer["status"]["token"])


def _refused(kube: KubeClient, namespace: str, pod: str, sender: str) -> bool:
    """Whether a dry-run Binding of ``pod`` sent as ``sender`` is refused."""
    try:
        kube.request("POST", f"/api/v1/namespaces/{namespace}/pods/{pod}/binding",
                     query={"dryRun": "All"},
                     body={"apiVersion": "v1", "kind": "Binding",
                           "metadata": {"name": pod, "annotations": {LEADER_ANNOTATION: sender}},
                           "target": {"apiVersion": "v1", "kind": "Node", "name": "x"}})
    except ApiError as err:
        return err.status in (403, 422) and POLICY in str(err.body.get("message", err))
    return False


def _replica(kubeconfig: Path, config: Path, log: Path,
             fault: str = "") -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "coscheduling", "run", "--kubeconfig", str(kubeconfig),
         "--config", str(config), "--no-grpc"],
        stdout=log.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "COSCHEDULING_FAULT": fault})


def _stopped(process: subprocess.Popen[bytes]) -> bool:
    stat = Path(f"/proc/{process.pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] == "T"


def _holder(kube: KubeClient, path: str) -> str:
    try:
        return str(kube.get(path).get("spec", {}).get("holderIdentity") or "")
    except ApiError:
        return ""


def _bound_by(kube: KubeClient, namespace: str) -> dict[str, str]:
    return {p["metadata"]["name"]: (p["metadata"].get("annotations") or {}).get(
        LEADER_ANNOTATION, "") for p in list_pods(kube, namespace) if p["spec"].get("nodeName")}


def _run(local_cluster: LocalCluster, kube: KubeClient, namespace: str, lease: str,
         make_node: Any, tmp_path: Path) -> tuple[dict[str, str], str, str]:
    """Leader A stops itself right before its first bind (COSCHEDULING_FAULT); B takes over
    and binds gang "h"; A is resumed. Returns who bound what, A's and B's identities."""
    name = f"fence-{uuid.uuid4().hex[:6]}"
    lease_path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{lease}"
    make_node(f"{name}-n", cpu="8")
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    replicas: list[subprocess.Popen[bytes]] = []
    try:
        for index, fault in enumerate(("stop-before-bind:1", "")):
            config = tmp_path / f"config-{index}.yaml"
            config.write_text(yaml.safe_dump({
                "apiVersion": "config.batch.scheduler.tencent.com/v1",
                "kind": "SchedulerConfiguration", "schedulerName": name,
                "metricsBindAddress": "127.0.0.1:0", "bindingParallelism": 1,
                # Long enough that a new leader starved of CPU by a loaded machine does not
                # miss its renewals, lose the Lease and let the resumed one win it back
                # (a legitimate flip that would bind under A's name, as seen under load).
                "leaderElection": {"leaderElect": True, "resourceNamespace": namespace,
                                   "resourceName": lease, "leaseDuration": "10s",
                                   "renewDeadline": "8s", "retryPeriod": "1s"}}))
            replicas.append(_replica(local_cluster.kubeconfig, config, logs[index], fault))
            if index == 0:
                a = wait_until(lambda: _holder(kube, lease_path), what="A leading")
        wait_until(lambda: "caches synced" in logs[1].read_text(), what="B synced")
        create_podgroup(kube, namespace, "g", 2)
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"g-{i}", scheduler=name, group="g"))
        wait_until(lambda: _stopped(replicas[0]), what="A stopped right before its bind")
        # B must not finish "g" itself: with minMember 3 it waits for a third member.
        kube.patch(f"/apis/{PG_API}/namespaces/{namespace}/podgroups/g",
                   {"spec": {"minMember": 3}})
        b = wait_until(lambda: (h := _holder(kube, lease_path)) != a and h, timeout=60,
                       what="B taking the lease over")
        create_podgroup(kube, namespace, "h", 2)
        for i in range(2):
            create_pod(kube, namespace, pod_body(f"h-{i}", scheduler=name, group="h"))
        wait_until(lambda: bound_count(kube, namespace, "h") == 2, what="B binding h")
        replicas[0].send_signal(signal.SIGCONT)
        assert replicas[0].wait(timeout=60) == 1, logs[0].read_text()  # lost its lease: exits
        return _bound_by(kube, namespace), a, b
    finally:
        for replica in replicas:
            replica.kill()
            replica.wait(10)


def test_a_leader_paused_past_its_lease_binds_nothing_after_the_new_leader(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        make_node: Any, tmp_path: Path, fencing: str) -> None:
    bound, a, b = _run(local_cluster, kube, namespace, fencing, make_node, tmp_path)
    lease = kube.get(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{fencing}")
    assert bound == {"h-0": b, "h-1": b}, (bound, a, b, lease.get("spec"),
                                           (tmp_path / "a.log").read_text()[-4000:],
                                           (tmp_path / "b.log").read_text()[-4000:])
    assert "fenced: this scheduler replica does not hold the leader Lease" in \
        (tmp_path / "a.log").read_text()


def test_without_the_policy_the_paused_leader_binds_late(
        local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
        make_node: Any, tmp_path: Path) -> None:
    """The control: the scenario above does reach the API server with a deposed leader's
    Binding, so the test above can fail (it would without the policy)."""
    lease = f"nofence-{uuid.uuid4().hex[:6]}"
    bound, a, b = _run(local_cluster, kube, namespace, lease, make_node, tmp_path)
    assert bound.get("h-0") == bound.get("h-1") == b
    assert a in bound.values(), (bound, a, b)


# -- device allocation and events are fenced like every other write --------------------------
RESOURCE_API = "/apis/resource.k8s.io/v1"


def _allow_claims_and_events(kube: KubeClient, namespace: str, account: str) -> None:
    """What the shipped ClusterRole grants for claims and events (and events.k8s.io, which
    it does not: the policy fences it should a later role grant it)."""
    rbac = f"/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}"
    kube.create(f"{rbac}/roles", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "claims-events"},
        "rules": [{"apiGroups": ["resource.k8s.io"],
                   "resources": ["resourceclaims", "resourceclaims/status"],
                   "verbs": ["get", "patch"]},
                  {"apiGroups": ["", "events.k8s.io"], "resources": ["events"],
                   "verbs": ["create", "patch"]}]})
    kube.create(f"{rbac}/rolebindings", {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "claims-events"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "claims-events"},
        "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]})


def _writes(namespace: str) -> dict[str, Callable[[KubeClient], Any]]:
    """Each write the scheduler makes to a claim or an event, as one replica's call."""
    claim = f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims/c"
    annotate = {"metadata": {"annotations": {"touched": uuid.uuid4().hex[:6]}}}

    def core_event(client: KubeClient) -> Any:
        return client.create(f"/api/v1/namespaces/{namespace}/events", {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"generateName": "fence-"}, "type": "Normal", "reason": "Scheduled",
            "message": "m", "involvedObject": {"kind": "Pod", "namespace": namespace,
                                               "name": "victim"}})

    def new_event(client: KubeClient) -> Any:
        return client.create(f"/apis/events.k8s.io/v1/namespaces/{namespace}/events", {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"generateName": "fence-"}, "type": "Normal", "reason": "Scheduled",
            "action": "Binding", "note": "m", "reportingController": "coscheduling",
            "reportingInstance": "r", "eventTime": "2026-01-01T00:00:00.000000Z",
            "regarding": {"kind": "Pod", "namespace": namespace, "name": "victim"}})

    return {
        "claim": lambda client: client.patch(claim, annotate),
        # Any write to the status subresource is admitted or refused as a whole; this one
        # changes nothing (writing an allocation also needs resourceclaims/binding, which
        # an API server 1.37 checks before admission).
        "claim status": lambda client: client.patch(f"{claim}/status", annotate),
        "core event": core_event,
        "events.k8s.io event": new_event,
    }


def test_a_replica_that_does_not_hold_the_lease_writes_no_claim_and_no_event(
        local_cluster: LocalCluster, kube: KubeClient, namespace: str, tmp_path: Path) -> None:
    account, lease = "sched", f"fence-{uuid.uuid4().hex[:6]}"
    kube.create(f"/api/v1/namespaces/{namespace}/serviceaccounts",
                {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    _allow_claims_and_events(kube, namespace, account)
    kube.create(f"{RESOURCE_API}/namespaces/{namespace}/resourceclaims", {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"},
        "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.example.com"}}]}}})
    clients = {}
    for name in ("leader", "standby"):  # the replicas' pods (never run: no kubelet)
        body = pod_body(name, scheduler="nobody")
        body["spec"]["serviceAccountName"] = account
        pod = create_pod(kube, namespace, body)
        clients[name] = KubeClient(ClientSettings(
            kubeconfig=str(local_cluster.kubeconfig),
            token=token_for(kube, namespace, account, pod)))
    kube.create(f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": lease},
        "spec": {"holderIdentity": "leader", "leaseDurationSeconds": 15}})
    binding = apply_policy(local_cluster, kube, writes_policy(
        f"system:serviceaccount:{namespace}:{account}"), namespace, lease, tmp_path)
    writes = _writes(namespace)
    try:
        wait_until(lambda: _fenced(writes["claim"], clients["standby"]), timeout=60,
                   what="the fencing policy in force for claims")
        for what, write in writes.items():
            with pytest.raises(ApiError) as refused:
                write(clients["standby"])
            assert refused.value.status == 403, (what, refused.value)
            assert WRITES_POLICY in str(refused.value) and "held by leader" in \
                str(refused.value), (what, refused.value)
            write(clients["leader"])  # the Lease holder's own are admitted
    finally:
        kube.delete(f"{VAP_API}/validatingadmissionpolicybindings/{binding}")


def _fenced(write: Callable[[KubeClient], Any], client: KubeClient) -> bool:
    try:
        write(client)
    except ApiError as err:
        if err.status == 403 and WRITES_POLICY in str(err):
            return True
        raise
    return False
