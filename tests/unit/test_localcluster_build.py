"""ensure_binaries: version-keyed cache, build-only-what-is-missing, clear errors."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path

import pytest

from coscheduling.localcluster import build
from coscheduling.localcluster.build import (
    DEFAULT_KUBERNETES_VERSION,
    KUBERNETES_VERSION_VAR,
    BuildError,
    GoNotFoundError,
    KubernetesVersionError,
    available_kubernetes_versions,
    binary_dirs,
    ensure_binaries,
    required_version,
    selected_kubernetes_version,
)

KUBE = build.KUBERNETES_VERSION

# Stands in for `go build`: records how it was called, then writes (or fails to write) -o.
FAKE_GO = """#!{python}
import json, os, sys
args = sys.argv[1:]
out = args[args.index("-o") + 1]
record = {{"args": args, "cwd": os.getcwd(), "cgo": os.environ.get("CGO_ENABLED"),
          "has_gomod": os.path.exists("go.mod")}}
with open({calls!r}, "a") as calls:
    calls.write(json.dumps(record) + "\\n")
with open(out, "w") as binary:
    binary.write("#!/bin/sh\\n")
os.chmod(out, 0o755)
if os.environ.get("FAKE_GO_FAIL"):
    print("compile error: something broke", file=sys.stderr)
    sys.exit(2)
"""


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("COSCHEDULING_CACHE_DIR", str(root))
    return root


@pytest.fixture
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake `go` alone on PATH; returns the file its calls are logged to."""
    bin_dir = tmp_path / "fakebin"
    bin_dir.mkdir()
    calls = tmp_path / "go-calls.jsonl"
    go = bin_dir / "go"
    go.write_text(FAKE_GO.format(python=sys.executable, calls=str(calls)))
    go.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))
    return calls


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []


def _install(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n")
    path.chmod(0o755)


def test_required_version_reads_single_line_and_block_requires(tmp_path: Path) -> None:
    gomod = tmp_path / "go.mod"
    gomod.write_text("module x\n\nrequire k8s.io/kubernetes v1.2.3\n")
    assert required_version(gomod, "k8s.io/kubernetes") == "1.2.3"
    gomod.write_text("module x\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 v3.9.1 // indirect\n)\n")
    assert required_version(gomod, "go.etcd.io/etcd/server/v3") == "3.9.1"
    with pytest.raises(BuildError, match="does not require"):
        required_version(gomod, "k8s.io/kubernetes")


def test_versions_match_the_wrapper_modules() -> None:
    assert available_kubernetes_versions() == {
        "1.35.8": "kubernetes-1.35",
        "1.37.2": "kubernetes-1.37",
    }
    assert build.ETCD_VERSION == "3.6.16"
    assert available_kubernetes_versions()[KUBE] == build.KUBERNETES_MODULE_DIR


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, DEFAULT_KUBERNETES_VERSION),
        ("", DEFAULT_KUBERNETES_VERSION),
        ("  ", DEFAULT_KUBERNETES_VERSION),
        ("1.37.2", "1.37.2"),
        ("v1.35.8", "1.35.8"),
        ("1.35", "1.35.8"),
        (" v1.37 ", "1.37.2"),
    ],
)
def test_version_knob_picks_a_wrapper_module(value: str | None, expected: str) -> None:
    environ = {} if value is None else {KUBERNETES_VERSION_VAR: value}
    assert selected_kubernetes_version(environ) == expected


@pytest.mark.parametrize("value", ["1.36", "1.35.9", "latest", "1", "v1.37.2.1"])
def test_version_knob_refuses_releases_without_a_module(value: str) -> None:
    with pytest.raises(KubernetesVersionError) as error:
        selected_kubernetes_version({KUBERNETES_VERSION_VAR: value})
    message = str(error.value)
    assert KUBERNETES_VERSION_VAR in message and repr(value) in message
    assert "1.35.8, 1.37.2" in message


