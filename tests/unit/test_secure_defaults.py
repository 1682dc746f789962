"""Everything the scheduler listens on stays on this machine unless told otherwise."""

from __future__ import annotations

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
