"""The real Kubeflow training-operator, built from Go modules and run against a LocalCluster.

It is the producer of gang objects nobody here wrote: with `--gang-scheduler-name` it
creates scheduler-plugins or Volcano PodGroups for its jobs, so running it proves that this
scheduler takes those groups as they come. Built once into the same cache as the control
plane; its CRDs are copied there from the module (server-side applied: they are large).

Out of cluster it needs what its Deployment would give it: namespace `kubeflow`, the
(initially empty) webhook Secret and ValidatingWebhookConfiguration its cert rotator fills,
and the Secret's certificates as files, which nobody mounts here, so `start` writes them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from coscheduling.cluster.client import ApiError, ClientSettings, KubeClient

from .build import BuildError, cache_dir, exclusive_lock, find_go
from .launcher import LocalCluster, child_setup, free_ports, http_ok, log_tail

__all__ = [
    "TRAINING_OPERATOR",
    "TRAINING_OPERATOR_VERSION",
    "GoOperator",
    "OperatorBuild",
    "OperatorExited",
    "OperatorProcess",
    "OperatorStartError",
    "TrainingOperator",
    "TrainingOperatorBuild",
    "apply_crd",
    "ensure_operator",
    "ensure_training_operator",
]

Log = Callable[[str], None]

TRAINING_OPERATOR_VERSION = "1.8.1"
TRAINING_OPERATOR_MODULE = "github.com/kubeflow/training-operator"
TRAINING_OPERATOR_PACKAGE = f"{TRAINING_OPERATOR_MODULE}/cmd/training-operator.v1"
BINARY_NAME = "training-operator.v1"
CRD_SOURCE = "manifests/base/crds"

OPERATOR_NAMESPACE = "kubeflow"
WEBHOOK_SECRET = "training-operator-webhook-cert"
WEBHOOK_CONFIGURATION = "validator.training-operator.kubeflow.org"
CERT_FILES = ("tls.crt", "tls.key", "ca.crt")
CERT_SUBDIR = Path("k8s-webhook-server") / "serving-certs"
# v1.8.1's cert rotator waits for tls.crt here (a constant in its pkg/cert, no flag), while
# its webhook server reads the certificates under os.TempDir(): the per-run $TMPDIR we set.
ROTATOR_CERT_DIR = Path("/tmp") / CERT_SUBDIR
START_TIMEOUT = 120.0
START_ATTEMPTS = 2
"""An operator that exited while starting is started once more (see _start_process)."""
STOP_GRACE = 10.0
FIELD_MANAGER = "coscheduling-localcluster"


class OperatorStartError(RuntimeError):
    """The operator exited or did not become ready in time."""


class OperatorExited(OperatorStartError):
    """The operator process ended while it was starting."""


@dataclass(frozen=True)
class OperatorBuild:
    """The cached operator binary and the CRDs of the same module version."""

    binary: Path
    crds: Path
    crd_prefix: str = "kubeflow.org_"

    def crd_file(self, scheme: str) -> Path:
        """The CRD manifest of one kind, e.g. `pytorchjob`."""
        return self.crds / f"{self.crd_prefix}{scheme.lower()}s.yaml"


TrainingOperatorBuild = OperatorBuild


@dataclass(frozen=True)
class GoOperator:
    """An operator installed from a Go module (`go install package@version`; the module's
    go.mod must have no replace directives) into the cache, with the module's CRDs."""

    title: str  # the cache entry's name and what logs call it
    module: str
    package: str
    version: str
    binary_name: str
    crd_source: str  # the CRDs' directory inside the module
    crd_prefix: str
    probe_scheme: str  # a kind whose CRD must be there for the entry to be complete
    # Built inside a copy of the module (`go build ./<package>`) instead of `go install
    # package@version`, which also asks the proxy for the module's version list: some
    # proxies serve a module's versions but not that list.
    in_module: bool = False

    def directory(self) -> Path:
        return cache_dir() / "bin" / f"{self.title}-v{self.version}"

    def cached(self) -> OperatorBuild:
        root = self.directory()
        return OperatorBuild(root / self.binary_name, root / "crds", self.crd_prefix)