def test_cache_dirs_are_keyed_by_version(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert binary_dirs() == (cache / f"bin/kubernetes-v{KUBE}", cache / "bin/etcd-v3.6.16")
    monkeypatch.setattr(build, "KUBERNETES_VERSION", "1.36.0")
    assert binary_dirs()[0] == cache / "bin/kubernetes-v1.36.0"


def test_default_cache_dir_is_under_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("COSCHEDULING_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert build.cache_dir() == tmp_path / ".cache" / "coscheduling"


def test_cached_binaries_are_reused_without_go(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    kube_dir, etcd_dir = binary_dirs()
    for path in (
        etcd_dir / "etcd",
        kube_dir / "kube-apiserver",
        kube_dir / "kube-controller-manager",
        kube_dir / "kube-scheduler",
    ):
        _install(path)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    binaries = ensure_binaries(log=lambda _: None)
    assert binaries.etcd == etcd_dir / "etcd"
    assert binaries.kube_apiserver == kube_dir / "kube-apiserver"
    assert binaries.kube_controller_manager == kube_dir / "kube-controller-manager"
    assert binaries.kube_scheduler == kube_dir / "kube-scheduler"
    assert binaries.kubernetes_version == KUBE


def test_missing_go_is_a_clear_error(
    cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(GoNotFoundError, match=r"Go toolchain \('go'\) is not on PATH") as error:
        ensure_binaries(log=lambda _: None)
    assert str(cache / "bin") in str(error.value)


def test_builds_only_what_is_missing_then_reuses(cache: Path, fake_go: Path) -> None:
    kube_dir, etcd_dir = binary_dirs()
    _install(etcd_dir / "etcd")
    messages: list[str] = []
    binaries = ensure_binaries(log=messages.append)

    calls = _calls(fake_go)
    assert [c["args"][-1] for c in calls] == [  # type: ignore[index]
        "k8s.io/kubernetes/cmd/kube-apiserver",
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ]
    for call in calls:
        args = call["args"]
        assert isinstance(args, list)
        assert args[:2] == ["build", "-mod=readonly"]
        assert (
            f"k8s.io/component-base/version.gitVersion=v{KUBE}" in args[args.index("-ldflags") + 1]
        )
        assert call["cgo"] == "0"
        assert call["cwd"] == str(build.GOMOD_DIR / build.KUBERNETES_MODULE_DIR)
    assert binaries.kube_apiserver.is_file()
    assert os.access(binaries.kube_controller_manager, os.X_OK)
    assert not list(kube_dir.glob(".*partial*"))
    assert os.access(binaries.kube_scheduler, os.X_OK)
    assert any(f"building kube-apiserver v{KUBE} from Go modules" in m for m in messages)

    ensure_binaries(log=messages.append)
    assert len(_calls(fake_go)) == 3


def test_failed_build_raises_with_output_and_leaves_nothing(
    cache: Path, fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_GO_FAIL", "1")
    with pytest.raises(BuildError, match=r"building etcd failed \(exit 2\)(.|\n)*something broke"):
        ensure_binaries(log=lambda _: None)
    etcd_dir = binary_dirs()[1]
    assert list(etcd_dir.iterdir()) == []


def test_read_only_module_is_copied_before_building(
    cache: Path, fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "access", lambda path, mode: mode == os.X_OK)
    ensure_binaries(log=lambda _: None)
    for call in _calls(fake_go):
        assert call["has_gomod"] is True
        assert not str(call["cwd"]).startswith(str(build.GOMOD_DIR))


def test_waits_for_a_concurrent_build_and_reuses_its_result(cache: Path, fake_go: Path) -> None:
    lock = cache / "bin" / ".build.lock"
    lock.parent.mkdir(parents=True)
    messages: list[str] = []
    with lock.open("a") as other_builder:
        fcntl.flock(other_builder, fcntl.LOCK_EX)  # a separate open file: conflicts like a process
        worker = threading.Thread(target=ensure_binaries, kwargs={"log": messages.append})
        worker.start()
        deadline = time.monotonic() + 10
        while not messages and time.monotonic() < deadline:
            time.sleep(0.01)
        assert messages and "waiting for another process" in messages[0]
        kube_dir, etcd_dir = binary_dirs()
        for path in (etcd_dir / "etcd", kube_dir / "kube-apiserver"):
            _install(path)
        fcntl.flock(other_builder, fcntl.LOCK_UN)
        worker.join(10)
    assert not worker.is_alive()
    assert [c["args"][-1] for c in _calls(fake_go)] == [  # type: ignore[index]
        "k8s.io/kubernetes/cmd/kube-controller-manager",
        "k8s.io/kubernetes/cmd/kube-scheduler",
    ]


def test_quantitycheck_is_built_once_and_rebuilt_when_its_module_changes(
    cache: Path, fake_go: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gomod = tmp_path / "gomod"
    shutil.copytree(build.GOMOD_DIR / "quantitycheck", gomod / "quantitycheck")
    monkeypatch.setattr(build, "GOMOD_DIR", gomod)
    first = build.ensure_quantitycheck(log=lambda _: None)
    assert first.is_relative_to(cache / "bin") and first.name == "quantitycheck"
    assert build.ensure_quantitycheck(log=lambda _: None) == first
    assert len(_calls(fake_go)) == 1
    (gomod / "quantitycheck" / "main.go").write_text("package main\n\nfunc main() {}\n")
    second = build.ensure_quantitycheck(log=lambda _: None)
    assert second != first
    calls = _calls(fake_go)
    assert len(calls) == 2 and calls[1]["cwd"] == str(gomod / "quantitycheck")
    assert calls[1]["args"][-1] == "."
