"""Configuration: defaults, plugin merging, and validation that names the field."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling.config import ConfigError, parse_config
from coscheduling.config.load import dump_defaults
from coscheduling.plugins.registry import default_registry

HEAD = {"apiVersion": "config.batch.scheduler.tencent.com/v1",
        "kind": "SchedulerConfiguration"}


def _parse(**fields: Any) -> Any:
    return parse_config({**HEAD, **fields}, default_registry())


def test_defaults() -> None:
    config = parse_config(None, default_registry())
    assert config.scheduler_name == "batch-scheduler"
    assert config.plugins.queue_sort == "Coscheduling"
    assert "Coscheduling" in config.plugins.permit
    # kube-scheduler's default weights, for the plugins this scheduler has.
    assert {"TaintToleration": 3, "NodeAffinity": 2, "NodeResourcesFit": 1,
            "NodeResourcesBalancedAllocation": 1, "ImageLocality": 1}.items() \
        <= config.plugins.score.items()
    assert config.plugins.pre_filter[0] == "UnsupportedFields"
    assert config.plugin_args["Coscheduling"] == {
        "defaultMaxScheduleSeconds": 60.0, "freezeSeconds": 20.0,
        "maxReservationSeconds": 1800.0, "maxReservationsPerQueue": 1,
        "reserveFromMembers": 8, "reserveAfterSeconds": 60.0, "reserveFromShare": 0.25,
        "backfill": True,
        "lendReclaimable": False,
        "scaleUp": {"enabled": False,
                    "provisioningClassName": "best-effort-atomic-scale-up.autoscaling.x-k8s.io",
                    "retrySeconds": 10.0, "maxRetrySeconds": 300.0, "guardNodes": False,
                    "preemptionDelaySeconds": 0.0, "provisionedHoldSeconds": 600.0}}
    assert config.leader_election.lease_duration == 15
    assert (config.pod_initial_backoff_seconds, config.pod_max_backoff_seconds) == (1, 10)


def test_dumped_defaults_parse_back_to_the_defaults() -> None:
    assert parse_config(dump_defaults(), default_registry()) == parse_config(
        None, default_registry())


def test_plugin_merge_disable_enable_and_weights() -> None:
    config = _parse(plugins={
        "score": {"disabled": [{"name": "*"}],
                  "enabled": [{"name": "NodeResourcesFit", "weight": 5}]},
        "queueSort": {"disabled": [{"name": "Coscheduling"}],
                      "enabled": [{"name": "PrioritySort"}]},
        "filter": {"disabled": [{"name": "NodePorts"}]},
    })
    assert config.plugins.score == {"NodeResourcesFit": 5}
    assert config.plugins.queue_sort == "PrioritySort"
    assert "NodePorts" not in config.plugins.filter
    assert config.plugins.filter[:2] == ("Coscheduling", "NodeUnschedulable")


def test_grpc_authorization_lists_and_reservation_timeout() -> None:
    grpc = _parse(grpc={"readOnlyClients": ["dashboard"], "mutatingClients": ["driver", "*"],
                        "reservationTimeout": "90s"}).grpc
    assert (grpc.read_only_clients, grpc.mutating_clients, grpc.reservation_timeout) == (
        ("dashboard",), ("driver", "*"), 90.0)
    assert _parse().grpc.reservation_timeout == 60.0


def test_grpc_identities_are_typed_and_given_namespaces() -> None:
    grpc = _parse(grpc={"mutatingClients": ["DNS:a.example", "URI:spiffe://x/y", "legacy"],
                        "clientNamespaces": {"URI:spiffe://x/y": ["team-b"]},
                        "simulatesPerMinute": 6}).grpc
    assert grpc.mutating_clients == ("DNS:a.example", "URI:spiffe://x/y", "legacy")
    assert grpc.client_namespaces == {"URI:spiffe://x/y": ("team-b",)}
    assert grpc.simulates_per_minute == 6
    assert (_parse().grpc.client_namespaces, _parse().grpc.simulates_per_minute) == ({}, 30)


def test_schedulername_default_scheduler_makes_it_the_only_scheduler() -> None:
    assert _parse(schedulerName="default-scheduler").scheduler_name == "default-scheduler"


@pytest.mark.parametrize(("fields", "path"), [
    ({"apiVersion": "v0"}, "apiVersion"),
    ({"kind": "Other"}, "kind"),
    ({"schedulerNmae": "x"}, "schedulerNmae"),
    ({"schedulerName": ""}, "schedulerName"),
    ({"schedulerName": 7}, "schedulerName"),
    ({"percentageOfNodesToScore": 101}, "percentageOfNodesToScore"),
    ({"percentageOfNodesToScore": -1}, "percentageOfNodesToScore"),
    ({"podInitialBackoffSeconds": 0}, "podInitialBackoffSeconds"),
    ({"podInitialBackoffSeconds": 5, "podMaxBackoffSeconds": 2}, "podMaxBackoffSeconds"),
    ({"podMaxBackoffSeconds": "ten"}, "podMaxBackoffSeconds"),
    ({"bindingParallelism": 0}, "bindingParallelism"),
    ({"bindingParallelism": True}, "bindingParallelism"),
    ({"clientConnection": {"qps": -5}}, "clientConnection.qps"),
    ({"clientConnection": {"burst": 0}}, "clientConnection.burst"),
    ({"clientConnection": {"kubeconfg": "x"}}, "clientConnection.kubeconfg"),
    ({"clientConnection": {"acceptContentTypes": "application/cbor"}},
     "clientConnection.acceptContentTypes"),
    ({"clientConnection": {"acceptContentTypes": ["application/json"]}},
     "clientConnection.acceptContentTypes"),
    ({"metricsBindAddress": "nowhere"}, "metricsBindAddress"),
    ({"leaderElection": {"leaseDuration": "5s", "renewDeadline": "10s"}},
     "leaderElection.renewDeadline"),
    ({"leaderElection": {"retryPeriod": "-1s"}}, "leaderElection.retryPeriod"),
    ({"leaderElection": {"leaderElect": "yes"}}, "leaderElection.leaderElect"),
    ({"plugins": {"score": {"enabled": [{"name": "Nope"}]}}}, "plugins.score.enabled[0].name"),
    ({"plugins": {"score": {"enabled": [{"name": "NodeResourcesFit", "weight": 0}]}}},
     "plugins.score.enabled[0].weight"),
    ({"plugins": {"bind": {"disabled": [{"name": "*"}]}}}, "plugins.bind"),
    ({"plugins": {"queueSort": {"enabled": [{"name": "PrioritySort"}]}}}, "plugins.queueSort"),
    ({"plugins": {"reserv": {}}}, "plugins.reserv"),
    ({"pluginConfig": [{"name": "Coscheduling", "args": {"freezeSeconds": -1}}]},
     "pluginConfig[0].args.freezeSeconds"),
    ({"pluginConfig": [{"name": "Coscheduling", "args": {"defaultMaxScheduleSeconds": 0}}]},
     "pluginConfig[0].args.defaultMaxScheduleSeconds"),
    ({"pluginConfig": [{"name": "Coscheduling", "args": {"freezeSecs": 1}}]},
     "pluginConfig[0].args.freezeSecs"),
    ({"pluginConfig": [{"name": "NodeResourcesFit",
                        "args": {"scoringStrategy": {"type": "Random"}}}]},
     "pluginConfig[0].args.scoringStrategy.type"),
    ({"pluginConfig": [{"name": "Ghost", "args": {}}]}, "pluginConfig[0].name"),
    ({"pluginConfig": "all"}, "pluginConfig"),
    ({"grpc": {"readOnlyClients": "dashboard"}}, "grpc.readOnlyClients"),
    ({"grpc": {"mutatingClients": ["driver", ""]}}, "grpc.mutatingClients[1]"),
    ({"grpc": {"mutatingClients": [7]}}, "grpc.mutatingClients[0]"),
    ({"grpc": {"reservationTimeout": "0s"}}, "grpc.reservationTimeout"),
    ({"grpc": {"readers": []}}, "grpc.readers"),
    ({"grpc": {"mutatingClients": ["email:driver@example.com"]}}, "grpc.mutatingClients[0]"),
    ({"grpc": {"readOnlyClients": ["IP:10.0.0.1"]}}, "grpc.readOnlyClients[0]"),
    ({"grpc": {"mutatingClients": ["a"], "clientNamespaces": {"b": ["x"]}}},
     "grpc.clientNamespaces[b]"),
    ({"grpc": {"mutatingClients": ["a"], "clientNamespaces": {"a": []}}},
     "grpc.clientNamespaces[a]"),
    ({"grpc": {"mutatingClients": ["a"], "clientNamespaces": {"a": "x"}}},
     "grpc.clientNamespaces[a]"),
    ({"grpc": {"simulatesPerMinute": 0}}, "grpc.simulatesPerMinute"),
])
def test_nonsense_values_are_refused_naming_the_field(fields: dict[str, Any],
                                                      path: str) -> None:
    with pytest.raises(ConfigError) as err:
        _parse(**fields)
    assert err.value.path.startswith(path), (err.value.path, str(err.value))
    assert str(err.value).startswith(err.value.path)


def test_cli_reports_config_errors_without_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**HEAD, "bindingParallelism": -4}))
    result = subprocess.run([sys.executable, "-m", "coscheduling", "config", "validate",
                             str(bad)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert "bindingParallelism: must be >= 1, got -4" in result.stderr
    assert "Traceback" not in result.stderr
    garbage = tmp_path / "garbage.yaml"
    garbage.write_text("{{{ not yaml")
    result = subprocess.run([sys.executable, "-m", "coscheduling", "config", "validate",
                             str(garbage)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and "not valid YAML" in result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize(("accept", "protobuf"), [
    (None, False),  # the default: JSON
    ("application/json", False),
    ("application/vnd.kubernetes.protobuf, application/json", True),
    ("application/vnd.kubernetes.protobuf", True),
])
def test_watches_read_protobuf_when_the_configuration_accepts_it_first(
        accept: str | None, protobuf: bool) -> None:
    section = {} if accept is None else {"acceptContentTypes": accept}
    assert _parse(clientConnection=section).client_connection.protobuf is protobuf
