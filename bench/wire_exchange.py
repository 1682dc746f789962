"""The client's own CPU per exchange (coscheduling.cluster.http_wire), one wire.py against another.

    python -m bench.wire_exchange OLD_WIRE_PY [NEW_WIRE_PY]   (default: the checked-out one)

e.g. ``git show REV:coscheduling/cluster/http_wire.py > /tmp/old_wire.py`` first. A loopback
server in its own process answers every request at once with a small JSON body, so the
figure is the client's CPU time (process_time) per GET on a kept connection, the median of
5 rounds of 10,000, the two files alternating round by round.
"""

from __future__ import annotations

import importlib.util
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType

BODY = b'{"kind":"Status","status":"Success"}' * 8
ANSWER = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
          % len(BODY)) + BODY
ROUNDS, REQUESTS = 5, 10_000


def _load(path: str, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _answer_forever(conn: socket.socket) -> None:
    pending = b""
    while data := conn.recv(65536):
        pending += data
        while b"\r\n\r\n" in pending:
            _, _, pending = pending.partition(b"\r\n\r\n")
            conn.sendall(ANSWER)


def serve() -> None:
    """The server process: prints its port, answers until killed."""
    listener = socket.create_server(("127.0.0.1", 0))
    print(listener.getsockname()[1], flush=True)
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_answer_forever, args=(conn,), daemon=True).start()


def cpu_per_exchange(module: ModuleType, port: int) -> float:
    """Microseconds of this process's CPU per exchange, over one round."""
    wire = module.Wire(f"http://127.0.0.1:{port}", None, None, keep=4)
    headers = {"Accept": "application/json", "User-Agent": "bench"}
    wire.exchange("GET", "/warm", headers, None, 2, 2)
    started = time.process_time()
    for _ in range(REQUESTS):
        wire.exchange("GET", "/api/v1/namespaces/ns/pods/p", headers, None, 2, 2)
    spent = time.process_time() - started
    wire.close()
    return spent / REQUESTS * 1e6


def main(argv: list[str]) -> None:
    if argv[:1] == ["--serve"]:
        serve()
        return
    new = argv[1] if len(argv) > 1 else str(Path(__file__).parents[1] / "coscheduling"
                                            / "cluster" / "wire.py")
    modules = {"old": _load(argv[0], "old_wire"), "new": _load(new, "new_wire")}
    server = subprocess.Popen([sys.executable, "-m", "bench.wire_exchange", "--serve"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        results: dict[str, list[float]] = {name: [] for name in modules}
        for _ in range(ROUNDS):
            for name, module in modules.items():
                results[name].append(cpu_per_exchange(module, port))
    finally:
        server.kill()
    for name, figures in results.items():
        print(f"{name}: median {statistics.median(figures):.1f} us of client CPU per "
              f"exchange ({ROUNDS} rounds of {REQUESTS}: "
              f"{', '.join(f'{f:.1f}' for f in figures)})")


if __name__ == "__main__":
    main(sys.argv[1:])
