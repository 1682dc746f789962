"""The gRPC plugin server: every scheduling extension point of the running scheduler,
callable remotely (service ``coscheduling.v1.Scheduling``, see proto/ and docs/grpc.md)."""

from coscheduling.server.server import GrpcSettings, PluginServer, build_server

__all__ = ["GrpcSettings", "PluginServer", "build_server"]
