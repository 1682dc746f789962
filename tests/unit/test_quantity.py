"""Quantities read as the API server reads them (resource.ParseQuantity), exactly, and the
scheduler's units from them. tests/integration/test_quantity_differential.py compares the
parser with Go's on generated strings; these tables pin the cases a reader gets wrong."""

from __future__ import annotations

from decimal import Decimal

import pytest

from coscheduling.api.dra import parse_resource_slice
from coscheduling.api.nodes import parse_node
from coscheduling.api.podgroups import parse_podgroup
from coscheduling.api.pods import parse_pod
from coscheduling.api.quantity import (
    MAX_DIGITS,
    QuantityError,
    parse_quantity,
    parse_resource_list,
    to_units,
)
from coscheduling.api.queues import parse_queue


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1E", Decimal(10**18)),  # exa, not an exponent without digits
        ("1Ei", Decimal(2**60)),
        ("1E3", Decimal(1000)), ("1e3", Decimal(1000)), ("1E+018", Decimal(10**18)),
        ("1e-3", Decimal("0.001")), ("1.5Gi", Decimal(3 * 2**29)), (".5", Decimal("0.5")),
        ("1.", Decimal(1)), ("+1", Decimal(1)), ("-1m", Decimal("-0.001")),
        ("100n", Decimal("1e-7")), ("1n", Decimal("1e-9")),
        ("0.1n", Decimal("1e-9")), ("1.1n", Decimal("2e-9")),  # below nano: rounded up
        ("-0.1n", Decimal("-1e-9")), ("0.0000000001", Decimal("1e-9")),
        ("0.000000001", Decimal("1e-9")), ("1e100", Decimal(10**100)),
        ("123456789012345678901234567890", Decimal("123456789012345678901234567890")),
        ("8Ei", Decimal(2**63 - 1)), ("-8Ei", Decimal(-(2**63 - 1))),  # binary: capped
        ("1e4294967296", Decimal(1)),  # the exponent is kept in 32 bits, wrapping
        ("Ti", Decimal(0)), ("-", Decimal(0)), (".", Decimal(0)), ("e5", Decimal(0)),
        (" 1Ki\n", Decimal(1024)), ("\u30001k\xa0", Decimal(1000)),
        (5, Decimal(5)), (10**30, Decimal(10**30)), (1.5, Decimal("1.5")),
        (1e20, Decimal(10**20)),
    ],
)
def test_parse_quantity(text: object, expected: Decimal) -> None:
    assert parse_quantity(text) == expected


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("", "expected a number"), ("   ", "expected a number"),
        ("1e", "unknown suffix 'e'"), ("1Ee3", "unknown suffix"), ("1Ei3", "unknown suffix"),
        ("1K", "unknown suffix 'K'"), ("1ki", "unknown suffix 'ki'"), ("1m5", "unknown suffix"),
        ("1 Ki", "expected a number"), ("abc", "expected a number"),
        ("1\x1c", "expected a number"),  # str.strip() would take it, Go's TrimSpace does not
        ("1_000", "expected a number"), ("0x10", "expected a number"),
        ("--1", "unknown suffix"), ("1.2.3", "expected a number"), ("1e+", "unknown suffix"),
        ("Pi", "no digits"), ("e-10", "no digits"),  # Go's slow path needs a digit
        ("1e9223372036854775808", "does not fit 64 bits"), ("1\u0663", "expected a number"),
        (True, "not a quantity"), (None, "not a quantity"), ({}, "a dict is not"),
        ([1], "a list is not"), (b"1", "a bytes is not"), (float("inf"), "'inf'"),
        (float("nan"), "'nan'"),
    ],
)
def test_refused_quantities(value: object, says: str) -> None:
    with pytest.raises(QuantityError) as refused:
        parse_quantity(value)
    assert says in str(refused.value)


def test_refusals_stay_short_and_never_escape_as_another_error() -> None:
    deep: list[object] = []
    for _ in range(100_000):
        deep = [deep]
    for value in ("1" * 100_000 + "x", "1e" + "9" * 5000, deep, 10**5000 * -1):
        with pytest.raises(QuantityError) as refused:
            to_units("memory", value)
        assert len(str(refused.value)) < 300


@pytest.mark.parametrize(
    ("resource", "text", "expected"),
    [
        ("cpu", "1E", 10**21), ("memory", "1E", 10**18), ("memory", "1Ei", 2**60),
        ("cpu", "0.1n", 1), ("cpu", "1.0005", 1001), ("memory", "0.5", 1),  # rounded up
        ("memory", "0.1n", 1), ("cpu", "1e-3", 1), ("cpu", "-0", 0),
        ("memory", f"1e{MAX_DIGITS - 1}", 10 ** (MAX_DIGITS - 1)),  # exact to the bound
    ],
)
def test_units(resource: str, text: str, expected: int) -> None:
    assert to_units(resource, text) == expected


@pytest.mark.parametrize(
    ("resource", "value", "says"),
    [
        ("cpu", "-1", "negative"), ("memory", "-1m", "negative"), ("cpu", -1, "negative"),
        ("memory", "-0.1n", "negative"),  # -1n after rounding: never 0
        ("memory", f"1e{MAX_DIGITS}", "out of range"),
        ("cpu", f"1e{MAX_DIGITS - 3}", "out of range"),
        ("memory", "1e2147483647", "out of range"),
    ],
)
def test_refused_units(resource: str, value: object, says: str) -> None:
    with pytest.raises(QuantityError) as refused:
        to_units(resource, value)
    assert says in str(refused.value)


def test_resource_lists() -> None:
    assert parse_resource_list({"memory": "1E"}) == {"memory": 10**18}
    assert parse_resource_list({"cpu": "1E", "nvidia.com/gpu": 2}) == {
        "cpu": 10**21, "nvidia.com/gpu": 2}
    with pytest.raises(QuantityError, match=r"^memory: '-1' is negative"):
        parse_resource_list({"memory": "-1"})


def test_exa_quantities_in_every_record_that_holds_amounts() -> None:
    pod = parse_pod({"metadata": {"name": "p", "namespace": "ns", "uid": "u"}, "spec": {
        "containers": [{"name": "a", "resources": {"requests": {"cpu": "4"},
                                                   "limits": {"memory": "1E"}}}]}})
    assert (pod.parse_error, pod.requests["cpu"]) == ("", 4000)
    node = parse_node({"metadata": {"name": "n"},
                       "status": {"allocatable": {"cpu": "4", "memory": "1Ei"}}})
    assert (node.parse_error, node.allocatable["memory"]) == ("", 2**60)
    group = parse_podgroup({"metadata": {"name": "g", "namespace": "ns"},
                            "spec": {"minMember": 1, "minResources": {"memory": "1E"}}})
    assert group.valid and group.min_resources == {"memory": 10**18}
    queue = parse_queue({"metadata": {"name": "q"}, "spec": {"capability": {"memory": "1Ei"}}})
    assert not queue.errors and queue.capability == {"memory": 2**60}


def test_device_capacity_in_milli_units() -> None:
    slice_ = parse_resource_slice({"metadata": {"name": "s"}, "spec": {
        "driver": "d.example.com", "pool": {"name": "p"}, "nodeName": "n",
        "devices": [{"name": "g0", "capacity": {"memory": {"value": "1E"}}}]}})
    assert slice_.devices[0].capacity["d.example.com"]["memory"] == {"__quantity__": 10**21}
