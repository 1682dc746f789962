"""`kubectl gang list` as kubectl users expect, on the real API server: the cluster flags
before or after the command, -o json|yaml|wide|name with machine values, -l, and --watch
(the project's informers) ending cleanly on Ctrl-C."""

from __future__ import annotations

import json
import queue
import re
import signal
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from coscheduling import kubectl_gang
from coscheduling.api.membership import LABEL_ONLY_MIN, LABEL_ONLY_NAME
from coscheduling.cluster.client import KubeClient
from coscheduling.localcluster import LocalCluster
from tests.integration.kube import create_pod, delete_podgroup, pod_body, wait_until

PG = "batch.scheduler.tencent.com/v1"
RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


@dataclass(frozen=True)
class Gangs:
    """A namespace with two PodGroups (train: 3 members, 2 on a node, 1 running; infer: no
    member) and a label-only group of 2 members."""

    namespace: str
    node: str
    kubeconfig: Path


def _podgroup(kube: KubeClient, namespace: str, name: str, labels: dict[str, str],
              **spec: Any) -> None:
    kube.create(f"/apis/{PG}/namespaces/{namespace}/podgroups",
                {"apiVersion": PG, "kind": "PodGroup",
                 "metadata": {"name": name, "labels": labels}, "spec": spec})


@pytest.fixture
def gangs(local_cluster: LocalCluster, kube: KubeClient, crd: None, namespace: str,
          make_node: Any) -> Iterator[Gangs]:
    node = f"kg-{uuid.uuid4().hex[:6]}"
    make_node(node)
    _podgroup(kube, namespace, "train", {"team": "a"}, minMember=3, queue="research",
              priorityClassName="high")
    _podgroup(kube, namespace, "infer", {"team": "b"}, minMember=2)
    for index in range(3):
        create_pod(kube, namespace, pod_body(f"train-{index}", scheduler="batch-scheduler",
                                             group="train", node_name=node if index else ""))
    kube.patch(f"/api/v1/namespaces/{namespace}/pods/train-1/status",
               {"status": {"phase": "Running"}})
    for index in range(2):
        create_pod(kube, namespace, pod_body(
            f"solo-{index}", scheduler="batch-scheduler",
            labels={LABEL_ONLY_NAME: "solo", LABEL_ONLY_MIN: "2", "team": "c"}))
    yield Gangs(namespace, node, local_cluster.kubeconfig)
    # Gone now rather than whenever the namespace's deletion gets to them (pods bound to a
    # node without a kubelet would stay Terminating): a later test's scheduler, which sees
    # every namespace, must not see them vanish under it.
    for path in (f"/api/v1/namespaces/{namespace}/pods",
                 f"/apis/{PG}/namespaces/{namespace}/podgroups"):
        kube.delete(path, gracePeriodSeconds=0)
        wait_until(lambda p=path: not kube.get(p)["items"], timeout=30,
                   what=f"{path} to be empty")


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """`kubectl gang ARGV` in this process; its stdout (the exit code checked)."""
    capsys.readouterr()
    code = kubectl_gang.main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _items(g: Gangs, capsys: pytest.CaptureFixture[str], output: str) -> dict[str, Any]:
    text = run(capsys, "--kubeconfig", str(g.kubeconfig), "-n", g.namespace, "list", "-o",
               output)
    listing = json.loads(text) if output == "json" else yaml.safe_load(text)
    assert listing["kind"] == "List" and listing["apiVersion"] == "v1"
    return {item["name"]: item for item in listing["items"]}


@pytest.mark.parametrize("output", ["json", "yaml"])
def test_json_and_yaml_carry_numbers_and_rfc3339_times(
        gangs: Gangs, kube: KubeClient, capsys: pytest.CaptureFixture[str],
        output: str) -> None:
    items = _items(gangs, capsys, output)
    assert set(items) == {"train", "infer", "solo"}
    train = items["train"]
    created = kube.get(f"/apis/{PG}/namespaces/{gangs.namespace}/podgroups/train")[
        "metadata"]["creationTimestamp"]
    assert train == {
        "namespace": gangs.namespace, "name": "train", "source": "PodGroup",
        "object": {"apiVersion": PG, "kind": "PodGroup"}, "phase": "Pending",
        "minMember": 3, "members": 3, "placed": 2, "running": 1, "queue": "research",
        "priorityClassName": "high", "nodes": [gangs.node], "creationTimestamp": created,
        "why": None}
    assert RFC3339.match(created)
    assert items["infer"]["members"] == 0 and items["infer"]["queue"] == "default"
    solo = items["solo"]
    assert solo["source"] == "label-only group" and solo["object"] is None
    assert (solo["minMember"], solo["members"], solo["placed"]) == (2, 2, 0)
    assert RFC3339.match(solo["creationTimestamp"])


