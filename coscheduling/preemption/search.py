"""Choosing victims: the fewest, lowest-priority pods whose eviction lets a preemptor in.

The search is the same for a pod on one node and for a whole gang on the cluster; only
``fits`` differs (one node's filters, or the gang's admission of every missing member).
It gives up if even evicting every unit does not let the preemptor in (no eviction for
nothing). Otherwise it reprieves units in order, those protected by a
PodDisruptionBudget first, higher priority first, each only if the preemptor still fits
without it (runs of units are tried whole first, so few placements are tried when most
candidates can be spared, and the shortest run at the end of that order whose eviction is
enough is looked for first). Gang cores are reprieved before any surplus member, so a gang
gives up its surplus before it is evicted whole, and is never left below its minMember.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from coscheduling.preemption.units import Unit

if TYPE_CHECKING:
    from coscheduling.api.pods import Pod
    from coscheduling.framework.handle import SchedulerCache

Fits = Callable[[], bool]
"""Whether the preemptor fits the cluster as the cache shows it at the moment of the call."""
Violations = Callable[[Sequence["Pod"]], set[str]]
"""Keys of the pods whose eviction, with the others given, breaks a PodDisruptionBudget."""


@dataclass(frozen=True)
class Victims:
    pods: tuple[Pod, ...]
    pdb_violations: int

    def rank(self) -> tuple[int, int, int, int]:
        """kube-scheduler's order of candidates: fewest PDB violations, then the lowest
        highest-victim priority, the smallest priority sum, the fewest victims."""
        priorities = [p.priority for p in self.pods]
        return (self.pdb_violations, max(priorities, default=-(2**31)), sum(priorities),
                len(priorities))


def choose(cache: SchedulerCache, units: Sequence[Unit], fits: Fits,
           violations: Violations) -> Victims | None:
    """The victims among ``units`` (None: the preemptor would not fit even with all gone)."""
    every = [pod for unit in units for pod in unit.pods]
    protected = violations(every)
    evicted = {pod.key: pod for pod in every}

    def reprieve(pods: Iterable[Pod]) -> bool:
        nonlocal evicted
        trial = dict(evicted)
        for pod in pods:
            trial.pop(pod.key, None)
        with cache.transaction() as tx:  # discarded: the victims stay
            tx.evict(trial.values())
            if not fits():
                return False
        evicted = trial
        return True

    def spare(batch: Sequence[Sequence[Pod]]) -> list[bool]:
        """Reprieve each of ``batch`` in order, each only if the preemptor still fits. A
        run that can be spared whole is tried in one ``fits``, halves only when it cannot:
        a storm of many candidate victims of which few are needed costs O(needed x log n)
        placements, not one per candidate. Where keeping more pods never helps the
        preemptor, the victims are exactly one-by-one's; where it can (pod affinity to a
        victim), they may differ, but every state kept was one ``fits`` accepted."""
        if not batch:
            return []
        if reprieve([pod for pods in batch for pod in pods]):
            return [True] * len(batch)
        if len(batch) == 1:
            return [False]
        middle = len(batch) // 2
        return spare(batch[:middle]) + spare(batch[middle:])

    def spare_cores(cores: list[list[Pod]]) -> list[bool] | None:
        """:func:`spare` over the cores, after finding the shortest run at the end (1, 2,
        4, ... cores) whose eviction alone lets the preemptor in: everything before it is
        spared in that one ``fits``. Every core gone is tried second, so a node where
        preemption cannot help costs two placements (None), and a preemptor that needs one
        unit among hundreds costs two too (the preemption storm)."""
        count = len(cores)
        shorter = (2**i for i in range(1, count.bit_length()) if 2**i < count)
        for size in dict.fromkeys([min(1, count), count, *shorter]):
            fits_now = reprieve([pod for pods in cores[:count - size] for pod in pods])
            if size == count:  # every core gone
                if not fits_now:
                    return None
            elif fits_now:
                return [True] * (count - size) + spare(cores[count - size:])
        return spare(cores)

    order = sorted(units, key=lambda u: (not any(p.key in protected for p in u.core),
                                         -u.priority))
    spared_cores = spare_cores([u.core for u in order])
    if spared_cores is None:
        return None
    kept = [unit for unit, spared in zip(order, spared_cores, strict=True) if spared]
    spare([batch for unit in kept for batch in unit.surplus_batches()])
    chosen = tuple(evicted.values())
    return Victims(chosen, len(violations(chosen)))


def best(candidates: Iterable[tuple[str, Victims]]) -> tuple[str, Victims] | None:
    """The candidate node to preempt on (ties by node name)."""
    return min(candidates, key=lambda c: (c[1].rank(), c[0]), default=None)
