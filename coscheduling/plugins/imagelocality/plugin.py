"""ImageLocality: prefer nodes that already hold the pod's images, by kube-scheduler's rule.

For each image of the pod (init containers, containers and image volumes, ``:latest`` added
when no tag is given) that the node lists in ``status.images``, the node earns the image's
size scaled by the share of all nodes that hold it (``int(size * (holders / nodes))``, so a
large image on one node out of many does not pull every pod there). The sum is clamped to
[23 MiB, 1000 MiB x images] and mapped linearly onto 0..100. The size is the one this node
reports (kube-scheduler keeps the first size any node reported for the name; nodes report
one size per image, so they agree).

How many nodes hold an image depends on other nodes, so the counts enter the signature:
pods share a node table only while the counts of their images and the number of nodes stay
what they were when it was filled, and a node that gains or drops an image is itself a
changed node. The counts come from an index kept current from the cache's change log.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import TYPE_CHECKING, Any

from coscheduling.framework.interfaces import MAX_NODE_SCORE, ScorePlugin

if TYPE_CHECKING:
    from coscheduling.api.nodes import Node
    from coscheduling.api.pods import Pod
    from coscheduling.framework.cycle_state import CycleState
    from coscheduling.framework.handle import Handle, SchedulerCache
    from coscheduling.framework.nodeinfo import NodeInfo

NAME = "ImageLocality"
MB = 1024 * 1024
MIN_THRESHOLD = 23 * MB
MAX_CONTAINER_THRESHOLD = 1000 * MB


def priority(total: int, images: int) -> int:
    """The node score of ``total`` scaled bytes over ``images`` images."""
    if images <= 0:
        return 0
    high = MAX_CONTAINER_THRESHOLD * images
    clamped = min(max(total, MIN_THRESHOLD), high)
    return MAX_NODE_SCORE * (clamped - MIN_THRESHOLD) // (high - MIN_THRESHOLD)


class ImageIndex:
    """How many nodes list each image name, kept current from the cache's change log."""

    def __init__(self) -> None:
        self.holders: dict[str, int] = {}
        self._indexed: dict[str, Node] = {}  # node name -> the record last counted
        self._synced = -1
        # (pod, cache change_seq, spread): Score asks once per node for the same answer.
        self.last: tuple[Pod, int, tuple[tuple[int, ...], int]] | None = None

    def sync(self, cache: SchedulerCache) -> None:
        """Count the nodes changed since the last call (every node if the log lost them)."""
        if self._synced == cache.change_seq:
            return
        changed = cache.changed_since(self._synced) if self._synced >= 0 else None
        if changed is None:
            self.holders, self._indexed = {}, {}
            names: list[str] | set[str] = cache.node_names()
        else:
            names = changed if len(changed) < 2 else set(changed)
        indexed = self._indexed
        for name in names:
            info = cache.node(name)
            node = info.node if info is not None else None
            if indexed.get(name) is not node:
                self._index(name, node)
        self._synced = cache.change_seq

    def _index(self, name: str, node: Node | None) -> None:
        old = self._indexed.get(name)
        if old is not None and node is not None and old.images == node.images:
            self._indexed[name] = node  # a status update that left the images alone
            return
        holders = self.holders
        if old is not None:
            for image in old.images:
                left = holders[image] - 1
                if left:
                    holders[image] = left
                else:
                    del holders[image]
        if node is None:
            self._indexed.pop(name, None)
            return
        self._indexed[name] = node
        for image in node.images:
            holders[image] = holders.get(image, 0) + 1


class ImageLocality(ScorePlugin):
    name = NAME

    def __init__(self, args: Mapping[str, Any] | None = None, handle: Handle | None = None):
        """No args. The handle's cache tells how many nodes hold each image."""
        if handle is None:
            raise ValueError(f"{NAME} needs the scheduler's cache")
        self._cache = handle.cache

    @property
    def index(self) -> ImageIndex:
        """The image index of the cache in effect (a simulation's view has its own); it is
        read and synced by the thread that holds that cache (the loop, under its lock)."""
        derived = self._cache.derived
        index = derived.get(NAME)
        if not isinstance(index, ImageIndex):
            index = derived[NAME] = ImageIndex()
        return index

    def _spread(self, pod: Pod) -> tuple[tuple[int, ...], int]:
        """(nodes holding each of the pod's images, nodes in the cluster)."""
        cache = self._cache
        index = self.index
        last = index.last
        if last is not None and last[0] is pod and last[1] == cache.change_seq:
            return last[2]
        index.sync(cache)
        holders = index.holders
        spread = tuple(holders.get(image, 0) for image in pod.images), cache.node_count()
        index.last = (pod, cache.change_seq, spread)
        return spread

    def sign(self, pod: Pod) -> Hashable:
        if not pod.images:
            return ()
        counts, nodes = self._spread(pod)
        # Nothing held anywhere scores 0 on every node, whatever the number of nodes.
        return pod.images, counts, nodes if any(counts) else 0

    def score(self, state: CycleState, pod: Pod, node: NodeInfo) -> int:
        info = node.node
        if info is None or not info.images or not pod.images:
            return 0
        counts, nodes = self._spread(pod)
        listed = info.images
        total = 0
        for image, count in zip(pod.images, counts, strict=True):
            size = listed.get(image)
            if size is not None and count:
                total += int(float(size) * (float(count) / float(nodes)))
        return priority(total, len(pod.images))
