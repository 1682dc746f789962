"""Node records."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from coscheduling.api.quantity import PODS, QuantityError, parse_resource_list
from coscheduling.api.selectors import Taint


@dataclass(slots=True, eq=False)
class Node:
    name: str
    uid: str = ""
    resource_version: str = ""
    allocatable: dict[str, int] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    # Image name -> size in bytes, from status.images (every name an image is listed under).
    images: dict[str, int] = field(default_factory=dict)
    parse_error: str = ""

    @property
    def allowed_pods(self) -> int:
        return self.allocatable.get(PODS, 0)


def parse_node(obj: dict[str, Any]) -> Node:
    """Build a Node record; allocatable falls back to capacity when a node reports none."""
    meta = obj.get("metadata") or {}
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    node = Node(
        name=meta.get("name", ""),
        uid=meta.get("uid", ""),
        resource_version=meta.get("resourceVersion", ""),
        labels=dict(meta.get("labels") or {}),
        taints=tuple(Taint.parse(t) for t in spec.get("taints") or ()),
        unschedulable=bool(spec.get("unschedulable")),
    )
    try:
        node.allocatable = parse_resource_list(
            status.get("allocatable") or status.get("capacity") or {}
        )
    except QuantityError as err:
        node.parse_error = f"status.allocatable: {err}"
    node.images = _images(status.get("images"))
    return node


def _images(listed: object) -> dict[str, int]:
    """Image name -> size; malformed entries are skipped (images only steer scoring)."""
    images: dict[str, int] = {}
    for image in listed if isinstance(listed, list) else ():
        if not isinstance(image, dict):
            continue
        size = image.get("sizeBytes") or 0
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            continue
        for name in image.get("names") or ():
            if isinstance(name, str) and name:
                images[name] = size
    return images


def node_changes_could_help(old: Node, new: Node) -> bool:
    """Whether an update may make a pending pod fit: more room, fewer taints, new labels."""
    if old.unschedulable and not new.unschedulable:
        return True
    if any(new.allocatable.get(k, 0) > v for k, v in old.allocatable.items()):
        return True
    if set(new.allocatable) - set(old.allocatable):
        return True
    if old.labels != new.labels:
        return True
    return bool(set(old.taints) - set(new.taints))