TRAINING_OPERATOR = GoOperator(
    "training-operator", TRAINING_OPERATOR_MODULE, TRAINING_OPERATOR_PACKAGE,
    TRAINING_OPERATOR_VERSION, BINARY_NAME, CRD_SOURCE, "kubeflow.org_", "pytorchjob")


def _default_log(message: str) -> None:
    print(f"[operator] {message}", file=sys.stderr, flush=True)


def operator_dir() -> Path:
    return TRAINING_OPERATOR.directory()


def _is_complete(operator: GoOperator, build: OperatorBuild) -> bool:
    return (build.binary.is_file() and os.access(build.binary, os.X_OK)
            and build.crd_file(operator.probe_scheme).is_file())


def ensure_operator(operator: GoOperator, log: Log = _default_log) -> OperatorBuild:
    """Return the cached operator, installing it from the Go module proxy first if missing."""
    build = operator.cached()
    if _is_complete(operator, build):
        return build
    go = find_go(f"{operator.title} v{operator.version}", operator.directory())
    with exclusive_lock(cache_dir() / "bin" / ".build.lock", log):
        if not _is_complete(operator, build):
            _install(go, operator, build, log)
    return build


def ensure_training_operator(log: Log = _default_log) -> OperatorBuild:
    return ensure_operator(TRAINING_OPERATOR, log)


def _go(go: str, args: Sequence[str], env: dict[str, str], cwd: Path) -> str:
    result = subprocess.run([go, *args], cwd=cwd, env=env, capture_output=True, text=True,
                            check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-40:])
        raise BuildError(f"go {' '.join(args)} failed (exit {result.returncode}):\n{tail}")
    return result.stdout


def _install(go: str, operator: GoOperator, build: OperatorBuild, log: Log) -> None:
    """`go install` into a scratch dir beside the cache entry, then rename it into place."""
    root = operator.directory()
    root.parent.mkdir(parents=True, exist_ok=True)
    target = f"{operator.package}@v{operator.version}"
    log(f"installing {target} from Go modules (first run only, a few minutes)...")
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix=f".{operator.title}-", dir=root.parent) as tmp:
        scratch = Path(tmp)
        staged = scratch / "out"
        env = {**os.environ, "CGO_ENABLED": "0", "GOBIN": str(staged), "GO111MODULE": "on"}
        if not operator.in_module:
            _go(go, ["install", "-ldflags=-s -w", target], env, scratch)
        module = json.loads(_go(go, ["mod", "download", "-json",
                                     f"{operator.module}@v{operator.version}"], env, scratch))
        if operator.in_module:
            _build_in_module(go, Path(module["Dir"]), operator, staged, env, scratch)
        shutil.copytree(Path(module["Dir"]) / operator.crd_source, staged / "crds")
        (staged / "crds").chmod(0o755)  # the module cache is read-only
        for manifest in (staged / "crds").iterdir():
            manifest.chmod(0o644)
        shutil.rmtree(root, ignore_errors=True)
        os.replace(staged, root)
    if not _is_complete(operator, build):
        raise BuildError(f"installing {target} left no {build.binary} or CRDs in {root}")
    log(f"installed {operator.title} v{operator.version} in "
        f"{time.monotonic() - started:.0f}s -> {root}")


def _build_in_module(go: str, source: Path, operator: GoOperator, staged: Path,
                     env: dict[str, str], scratch: Path) -> None:
    """`go build` the operator's package inside a writable copy of its module."""
    copy = scratch / "module"
    staged.mkdir(parents=True, exist_ok=True)
    shutil.copytree(source, copy)
    for path in (copy, *copy.rglob("*")):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)
    _go(go, ["build", "-mod=mod", "-ldflags=-s -w", "-o",
             str(staged / operator.binary_name), operator.package], env, copy)


