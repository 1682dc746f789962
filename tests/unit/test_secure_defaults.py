"""Everything the scheduler listens on stays on this machine unless told otherwise."""

from __future__ import annotations

from pathlib import Path

import yaml

from coscheduling.cli import build_parser
from coscheduling.config import parse_config
from coscheduling.plugins.registry import default_registry
from coscheduling.server.server import GrpcSettings


def test_grpc_and_metrics_listen_on_loopback_by_default() -> None:
    assert GrpcSettings().address.startswith("127.0.0.1:")
    for command in (["run"], ["serve"]):
        args = build_parser().parse_args(command)
        assert args.address.startswith("127.0.0.1:"), command
        assert not args.reflection and not args.tls_cert
    assert parse_config(None, default_registry()).metrics_bind_address.startswith("127.0.0.1:")


def test_grpc_clients_are_admitted_by_pod_label_and_namespace_name_together() -> None:
    """A tenant sets its own pods' labels, so the label alone admits anyone: every peer of
    the shipped NetworkPolicy that selects pods also names their namespaces by
    kubernetes.io/metadata.name, which the API server sets and nobody can change."""
    deployment = Path(__file__).parents[2] / "deploy" / "30-deployment.yaml"
    (policy,) = [d for d in yaml.safe_load_all(deployment.read_text())
                 if d and d["kind"] == "NetworkPolicy"]
    peers = [peer for rule in policy["spec"]["ingress"] for peer in rule.get("from", ())]
    assert peers
    for peer in peers:
        assert peer["podSelector"]["matchLabels"] == {
            "batch.scheduler.tencent.com/grpc-client": "true"}
        assert peer["namespaceSelector"] == {"matchExpressions": [{
            "key": "kubernetes.io/metadata.name", "operator": "In",
            "values": ["coscheduling-system"]}]}


def test_fencing_without_a_lease_lets_other_schedulers_bind() -> None:
    """The API server looks a policy binding's Lease up before its matchConditions: with
    Deny, a cluster where no replica has led yet (the Lease not made) refuses every pod
    Binding and deletion of every scheduler, the chart's own pods' included."""
    fencing = Path(__file__).parents[2] / "deploy" / "40-fencing.yaml"
    bindings = [d for d in yaml.safe_load_all(fencing.read_text())
                if d and d["kind"] == "ValidatingAdmissionPolicyBinding"]
    assert len(bindings) == 2
    for binding in bindings:
        assert binding["spec"]["paramRef"]["parameterNotFoundAction"] == "Allow"
