"""ensure_training_operator: cached like the control plane, installed once, clear errors;
TrainingOperator: the flags an out-of-cluster operator is started with."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from coscheduling.localcluster import LocalCluster
from coscheduling.localcluster.build import BuildError, GoNotFoundError
from coscheduling.localcluster.operators import (
    TRAINING_OPERATOR_VERSION,
    GoOperator,
    TrainingOperator,
    TrainingOperatorBuild,
    ensure_operator,
    ensure_training_operator,
)

# Stands in for `go install` (writes $GOBIN/training-operator.v1), `go build -o` (writes
# that file) and `go mod download -json` (answers with a module dir holding the CRDs); logs
# each call and the directory it ran in.
FAKE_GO = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open({calls!r}, "a") as calls:
    calls.write(json.dumps({{"args": args, "gobin": os.environ.get("GOBIN"),
                             "cwd": os.getcwd()}}) + "\\n")
if os.environ.get("FAKE_GO_FAIL"):
    print("go: module lookup disabled", file=sys.stderr)
    sys.exit(1)
if args[0] in ("install", "build"):
    binary = args[args.index("-o") + 1] if args[0] == "build" else os.path.join(
        os.environ["GOBIN"], "training-operator.v1")
    os.makedirs(os.path.dirname(binary), exist_ok=True)
    with open(binary, "w") as out:
        out.write("#!/bin/sh\\n")
    os.chmod(binary, 0o755)
else:
    print(json.dumps({{"Dir": {module!r}}}))
"""


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("COSCHEDULING_CACHE_DIR", str(tmp_path / "cache"))
    module = tmp_path / "module"
    crds = module / "manifests" / "base" / "crds"
    crds.mkdir(parents=True)
    (crds / "kubeflow.org_pytorchjobs.yaml").write_text("kind: CustomResourceDefinition\n")
    crds.chmod(0o555)  # like the module cache
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "go-calls.jsonl"
    go = bin_dir / "go"
    go.write_text(FAKE_GO.format(python=sys.executable, calls=str(calls), module=str(module)))
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return calls


def _calls(log: Path) -> list[list[str]]:
    if not log.exists():
        return []
    return [json.loads(line)["args"] for line in log.read_text().splitlines()]


def test_installs_once_into_the_versioned_cache_then_reuses(fake_go: Path,
                                                            tmp_path: Path) -> None:
    messages: list[str] = []
    build = ensure_training_operator(log=messages.append)
    root = tmp_path / "cache" / "bin" / f"training-operator-v{TRAINING_OPERATOR_VERSION}"
    assert build == TrainingOperatorBuild(binary=root / "training-operator.v1",
                                          crds=root / "crds")
    assert build.crd_file("PyTorchJob").read_text() == "kind: CustomResourceDefinition\n"
    install, download = _calls(fake_go)
    assert install[0] == "install" and install[-1] == (
        "github.com/kubeflow/training-operator/cmd/training-operator.v1"
        f"@v{TRAINING_OPERATOR_VERSION}")
    assert download[:3] == ["mod", "download", "-json"]
    assert any("installing" in m for m in messages)
    assert [p.name for p in root.parent.iterdir() if p.name.startswith(".training")] == []

    assert ensure_training_operator(log=messages.append) == build
    assert len(_calls(fake_go)) == 2


def test_failed_install_raises_with_go_output_and_caches_nothing(
    fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    with pytest.raises(BuildError, match=r"go install .* failed \(exit 1\):\ngo: module lookup"):
        ensure_training_operator(log=lambda _: None)
    cached = tmp_path / "cache" / "bin"
    assert sorted(p.name for p in cached.iterdir()) == [".build.lock"]


def test_missing_go_names_what_it_is_needed_for(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COSCHEDULING_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(GoNotFoundError, match=r"to build training-operator v1\.8\.1 from Go"):
        ensure_training_operator(log=lambda _: None)


@pytest.mark.parametrize(
    ("gang", "schemes", "expected"),
    [
        ("volcano", ("pytorchjob",), ["--gang-scheduler-name=volcano",
                                      "--enable-scheme=pytorchjob"]),
        ("batch-scheduler", ("pytorchjob", "tfjob"), ["--gang-scheduler-name=batch-scheduler",
                                                      "--enable-scheme=pytorchjob",
                                                      "--enable-scheme=tfjob"]),
        (None, ("pytorchjob",), ["--enable-scheme=pytorchjob"]),
    ],
)
def test_flags(tmp_path: Path, gang: str | None, schemes: tuple[str, ...],
               expected: list[str]) -> None:
    cluster = LocalCluster(tmp_path / "cluster", log=lambda _: None)
    operator = TrainingOperator(cluster, tmp_path / "op", gang_scheduler_name=gang,
                                schemes=schemes)
    argv = operator.argv(Path("/bin/op"))
    assert argv[:2] == ["/bin/op", f"--kubeconfig={cluster.kubeconfig}"]
    assert argv[2:-3] == expected
    ports = {operator.metrics_port, operator.probe_port, operator.webhook_port}
    assert argv[-3:] == [f"--metrics-bind-address=127.0.0.1:{operator.metrics_port}",
                         f"--health-probe-bind-address=127.0.0.1:{operator.probe_port}",
                         f"--webhook-server-port={operator.webhook_port}"]
    assert len(ports) == 3


def test_an_operator_built_in_its_module_is_built_in_a_writable_copy(
        fake_go: Path, tmp_path: Path) -> None:
    """Some proxies serve a module's versions but not the version list `go install`
    reads: `go build` runs in a copy of the downloaded module instead."""
    operator = GoOperator("inmodule", "example.com/op", "./cmd/op", "1.0.0", "op-manager",
                          "manifests/base/crds", "kubeflow.org_", "pytorchjob",
                          in_module=True)
    build = ensure_operator(operator, log=lambda _: None)
    assert build.binary.is_file() and build.crd_file("pytorchjob").is_file()
    log = [json.loads(line) for line in fake_go.read_text().splitlines()]
    download, compile_ = (entry["args"] for entry in log)
    assert download[:3] == ["mod", "download", "-json"]
    assert compile_[0] == "build" and compile_[-1] == "./cmd/op"
    assert log[1]["cwd"].endswith("/module") and log[1]["cwd"] != str(tmp_path / "module")
