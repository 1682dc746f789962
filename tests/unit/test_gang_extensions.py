"""The gang extension points: each answers through the profile's one plugin implementing
it, a neutral answer without one, and a profile with two implementers is refused."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from coscheduling.api.podgroups import PodGroup
from coscheduling.api.pods import Pod
from coscheduling.framework.gangs import GangExtensions
from coscheduling.framework.interfaces import (
    GangKeeperPlugin,
    GangOrderPlugin,
    Plugin,
    QueueSharePlugin,
)


class Order(GangOrderPlugin):
    name = "Order"

    def gang_key(self, group: PodGroup, pod: Pod, partial: int) -> tuple[Any, ...]:
        return ("ordered", partial)


class Shares(QueueSharePlugin):
    name = "Shares"

    def __init__(self) -> None:
        self.told: list[Any] = []

    def reclaimable(self, group: PodGroup, members: Sequence[Pod]) -> list[Any]:
        return ["unit"]

    def reclaimed(self, group: PodGroup, victims: Any) -> None:
        self.told.append(victims)

    def may_reserve(self, group_key: str, queue: str, more: Mapping[str, int]) -> bool:
        return False


class Keeper(GangKeeperPlugin):
    name = "Keeper"

    def __init__(self) -> None:
        self.given_back: list[tuple[str, str]] = []

    def give_back(self, group_key: str, reason: str) -> None:
        self.given_back.append((group_key, reason))

    def reserved_room(self) -> Mapping[str, tuple[str, Mapping[str, int]]]:
        return {"ns/g": ("q", {"cpu": 1000})}


GROUP = PodGroup(namespace="ns", name="g", min_member=1)
POD = Pod(namespace="ns", name="p", uid="u")


def _answers(gangs: GangExtensions) -> tuple[Any, ...]:
    return (gangs.order(GROUP, POD, 1), gangs.reclaimable(GROUP, [POD]),
            gangs.may_reserve("ns/g", "q", {"cpu": 1}), gangs.kept, dict(gangs.reserved_room()))


@pytest.mark.parametrize(("plugins", "expected"), [
    ([], (None, [], True, False, {})),
    ([Order()], (("ordered", 1), [], True, False, {})),
    ([Shares()], (None, ["unit"], False, False, {})),
    ([Keeper()], (None, [], True, True, {"ns/g": ("q", {"cpu": 1000})})),
    ([Keeper(), Order(), Shares()],
     (("ordered", 1), ["unit"], False, True, {"ns/g": ("q", {"cpu": 1000})})),
])
def test_each_point_answers_through_its_plugin_or_neutrally(
        plugins: list[Plugin], expected: tuple[Any, ...]) -> None:
    gangs = GangExtensions()
    gangs.install(plugins)
    assert _answers(gangs) == expected


def test_calls_reach_the_implementing_plugin() -> None:
    shares, keeper, gangs = Shares(), Keeper(), GangExtensions()
    gangs.install([shares, keeper])
    gangs.reclaimed(GROUP, "victims")
    gangs.give_back("ns/g", "over its share")
    assert shares.told == ["victims"] and keeper.given_back == [("ns/g", "over its share")]


def test_two_plugins_for_one_point_are_refused() -> None:
    class OtherOrder(Order):
        name = "OtherOrder"

    with pytest.raises(TypeError, match="Order, OtherOrder all implement GangOrderPlugin"):
        GangExtensions().install([Order(), OtherOrder()])