def _rows(text: str) -> list[list[str]]:
    return [re.split(r"\s{2,}", line.strip()) for line in text.splitlines()]


@pytest.mark.parametrize(("flags", "header", "train"), [
    ((), ["NAME", "KIND", "PHASE", "PLACED/MIN", "QUEUE", "AGE", "WHY"],
     ["train", "PodGroup", "Pending", "2/3", "research"]),
    (("-o", "wide"), ["NAME", "KIND", "PHASE", "PLACED/MIN", "MEMBERS", "RUNNING", "QUEUE",
                      "PRIORITY", "NODES", "AGE", "WHY"],
     ["train", "PodGroup", "Pending", "2/3", "3", "1", "research", "high", "{node}"]),
])
def test_tables_plain_and_wide(gangs: Gangs, capsys: pytest.CaptureFixture[str],
                               flags: tuple[str, ...], header: list[str],
                               train: list[str]) -> None:
    rows = _rows(run(capsys, "--kubeconfig", str(gangs.kubeconfig), "-n", gangs.namespace,
                     "list", *flags))
    assert rows[0] == header
    row = next(r for r in rows if r[0] == "train")
    assert row[:len(train)] == [c.format(node=gangs.node) for c in train], rows
    assert sorted(r[0] for r in rows[1:]) == ["infer", "solo", "train"]


