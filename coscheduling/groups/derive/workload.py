"""The owner objects a derivation reads: workloads (Job, JobSet, LeaderWorkerSet) and the
objects between them and their pods (StatefulSets, a leader pod), as the informers keep
them. Only what a walk or a derivation reads is kept: metadata and the spec."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """A controller owner reference: which object manages this one."""

    api_version: str
    kind: str
    name: str
    uid: str

    @property
    def group(self) -> str:
        """The API group of the owner ("" for the core group)."""
        return self.api_version.rpartition("/")[0]


@dataclass(frozen=True, slots=True)
class Workload:
    """One cached owner object."""

    api_version: str
    kind: str
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    owner: OwnerRef | None = None  # its controller ("" kinds: none)
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    spec: Json = field(default_factory=dict)
    status: Json = field(default_factory=dict)

    @property
    def key(self) -> str:
        return workload_key(self.kind, self.namespace, self.name)

    @property
    def group(self) -> str:
        return self.api_version.rpartition("/")[0]

    def describe(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}"


def workload_key(kind: str, namespace: str, name: str) -> str:
    return f"{kind}/{namespace}/{name}"


def controller_of(meta: Json) -> OwnerRef | None:
    """The owner reference marked ``controller: true`` (None: no controller)."""
    for ref in meta.get("ownerReferences") or ():
        if isinstance(ref, dict) and ref.get("controller"):
            return OwnerRef(str(ref.get("apiVersion") or ""), str(ref.get("kind") or ""),
                            str(ref.get("name") or ""), str(ref.get("uid") or ""))
    return None


def read_workload(obj: Json) -> Workload:
    """A cached record of any owner object (the status too: a Job's counts of succeeded
    pods decide how many more it will run)."""
    meta = _mapping(obj.get("metadata"))
    return Workload(
        api_version=str(obj.get("apiVersion") or ""), kind=str(obj.get("kind") or ""),
        namespace=str(meta.get("namespace") or ""), name=str(meta.get("name") or ""),
        uid=str(meta.get("uid") or ""), resource_version=str(meta.get("resourceVersion") or ""),
        owner=controller_of(meta),
        labels={str(k): str(v) for k, v in _mapping(meta.get("labels")).items()},
        annotations={str(k): str(v) for k, v in _mapping(meta.get("annotations")).items()},
        spec=_mapping(obj.get("spec")), status=_mapping(obj.get("status")))


def reader(api_version: str, kind: str) -> Callable[[Json], Workload]:
    """A parse function for a watch of one kind: list items carry no apiVersion/kind."""
    def parse(obj: Json) -> Workload:
        return read_workload({**obj, "apiVersion": obj.get("apiVersion") or api_version,
                              "kind": obj.get("kind") or kind})
    return parse


def _mapping(value: object) -> Json:
    return value if isinstance(value, dict) else {}
