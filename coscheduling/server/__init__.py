"""The gRPC plugin server: every scheduling extension point of the running scheduler,
callable remotely (service ``coscheduling.v1.Scheduling``, see proto/ and docs/grpc.md)."""

from coscheduling.server.polling import poll_inline

poll_inline()  # before grpc is first imported (see polling.py)

from coscheduling.server.server import GrpcSettings, PluginServer, build_server  # noqa: E402

__all__ = ["GrpcSettings", "PluginServer", "build_server"]
