"""The three contenders, each run as its own process so CPU and memory are measured alike.

Every process started here is stopped here (SIGTERM, then SIGKILL), by its own pid.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import yaml

from bench import upstream
from coscheduling.config.load import dump_defaults

OUR_SCHEDULER_NAME = "batch-scheduler"
OUR_METRICS_ADDRESS = "127.0.0.1:10251"  # our default metricsBindAddress
CEILING_SCHEDULER_NAME = "bench-ceiling"
STOP_GRACE = 10.0
REPO = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _port_free(address: str) -> bool:
    host, _, port = address.rpartition(":")
    with socket.socket() as sock:
        try:
            sock.bind((host, int(port)))
        except OSError:
            return False
    return True


@dataclass
class Contender:
    """How to start one scheduler and what its pods and PodGroups look like."""

    key: str  # ceiling | upstream | ours
    label: str
    scheduler_name: str
    gangs: bool  # whether PodGroups are created (the ceiling has no gang semantics)
    upstream_api: bool = False
    metrics_url: str | None = None
    notes: list[str] = field(default_factory=list)

    def command(self, kubeconfig: Path, workdir: Path) -> list[str]:
        if self.key == "ceiling":
            return [sys.executable, "-m", "bench.ceiling", f"--kubeconfig={kubeconfig}",
                    "--namespace=bench", f"--scheduler-name={self.scheduler_name}"]
        if self.key == "upstream":
            port = free_port()
            self.metrics_url = f"https://127.0.0.1:{port}/metrics"
            return upstream.command(upstream.binary_path(), kubeconfig, workdir, port)
        command = [sys.executable, "-m", "coscheduling", "run", f"--kubeconfig={kubeconfig}"]
        address = OUR_METRICS_ADDRESS
        if not _port_free(address):
            # Only the port differs from the defaults: something else holds 10251.
            address = f"127.0.0.1:{free_port()}"
            defaults = dump_defaults()
            defaults["metricsBindAddress"] = address
            path = workdir / "ours-config.yaml"
            path.write_text(yaml.safe_dump(defaults, sort_keys=False))
            command.append(f"--config={path}")
            self.notes.append(f"{OUR_METRICS_ADDRESS} was busy: defaults with "
                              f"metricsBindAddress {address}")
        self.metrics_url = f"http://{address}/metrics"
        return command


def contenders() -> dict[str, Contender]:
    return {
        "ceiling": Contender("ceiling", "ceiling (bind round-robin)", CEILING_SCHEDULER_NAME,
                             gangs=False),
        "upstream": Contender("upstream", f"upstream (scheduler-plugins "
                              f"v{upstream.PLUGINS_VERSION})", upstream.PROFILE, gangs=True,
                              upstream_api=True),
        "ours": Contender("ours", "ours (coscheduling, defaults)", OUR_SCHEDULER_NAME,
                          gangs=True),
    }


class Process:
    """A started contender; `stop()` is safe to call more than once."""

    def __init__(self, command: list[str], log_path: Path, cwd: Path) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        # `python -m bench.ceiling` runs in the run's directory: put the repo on its path.
        path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        self.popen = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=self._log,
                                      stderr=subprocess.STDOUT, cwd=cwd,
                                      env={**os.environ, "PYTHONPATH": path},
                                      start_new_session=True)
        self.pid = self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self) -> int | None:
        if self.popen.poll() is None:
            self.popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(STOP_GRACE)
        if self.popen.poll() is None:
            self.popen.kill()
            self.popen.wait()
        self._log.close()
        return self.popen.returncode


class Profiler:
    """py-spy attached to our scheduler, sampling only the thread that holds the GIL.

    Threads blocked on a socket (watches, binds) would otherwise fill the profile: what
    limits a Python scheduler is the time its threads spend holding the GIL.
    """

    def __init__(self, pid: int, output: Path, log_path: Path) -> None:
        binary = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
        self.output = output
        self._log = log_path.open("ab")
        self.popen = subprocess.Popen(
            [binary, "record", "--pid", str(pid), "--format", "raw", "--function", "--gil",
             "--rate", "100", "--output", str(output)],
            stdin=subprocess.DEVNULL, stdout=self._log, stderr=subprocess.STDOUT,
            start_new_session=True)

    def stop(self) -> None:
        """SIGINT makes py-spy write what it has sampled, then exit."""
        if self.popen.poll() is None:
            self.popen.send_signal(signal.SIGINT)
            try:
                self.popen.wait(60)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self._log.close()
