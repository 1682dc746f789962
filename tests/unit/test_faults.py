"""Fault injection points and fenced Bindings (issue 13), without a cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from coscheduling.cli import main
from coscheduling.cluster.client import ClientSettings
from coscheduling.cluster.fencing import LEADER_ANNOTATION, BindingClient
from coscheduling.cluster.kubeconfig import Endpoint
from coscheduling.ops.faults import EXIT_CODE, Fault


@pytest.mark.parametrize(("value", "point", "count"), [
    ("after-bind:1", "after-bind", 1),
    ("after-bind:12", "after-bind", 12),
    ("stop-before-bind:2", "stop-before-bind", 2),
])
def test_fault_points_parse(value: str, point: str, count: int) -> None:
    fault = Fault.parse(value)
    assert (fault.point, fault.count) == (point, count)


@pytest.mark.parametrize("value", ["after-bind", "after-bind:0", "after-bind:-1",
                                   "after-bind:x", "before-lunch:1", ":1"])
def test_malformed_fault_points_are_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError, match="COSCHEDULING_FAULT"):
        Fault.parse(value)


@pytest.mark.parametrize("command", ["run", "serve"])
def test_a_malformed_fault_is_one_line_and_exit_2(command: str, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("COSCHEDULING_FAULT", "after-lunch:1")
    assert main([command]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "COSCHEDULING_FAULT='after-lunch:1'" in err[0], err


def test_after_bind_fires_on_the_kth_bind_of_one_gang_only() -> None:
    """Counted per gang: binds of other gangs (and of pods without one) do not add up."""
    script = (
        "from coscheduling.ops.faults import Fault\n"
        "f = Fault.parse('after-bind:2')\n"
        "for group in ('ns/a', 'ns/b', '', 'ns/c', 'ns/b'):\n"
        "    print('bound', group or '-', flush=True)\n"
        "    f.after_bind(group)\n"
        "print('survived', flush=True)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                            timeout=60, check=False)
    assert result.returncode == EXIT_CODE
    assert result.stdout.split("\n")[:-1] == ["bound ns/a", "bound ns/b", "bound -",
                                               "bound ns/c", "bound ns/b"]
    assert "exiting after bind 2 of gang ns/b" in result.stderr


class _Recorder(BaseHTTPRequestHandler):
    """A stand-in API server on loopback that records what it is sent and answers {}."""

    sent: list[tuple[str, str, Any]] = []

    def _record(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.sent.append((self.command, self.path, json.loads(self.rfile.read(length))))
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_POST = do_PATCH = _record

    def log_message(self, format: str, *args: object) -> None:
        return


@pytest.fixture
def api() -> Iterator[tuple[str, list[tuple[str, str, Any]]]]:
    _Recorder.sent = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", _Recorder.sent
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize(("leader", "annotations"), [
    ("replica-1_ab12", {LEADER_ANNOTATION: "replica-1_ab12"}),
    ("", None),  # leader election off: nothing to fence against
])
def test_bindings_carry_the_leader_identity(api: tuple[str, list[Any]], leader: str,
                                            annotations: Any) -> None:
    client = BindingClient(ClientSettings(token="t"), Endpoint(host=api[0]))
    client.leader = leader
    client.bind("ns", "p", "uid-1", "n1")
    client.patch("/api/v1/namespaces/ns/pods/p/status", {"status": {}})
    client.close()
    (method, path, body), (_, _, patch) = api[1]
    assert (method, path) == ("POST", "/api/v1/namespaces/ns/pods/p/binding")
    assert body["metadata"].get("annotations") == annotations
    assert body["metadata"]["uid"] == "uid-1" and body["target"]["name"] == "n1"
    assert "metadata" not in patch  # only Bindings are marked
