"""Kubernetes resource quantities as exact integers.

CPU is counted in millicores, every other resource in its base unit (bytes, devices),
rounding up like the API server does, so arithmetic on requests is exact.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from decimal import ROUND_CEILING, Decimal, InvalidOperation

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

_SUFFIX = {
    "": Decimal(1),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
    "Ki": Decimal(2**10),
    "Mi": Decimal(2**20),
    "Gi": Decimal(2**30),
    "Ti": Decimal(2**40),
    "Pi": Decimal(2**50),
    "Ei": Decimal(2**60),
}
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)((?:[eE][+-]?[0-9]+)|[a-zA-Z]*)$")


class QuantityError(ValueError):
    """A quantity string that the API server would not accept."""


def parse_quantity(value: object) -> Decimal:
    """Parse ``"500m"``, ``"1Gi"``, ``"2e3"`` or a number into an exact Decimal."""
    if isinstance(value, bool):
        raise QuantityError(f"{value!r} is not a quantity")
    if isinstance(value, int | float):
        return _bounded(Decimal(str(value)), value)
    if not isinstance(value, str):
        raise QuantityError(f"{value!r} is not a quantity")
    match = _QUANTITY.match(value.strip())
    if not match:
        raise QuantityError(f"{value!r} is not a quantity")
    number, suffix = match.groups()
    try:
        base = Decimal(number)
    except InvalidOperation as err:
        raise QuantityError(f"{value!r} is not a quantity") from err
    if suffix[:1] in ("e", "E"):
        exponent = int(suffix[1:])
        if abs(exponent) > 30:
            raise QuantityError(f"{value!r} is out of range")
        return _bounded(base * (Decimal(10) ** exponent), value)
    if suffix not in _SUFFIX:
        raise QuantityError(f"{value!r} has an unknown suffix {suffix!r}")
    return _bounded(base * _SUFFIX[suffix], value)


_LIMIT = Decimal(2**63)


def _bounded(amount: Decimal, value: object) -> Decimal:
    """The API server stores quantities in int64 (milli-units): anything else is refused."""
    if not amount.is_finite() or abs(amount) >= _LIMIT:
        raise QuantityError(f"{value!r} is out of range")
    return amount


def to_units(resource: str, value: object) -> int:
    """An amount of ``resource`` in the scheduler's integer unit (millicores for cpu).

    Amounts of a resource (requests, limits, capacities) are at least 0: a negative one would
    make room out of nothing, so it is refused like a malformed one."""
    units = _string_units(resource, value) if isinstance(value, str) else _units(resource, value)
    if units < 0:
        raise QuantityError(f"{value!r} is negative: a resource amount is at least 0")
    return units


def _units(resource: str, value: object) -> int:
    amount = parse_quantity(value)
    if resource == CPU:
        amount *= 1000
    return int(amount.to_integral_value(rounding=ROUND_CEILING))


@functools.lru_cache(maxsize=4096)
def _string_units(resource: str, value: str) -> int:
    """Pods of one template repeat the same few strings: parse each once."""
    return _units(resource, value)


def parse_resource_list(raw: object) -> dict[str, int]:
    """A ``ResourceList`` mapping as integer units; raises QuantityError naming the key."""
    if not raw:
        return {}
    if not isinstance(raw, dict):
        raise QuantityError(f"expected a map of resource quantities, got {type(raw).__name__}")
    out: dict[str, int] = {}
    for name, value in raw.items():
        try:
            out[str(name)] = to_units(str(name), value)
        except QuantityError as err:
            raise QuantityError(f"{name}: {err}") from err
    return out


def format_units(resource: str, amount: int) -> str:
    """Human form of an integer amount, for messages."""
    if resource == CPU:
        return f"{amount}m" if amount % 1000 else str(amount // 1000)
    if resource in (MEMORY, EPHEMERAL_STORAGE):
        for suffix, size in (("Gi", 2**30), ("Mi", 2**20), ("Ki", 2**10)):
            if amount % size == 0 and amount >= size:
                return f"{amount // size}{suffix}"
    return str(amount)


def format_amounts(amounts: Mapping[str, int], *, zeros: bool = False) -> dict[str, str]:
    """Amounts for status and messages, by resource name (zero ones left out unless
    ``zeros``)."""
    return {r: format_units(r, v) for r, v in sorted(amounts.items()) if v or zeros}


def add_into(total: dict[str, int], extra: dict[str, int], sign: int = 1) -> None:
    """``total += sign * extra``, in place; keys that reach zero are kept for cheap reuse."""
    for name, amount in extra.items():
        total[name] = total.get(name, 0) + sign * amount
