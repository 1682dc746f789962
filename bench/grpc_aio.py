"""The plugin server on grpc.aio, for bench/grpc_latency.py's comparison only (--server aio).

Built from the production server's own parts (coscheduling.server.server: the servicer, the
checks every call passes, the codecs, the channel options, the failure statuses, the
reservations' expiry): only the server differs. grpcio's asyncio server runs each handler on
its event loop, inline, with no thread pool; that is its best case, so the comparison is
fair to it. The project keeps the thread-pool server (see grpc_latency.py's docstring for
the figures and the reasons); this variant is not fit to serve users:

* the handlers take the scheduler's cache lock, which the scheduling loop holds for a whole
  cycle; on one event loop that wait would stall every call, health checks included, and
  moving them to a thread pool gives back the hand-over the asyncio server saves;
* WatchDecisions is not served (its blocking subscriber would need an asyncio rewrite;
  the bench does not call it).
"""

from __future__ import annotations

import asyncio
import sys
import threading
from typing import Any

import grpc
from grpc_health.v1 import health, health_pb2_grpc

from coscheduling.server.server import (
    AlwaysLeading,
    GrpcSettings,
    Rpc,
    failure,
    server_options,
    service_rpcs,
)
from coscheduling.server.servicer import SERVICE_NAME, SchedulingServicer


def _handler(rpc: Rpc) -> Any:
    """A unary RPC on the event loop: the same checks and statuses as the sync server's."""
    name, check, behavior = rpc.method.name, rpc.check, rpc.behavior

    async def unary(request: Any, context: Any) -> Any:
        try:
            check(request, context)
            return behavior(request, context)
        except Exception as err:
            await context.abort(*failure(name, err))

    return grpc.unary_unary_rpc_method_handler(unary, request_deserializer=rpc.decode,
                                               response_serializer=rpc.encode)


def _expire(servicer: SchedulingServicer, settings: GrpcSettings,
            stopping: threading.Event) -> None:
    """The reservations' expiry, as PluginServer runs it."""
    interval = min(1.0, settings.reservation_timeout / 4)
    while not stopping.wait(interval):
        servicer.expire_reservations()


async def serve(scheduler: Any, settings: GrpcSettings) -> None:
    """Serve until standard input closes; prints the address once listening."""
    server = grpc.aio.server(options=server_options(settings),
                             maximum_concurrent_rpcs=settings.max_concurrent_rpcs)
    authorizer = settings.authorizer()
    servicer = SchedulingServicer(scheduler, settings.max_streams,
                                  reservation_timeout=settings.reservation_timeout,
                                  authorizer=authorizer)
    handlers = {rpc.method.name: _handler(rpc)
                for rpc in service_rpcs(servicer, authorizer, AlwaysLeading())
                if not rpc.method.server_streaming}
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE_NAME,
                                                                          handlers),))
    server.add_registered_method_handlers(SERVICE_NAME, handlers)
    health_pb2_grpc.add_HealthServicer_to_server(health.aio.HealthServicer(), server)
    port = server.add_insecure_port(settings.address)
    servicer.attach()
    await server.start()
    stopping = threading.Event()
    threading.Thread(target=_expire, args=(servicer, settings, stopping), daemon=True).start()
    print(f"{settings.address.rsplit(':', 1)[0]}:{port}", flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    stopping.set()
    await server.stop(1)
    servicer.detach()