def test_name_prints_the_group_objects_as_kubectl_names_them(
        gangs: Gangs, local_cluster: LocalCluster, capsys: pytest.CaptureFixture[str]) -> None:
    capsys.readouterr()
    assert kubectl_gang.main(["--kubeconfig", str(gangs.kubeconfig), "-n", gangs.namespace,
                              "list", "-o", "name"]) == 0
    out, err = capsys.readouterr()
    names = out.split()
    assert names == ["podgroup.batch.scheduler.tencent.com/infer",
                     "podgroup.batch.scheduler.tencent.com/train"]
    assert "solo: a label-only group, no object to name" in err
    got = subprocess.run(["kubectl", "--kubeconfig", str(local_cluster.kubeconfig), "get",
                          "-n", gangs.namespace, *names, "-o", "name"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert got.split() == names  # kubectl reads them back


def _two_contexts(g: Gangs, tmp_path: Path) -> Path:
    """The cluster's kubeconfig with a second context, "here", whose namespace is g's."""
    config = yaml.safe_load(g.kubeconfig.read_text())
    here = json.loads(json.dumps(config["contexts"][0]))
    here["name"] = "here"
    here["context"]["namespace"] = g.namespace
    config["contexts"].append(here)
    path = tmp_path / "kubeconfig"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize("argv", [
    ["--kubeconfig", "{k}", "-n", "{ns}", "list", "-o", "name"],
    ["list", "--kubeconfig", "{k}", "-n", "{ns}", "-o", "name"],
    ["--kubeconfig", "{k}", "list", "--namespace", "{ns}", "-o", "name"],
    ["--kubeconfig", "{k}", "-n", "elsewhere", "list", "-n", "{ns}", "-o", "name"],
    ["--kubeconfig", "{two}", "--context", "here", "list", "-o", "name"],
    ["--kubeconfig", "{two}", "list", "--context", "here", "-o", "name"],
    ["-A", "--kubeconfig", "{k}", "list", "-o", "name"],
    ["--kubeconfig", "{k}", "list", "-A", "-o", "name"],
])
def test_cluster_flags_before_or_after_the_command(
        gangs: Gangs, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        argv: list[str]) -> None:
    two = _two_contexts(gangs, tmp_path)
    out = run(capsys, *(a.format(k=gangs.kubeconfig, ns=gangs.namespace, two=two)
                        for a in argv))
    names = out.split()
    assert "podgroup.batch.scheduler.tencent.com/train" in names, out
    if "-A" not in argv:  # the namespace's gangs only
        assert len(names) == 2, out


@pytest.mark.parametrize(("selector", "names"), [
    ("team=a", ["train"]),
    ("team!=a", ["infer", "solo"]),
    ("team in (a,b)", ["infer", "train"]),
    ("team=c", ["solo"]),  # a label-only group matches by its members' labels
    ("team", ["infer", "solo", "train"]),
    ("nope=1", []),
])
def test_label_selector(gangs: Gangs, capsys: pytest.CaptureFixture[str], selector: str,
                        names: list[str]) -> None:
    out = run(capsys, "--kubeconfig", str(gangs.kubeconfig), "list", "-n", gangs.namespace,
              "-l", selector, "-o", "json")
    assert sorted(item["name"] for item in json.loads(out)["items"]) == names


class Lines:
    """A process's stdout, line by line, with a deadline per line; its stderr is read all
    along too (an unread pipe that fills would block the process), kept in ``errors``."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process
        self.lines: queue.Queue[str] = queue.Queue()
        self.errors: list[str] = []
        assert process.stdout is not None and process.stderr is not None
        stdout, stderr = process.stdout, process.stderr
        threading.Thread(target=lambda: [self.lines.put(line) for line in stdout],
                         daemon=True).start()
        self._stderr = threading.Thread(target=lambda: self.errors.extend(stderr),
                                        daemon=True)
        self._stderr.start()

    def interrupt(self) -> tuple[int | None, str]:
        """Ctrl-C: the exit code within 30 s (None if it did not exit) and its stderr."""
        self.process.send_signal(signal.SIGINT)
        try:
            code: int | None = self.process.wait(30)
        except subprocess.TimeoutExpired:
            code = None
        self._stderr.join(5)
        return code, "".join(self.errors)

    def until(self, matches: Callable[[str], bool], what: str) -> str:
        seen = []
        while True:
            try:
                line = self.lines.get(timeout=30)
            except queue.Empty:
                raise AssertionError(f"no line with {what}; saw {seen}") from None
            seen.append(line)
            if matches(line):
                return line


def _spawn(args: list[str]) -> subprocess.Popen[str]:
    """Start ``args`` as a terminal would, Ctrl-C included: a test run started in the
    background ignores SIGINT, and an ignored signal stays ignored across exec (a caught one
    is reset), so for the exec SIGINT is caught here rather than ignored."""
    ignored = signal.getsignal(signal.SIGINT) == signal.SIG_IGN
    if ignored:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True)
    finally:
        if ignored:
            signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.fixture
def watching(gangs: Gangs) -> Iterator[subprocess.Popen[str]]:
    """`kubectl gang list --watch` as kubectl runs the plugin (the executable)."""
    process = _spawn(
        [str(Path(sys.executable).with_name("kubectl-gang")), "--kubeconfig",
         str(gangs.kubeconfig), "list", "-n", gangs.namespace, "--watch"])
    try:
        yield process
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)


def test_watch_prints_each_change_and_ends_on_ctrl_c(
        gangs: Gangs, kube: KubeClient, watching: subprocess.Popen[str]) -> None:
    lines, ns = Lines(watching), gangs.namespace
    assert lines.until(lambda s: s.startswith("NAME"), "the header").split()[:4] == [
        "NAME", "KIND", "PHASE", "PLACED/MIN"]
    lines.until(lambda s: s.split()[:4] == ["train", "PodGroup", "Pending", "2/3"], "train")
    create_pod(kube, ns, pod_body("train-3", scheduler="batch-scheduler", group="train",
                                  node_name=gangs.node))
    lines.until(lambda s: s.split()[:4] == ["train", "PodGroup", "Pending", "3/3"],
                "train with its third member placed")
    _podgroup(kube, ns, "later", {}, minMember=4)
    lines.until(lambda s: s.split()[:4] == ["later", "PodGroup", "Pending", "0/4"],
                "the new gang")
    delete_podgroup(kube, ns, "infer")
    lines.until(lambda s: s.split()[:3] == ["infer", "PodGroup", "DELETED"],
                "the deleted gang")
    assert lines.interrupt() == (0, "")


def test_watch_json_prints_events_with_machine_values(
        gangs: Gangs, kube: KubeClient) -> None:
    process = _spawn(
        [sys.executable, "-m", "coscheduling.kubectl_gang", "--kubeconfig",
         str(gangs.kubeconfig), "-n", gangs.namespace, "list", "-w", "-o", "json",
         "-l", "team=a"])
    try:
        lines = Lines(process)
        first = json.loads(lines.until(lambda s: '"train"' in s, "train"))
        assert first["type"] == "ADDED" and first["object"]["placed"] == 2
        kube.patch(f"/apis/{PG}/namespaces/{gangs.namespace}/podgroups/train",
                   {"spec": {"minMember": 5}})
        changed = json.loads(lines.until(lambda s: '"minMember": 5' in s, "minMember 5"))
        assert changed["type"] == "MODIFIED" and changed["object"]["name"] == "train"
        code, errors = lines.interrupt()
        assert code == 0, f"no exit within 30 s of Ctrl-C; its stderr: {errors!r}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(10)
