"""The three contenders, each run as its own process so CPU and memory are measured alike.

Every process started here is stopped here (SIGTERM, then SIGKILL), by its own pid.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from bench import upstream
from coscheduling.config.load import dump_defaults

OUR_SCHEDULER_NAME = "batch-scheduler"
OUR_METRICS_ADDRESS = "127.0.0.1:10251"  # our default metricsBindAddress
OUR_GRPC_ADDRESS = "127.0.0.1:50051"  # our default gRPC plugin server
OURS_CONFIG_VAR = "BENCH_OURS_CONFIG"  # JSON: top-level configuration keys to change
OURS_ARGS_VAR = "BENCH_OURS_ARGS"  # extra `coscheduling run` arguments (shell words)
# A checkout of an earlier commit of ours: adds the contenders "ours-base" (its own defaults)
# and "ours-base-eq" (equal limits), to compare two versions in one run (e.g. against the
# last published results).
BASE_SOURCE_VAR = "BENCH_BASE_SOURCE"
# Set (to anything): every contender's cache lock holds are timed (bench/locktrace), written
# to cache-lock.json in its run's folder.
LOCK_TRACE_VAR = "BENCH_LOCK_TRACE"
CEILING_SCHEDULER_NAME = "bench-ceiling"
NATIVE_SCHEDULER_NAME = "default-scheduler"
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


# "Equal limits": every contender's API client gets this QPS and burst (the value the
# harness gave upstream before; anchors §13). "Defaults": each scheduler's own.
EQUAL_QPS = 5000
EQUAL_BURST = 10000


@dataclass
class Contender:
    """How to start one scheduler and what its pods and PodGroups look like."""

    key: str  # ceiling | upstream | ours, with "-eq" for the equal-limits variant
    base: str  # ceiling | upstream | native | ours
    label: str
    scheduler_name: str
    gangs: bool  # whether PodGroups are created (the ceiling has no gang semantics)
    upstream_api: bool = False
    native_api: bool = False  # gangs as Kubernetes' own Workload/PodGroup objects
    qps: float | None = None  # None: the scheduler's own default
    burst: int | None = None
    metrics_url: str | None = None
    notes: list[str] = field(default_factory=list)
    source: Path | None = None  # ours from this checkout instead of the harness's own

    @property
    def limits(self) -> str:
        return "defaults" if self.qps is None else "equal"

    @property
    def queues(self) -> bool:
        """Whether it reads our Queue objects (W7)."""
        return self.base == "ours"

    def command(self, kubeconfig: Path, workdir: Path, recycle: bool = False) -> list[str]:
        """``recycle``: pods finish during the run (W8): the ceiling reuses their room."""
        if self.base == "ceiling":
            return [sys.executable, "-m", "bench.ceiling", f"--kubeconfig={kubeconfig}",
                    "--namespace=bench", f"--scheduler-name={self.scheduler_name}",
                    *(["--recycle"] if recycle else [])]
        if self.base in ("upstream", "native"):
            port = free_port()
            self.metrics_url = f"https://127.0.0.1:{port}/metrics"
            if self.base == "native":
                from bench import native
                return native.command(kubeconfig, workdir, port, self.qps, self.burst)
            return upstream.command(upstream.binary_path(), kubeconfig, workdir, port,
                                    self.qps, self.burst)
        return self._ours(kubeconfig, workdir)

    def _ours(self, kubeconfig: Path, workdir: Path) -> list[str]:
        command = [sys.executable, "-m", "coscheduling", "run", f"--kubeconfig={kubeconfig}"]
        extra = shlex.split(os.environ.get(OURS_ARGS_VAR, ""))
        if extra:  # experiments only, e.g. "-v 1" for a debug log
            command.extend(extra)
            self.notes.append(f"arguments added by ${OURS_ARGS_VAR}: {' '.join(extra)}")
        address = OUR_METRICS_ADDRESS
        if not _port_free(address):
            address = f"127.0.0.1:{free_port()}"
            self.notes.append(f"{OUR_METRICS_ADDRESS} was busy: metricsBindAddress {address}")
        overrides = json.loads(os.environ.get(OURS_CONFIG_VAR) or "{}")
        if overrides:
            self.notes.append(f"configuration changed by ${OURS_CONFIG_VAR}: {overrides}")
        if address != OUR_METRICS_ADDRESS or self.qps is not None or overrides:
            # The defaults, with only the port and (equal limits) the client limits changed,
            # and for experiments what $BENCH_OURS_CONFIG sets (top-level keys).
            config = _defaults_of(self.source)
            config["metricsBindAddress"] = address
            if self.qps is not None:
                config["clientConnection"].update(qps=self.qps, burst=self.burst)
            config.update(overrides)
            path = workdir / "ours-config.yaml"
            path.write_text(yaml.safe_dump(config, sort_keys=False))
            command.append(f"--config={path}")
        if not _port_free(OUR_GRPC_ADDRESS):
            grpc = f"127.0.0.1:{free_port()}"
            command.append(f"--address={grpc}")
            self.notes.append(f"{OUR_GRPC_ADDRESS} was busy: gRPC on {grpc}")
        self.metrics_url = f"http://{address}/metrics"
        return command


def contenders() -> dict[str, Contender]:
    """Every contender, with its own client limits and with the equal ones."""
    ceiling = Contender("ceiling", "ceiling", "ceiling (bind round-robin)",
                        CEILING_SCHEDULER_NAME, gangs=False)
    found: dict[str, Contender] = {"ceiling": ceiling}
    for limits in ("defaults", "equal"):
        suffix = "" if limits == "defaults" else "-eq"
        qps, burst = (None, None) if limits == "defaults" else (EQUAL_QPS, EQUAL_BURST)
        found[f"upstream{suffix}"] = Contender(
            f"upstream{suffix}", "upstream",
            f"upstream (scheduler-plugins v{upstream.PLUGINS_VERSION}, {limits})",
            upstream.PROFILE, gangs=True, upstream_api=True, qps=qps, burst=burst)
        found[f"native{suffix}"] = Contender(
            f"native{suffix}", "native", f"native (kube-scheduler gang scheduling, {limits})",
            NATIVE_SCHEDULER_NAME, gangs=True, native_api=True, qps=qps, burst=burst)
        found[f"ours{suffix}"] = Contender(
            f"ours{suffix}", "ours", f"ours (coscheduling, {limits})", OUR_SCHEDULER_NAME,
            gangs=True, qps=qps, burst=burst)
    base = os.environ.get(BASE_SOURCE_VAR)
    if base:
        source = Path(base).resolve()
        commit = _commit_of(source)
        found["ours-base"] = Contender(
            "ours-base", "ours", f"ours from {source} ({commit}, defaults)",
            OUR_SCHEDULER_NAME, gangs=True, source=source)
        found["ours-base-eq"] = Contender(
            "ours-base-eq", "ours", f"ours from {source} ({commit}, equal limits)",
            OUR_SCHEDULER_NAME, gangs=True, source=source, qps=EQUAL_QPS, burst=EQUAL_BURST)
    return found


def _defaults_of(source: Path | None) -> dict[str, Any]:
    """The configuration defaults of the checkout ``source`` (an earlier commit may not
    know keys added since), or of this one."""
    if source is None:
        return dump_defaults()
    code = ("import json; from coscheduling.config.load import dump_defaults as d; "
            "print(json.dumps(d()))")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           check=True, cwd=source, env={**os.environ, "PYTHONPATH": str(source)})
    return dict(json.loads(found.stdout))


def _commit_of(source: Path) -> str:
    try:
        return subprocess.run(["git", "-C", str(source), "log", "-1", "--format=%h %s"],
                              capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "not a git checkout"


class Process:
    """A started contender; `stop()` is safe to call more than once."""

    def __init__(self, command: list[str], log_path: Path, cwd: Path,
                 source: Path | None = None) -> None:
        self.log_path = log_path
        self._log: IO[bytes] = log_path.open("ab")
        # `python -m bench.ceiling` runs in the run's directory: put the repo on its path
        # (and before it the checkout a contender runs from, if it has one).
        trace = str(REPO / "bench" / "locktrace") if os.environ.get(LOCK_TRACE_VAR) else ""
        path = os.pathsep.join(filter(None, [trace, str(source or ""), str(REPO),
                                             os.environ.get("PYTHONPATH")]))
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
