"""How grpc's core reads its sockets: on the thread that waits for the call's events.

grpcio's default since 1.6x, its EventEngine, reads every connection on a pool of threads of
its own and hands each event over to the Python thread that waits on the completion queue:
measured on a loaded 2-core machine (bench/grpc_latency.py), that is about six more thread
wake-ups per call on the server, each one a chance to wait for a core. With the EventEngine
listener and client turned off, the legacy poller reads on the thread that waits: the same
calls, fewer hand-overs, a lower p50 and less CPU per call (bench/RESULTS.md, "gRPC plugin
server latency"). ``GRPC_EXPERIMENTS`` is grpc's documented switch for this; grpc reads it
once, when it is first imported, so :func:`poll_inline` runs before that (the package's
``__init__`` calls it before importing anything that imports grpc).
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping

VARIABLE = "GRPC_EXPERIMENTS"
EXPERIMENTS = ("event_engine_listener", "event_engine_client")


def poll_inline(environ: MutableMapping[str, str] | None = None) -> bool:
    """Turn the EventEngine listener and client off, unless ``GRPC_EXPERIMENTS`` already
    names them (an operator's choice wins). False when grpc was already imported: then it
    is too late, and grpc keeps what it read."""
    environ = os.environ if environ is None else environ
    named = [part.strip() for part in environ.get(VARIABLE, "").split(",") if part.strip()]
    mentioned = {part.lstrip("-") for part in named}
    named += [f"-{name}" for name in EXPERIMENTS if name not in mentioned]
    environ[VARIABLE] = ",".join(named)
    return "grpc" not in sys.modules