class OperatorProcess:
    """One operator process against a cluster, logging to `workdir`, stopped by pid."""

    title = "operator"

    def __init__(self, workdir: Path, log: Log) -> None:
        self.workdir = Path(workdir).absolute()
        self.log = log
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def log_path(self) -> Path:
        return self.workdir / f"{self.title}.log"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def start(self) -> OperatorProcess:
        raise NotImplementedError

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after STOP_GRACE; safe to call twice."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_GRACE)
        if process.poll() is None:
            process.kill()
            process.wait()

    def __enter__(self) -> OperatorProcess:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    def _spawn(self, argv: list[str], env: dict[str, str]) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log_file:
            self.process = subprocess.Popen(
                argv, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT,
                cwd=self.workdir, env=env, start_new_session=True,
                preexec_fn=child_setup(True),
            )

    def _wait(self, condition: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not condition():
            process = self.process
            if process is not None and process.poll() is not None:
                raise OperatorExited(
                    f"{self.title} exited with code {process.returncode} while waiting "
                    f"for {what}; last lines of {self.log_path}:\n{log_tail(self.log_path)}")
            if time.monotonic() > deadline:
                raise OperatorStartError(
                    f"{self.title}: no {what} after {START_TIMEOUT:.0f}s; last lines of "
                    f"{self.log_path}:\n{log_tail(self.log_path)}")
            time.sleep(0.2)


class TrainingOperator(OperatorProcess):
    """One training-operator process against `cluster`, stopped by pid like the cluster."""

    title = "training-operator"

    def __init__(
        self,
        cluster: LocalCluster,
        workdir: Path,
        *,
        gang_scheduler_name: str | None,
        schemes: Sequence[str] = ("pytorchjob",),
        build: TrainingOperatorBuild | None = None,
        log: Log = _default_log,
    ) -> None:
        super().__init__(workdir, log)
        self.cluster = cluster
        self.gang_scheduler_name = gang_scheduler_name
        self.schemes = tuple(schemes)
        self.build = build
        self.metrics_port, self.probe_port, self.webhook_port = free_ports(3)

    @property
    def temp_dir(self) -> Path:
        """The operator's $TMPDIR: its webhook server reads certificates under it."""
        return self.workdir / "tmp"

    def argv(self, binary: Path) -> list[str]:
        gang = [f"--gang-scheduler-name={self.gang_scheduler_name}"] \
            if self.gang_scheduler_name else []
        return [
            str(binary),
            f"--kubeconfig={self.cluster.kubeconfig}",
            *gang,
            *(f"--enable-scheme={scheme}" for scheme in self.schemes),
            f"--metrics-bind-address=127.0.0.1:{self.metrics_port}",
            f"--health-probe-bind-address=127.0.0.1:{self.probe_port}",
            f"--webhook-server-port={self.webhook_port}",
        ]

    def start(self) -> TrainingOperator:
        """Prepare the cluster, start the process, hand it its certificates, wait for ready."""
        build = self.build or ensure_training_operator(self.log)
        self.build = build
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.temp_dir.mkdir(exist_ok=True)
        kube = KubeClient(ClientSettings(kubeconfig=str(self.cluster.kubeconfig)))
        try:
            self._apply_crds(kube, build)
            self._prepare_webhook_objects(kube)
            self._start_process(kube, build.binary)
        finally:
            kube.close()
        self.log(f"training-operator ready (pid {self.pid}, log {self.log_path})")
        return self

    # -- steps ---------------------------------------------------------------------------

    def _apply_crds(self, kube: KubeClient, build: TrainingOperatorBuild) -> None:
        for scheme in self.schemes:
            manifest = build.crd_file(scheme)
            if not manifest.is_file():
                raise OperatorStartError(f"scheme {scheme!r}: no CRD {manifest.name} in "
                                         f"{build.crds}")
            apply_crd(kube, yaml.safe_load(manifest.read_text()))

    def _prepare_webhook_objects(self, kube: KubeClient) -> None:
        """The objects the operator's Deployment manifests would have created."""
        _create_if_missing(kube, "/api/v1/namespaces", {
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": OPERATOR_NAMESPACE}})
        _create_if_missing(kube, f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets", {
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": WEBHOOK_SECRET, "namespace": OPERATOR_NAMESPACE}})
        _create_if_missing(
            kube, "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": WEBHOOK_CONFIGURATION}})

    def _start_process(self, kube: KubeClient, binary: Path) -> None:
        """Spawn the operator and hand it its webhook certificates.

        On a new cluster its rotator makes them, and its webhook server may look for them
        before they are copied to where it reads them; it then exits. Started again, the
        certificates are in the Secret already and are copied before it starts."""
        for attempt in range(START_ATTEMPTS):
            known = self._certs_in_secret(kube)
            if known:
                self._write_certs(known)
            self._spawn(self.argv(binary), {**os.environ, "TMPDIR": str(self.temp_dir)})
            try:
                if not known:
                    self._write_certs(self._wait_for_certs(kube))
                self._wait(self._ready, "its readyz check to pass")
                return
            except OperatorExited as exited:
                self.stop()
                if known or attempt + 1 == START_ATTEMPTS:
                    raise
                self.log(f"training-operator exited while starting; starting it again with "
                         f"the certificates it made ({str(exited).splitlines()[0]})")
            except BaseException:
                self.stop()
                raise

    def _certs_in_secret(self, kube: KubeClient) -> dict[str, bytes]:
        """The certificates the operator's rotator wrote to the Secret, or {} if not yet."""
        path = f"/api/v1/namespaces/{OPERATOR_NAMESPACE}/secrets/{WEBHOOK_SECRET}"
        data = kube.get(path).get("data") or {}
        if not all(data.get(name) for name in CERT_FILES):
            return {}
        return {name: base64.b64decode(data[name]) for name in CERT_FILES}

    def _wait_for_certs(self, kube: KubeClient) -> dict[str, bytes]:
        """The certificates once the operator's rotator has written them to the Secret."""
        found: dict[str, bytes] = {}

        def filled() -> bool:
            found.update(self._certs_in_secret(kube))
            return bool(found)

        self._wait(filled, f"the certificates in Secret {OPERATOR_NAMESPACE}/{WEBHOOK_SECRET}")
        return found

    def _write_certs(self, certs: dict[str, bytes]) -> None:
        """Where a mounted Secret would put them; each file replaced atomically, since
        another run may share the rotator's fixed directory (any valid pair will do there)."""
        for directory in (self.temp_dir / CERT_SUBDIR, ROTATOR_CERT_DIR):
            directory.mkdir(parents=True, exist_ok=True)
            for name, content in certs.items():
                partial = directory / f".{name}.{os.getpid()}"
                partial.write_bytes(content)
                partial.chmod(0o600)
                os.replace(partial, directory / name)

    def _ready(self) -> bool:
        return http_ok(f"http://127.0.0.1:{self.probe_port}/readyz", None)


def apply_crd(kube: KubeClient, crd: dict[str, Any], timeout: float = 60.0) -> None:
    """Server-side apply one CRD (client-side apply's annotation would overflow on large
    ones) and wait until it is established."""
    name = crd["metadata"]["name"]
    path = f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"
    kube.request("PATCH", path, query={"fieldManager": FIELD_MANAGER, "force": True},
                 body=crd, content_type="application/apply-patch+yaml")
    deadline = time.monotonic() + timeout
    while not _established(kube.get(path)):
        if time.monotonic() > deadline:
            raise OperatorStartError(f"CRD {name} not established after {timeout:.0f}s")
        time.sleep(0.1)


def _established(crd: dict[str, Any]) -> bool:
    return any(c.get("type") == "Established" and c.get("status") == "True"
               for c in (crd.get("status") or {}).get("conditions") or ())


def _create_if_missing(kube: KubeClient, path: str, body: dict[str, Any]) -> None:
    try:
        kube.create(path, body)
    except ApiError as error:
        if error.status != 409:
            raise

