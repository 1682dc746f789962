"""Kubernetes resource quantities as exact integers.

CPU is counted in millicores, every other resource in its base unit (bytes, devices),
rounding up like the API server does, so arithmetic on requests is exact.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from decimal import MAX_EMAX, MAX_PREC, MIN_EMIN, ROUND_CEILING, ROUND_UP, Context, Decimal

CPU = "cpu"
MEMORY = "memory"
EPHEMERAL_STORAGE = "ephemeral-storage"
PODS = "pods"

# The grammar of k8s.io/apimachinery's ParseQuantity, read for facts: a sign, digits, an
# optional fraction (either side may be empty: "1.", ".5"; a bare sign or "." reads as 0),
# then a suffix. Possessive quantifiers scan left to right with no backtracking, as its
# scanner does.
_FORM = re.compile(
    r"(?P<sign>[+-]?+)(?P<whole>[0-9]*+)(?:\.(?P<fraction>[0-9]*+))?+"
    r"(?P<suffix>[eEinumkKMGTP]*+[+-]?+[0-9]*+)"
)
_DECIMAL_SUFFIX = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12,
                   "P": 15, "E": 18}
_BINARY_SUFFIX = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
# "E" alone is exa (10^18); "e"/"E" followed by a signed integer is a decimal exponent.
_EXPONENT = re.compile(r"[eE](?P<sign>[+-]?)0*(?P<digits>[0-9]+)")
# What Go's strings.TrimSpace removes (unicode.IsSpace), which the API server applies to a
# quantity before parsing it; str.strip() would also remove \x1c-\x1f.
_GO_SPACE = ("\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006"
             "\u2007\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000")
_NANO = Decimal("1e-9")
_BINARY_CAP = Decimal(2**63 - 1)
# Arithmetic on quantities never rounds: every digit the API server keeps is kept here.
_EXACT = Context(prec=MAX_PREC, Emax=MAX_EMAX, Emin=MIN_EMIN)
# Amounts are exact integers up to this many digits, far beyond int64's 19. Scores and
# metrics take them through float (at most about 1.8e308), and sums of many amounts must
# stay below that: 200 digits leave 10^100 of room. Beyond it (the API server takes
# "1e999"), an amount is refused, never wrapped or capped.
MAX_DIGITS = 200


class QuantityError(ValueError):
    """A quantity string that the API server would not accept."""


def parse_quantity(value: object) -> Decimal:
    """The exact value of a quantity (``"500m"``, ``"1Gi"``, ``"1E"``, ``"2e3"``, a number),
    as the API server's ``resource.ParseQuantity`` reads it."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise QuantityError(f"{_shown(value)} is not a quantity: expected a string or a number")
    if isinstance(value, int):
        return Decimal(value)
    return _parse_text(repr(value) if isinstance(value, float) else value)


def _parse_text(value: str) -> Decimal:
    text = value.strip(_GO_SPACE)
    match = _FORM.fullmatch(text) if text else None
    if match is None:
        raise QuantityError(
            f"{_shown(value)} is not a quantity: expected a number with an optional suffix "
            f"(n u m k M G T P E Ki Mi Gi Ti Pi Ei) or exponent (e3, E-2)")
    sign, whole, suffix = match["sign"], match["whole"], match["suffix"]
    fraction = match["fraction"] or ""
    digits = f"{sign}{whole}{fraction}" if whole or fraction else f"{sign}0"
    if suffix in _BINARY_SUFFIX:
        power = _BINARY_SUFFIX[suffix]
        # ParseQuantity needs a digit wherever its int64 fast path gives up (Pi, Ei).
        _need_digits(value, bool(whole or fraction) or power < 50)
        amount = _EXACT.multiply(Decimal(f"{digits}E-{len(fraction)}"), Decimal(2**power))
        # Binary amounts (only) are capped at the largest int64, keeping their sign.
        amount = _round_nano(amount)
        return amount if amount.copy_abs() <= _BINARY_CAP else _BINARY_CAP.copy_sign(amount)
    exponent = _exponent(value, suffix)
    _need_digits(value, bool(whole or fraction) or exponent >= -9)
    return _round_nano(Decimal(f"{digits}E{exponent - len(fraction)}"))


def _exponent(value: str, suffix: str) -> int:
    """The power of ten of a decimal suffix or exponent."""
    if suffix in _DECIMAL_SUFFIX:
        return _DECIMAL_SUFFIX[suffix]
    match = _EXPONENT.fullmatch(suffix)
    if match is None:
        raise QuantityError(f"{_shown(value)} has an unknown suffix {_shown(suffix)}")
    exponent = int(match["sign"] + match["digits"]) if len(match["digits"]) <= 19 else 2**63
    if not -(2**63) <= exponent < 2**63:
        raise QuantityError(
            f"{_shown(value)}: the exponent of {_shown(suffix)} does not fit 64 bits")
    # The API server keeps the exponent in 32 bits, wrapping: 1e4294967296 is 1.
    return (exponent + 2**31) % 2**32 - 2**31


def _shown(value: object, limit: int = 60) -> str:
    """``value`` for a message: its repr cut short (a tenant's string can be long), or what
    it is for containers (which may nest too deep to print) and long ints."""
    if not isinstance(value, str | int | float | None):
        return f"a {type(value).__name__}"
    if isinstance(value, int) and value.bit_length() > 4 * limit:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}...({len(text)} characters)"


def _need_digits(value: str, has_digits: bool) -> None:
    if not has_digits:
        raise QuantityError(f"{_shown(value)} is not a quantity: it has no digits")


def _round_nano(amount: Decimal) -> Decimal:
    """Below a nano-unit the API server rounds away from zero: 0.1n is 1n, -0.1n is -1n."""
    exponent = amount.as_tuple().exponent
    if isinstance(exponent, int) and exponent >= -9:
        return amount
    return amount.quantize(_NANO, rounding=ROUND_UP, context=_EXACT)


def scaled_units(amount: Decimal, factor: int) -> int:
    """``amount * factor`` rounded up to an integer, as Go's ``MilliValue`` (factor 1000) and
    ``Value`` (factor 1) do for amounts of at least 0, but exact beyond int64."""
    if amount and amount.adjusted() + len(str(factor)) > MAX_DIGITS:
        raise QuantityError(f"an amount of about 10^{amount.adjusted()} is out of range: "
                            f"amounts are kept exact up to {MAX_DIGITS} digits")
    product = _EXACT.multiply(amount, Decimal(factor))
    return int(product.to_integral_value(rounding=ROUND_CEILING, context=_EXACT))


def to_units(resource: str, value: object) -> int:
    """An amount of ``resource`` in the scheduler's integer unit (millicores for cpu, the base
    unit otherwise), rounded up.

    Amounts of a resource (requests, limits, capacities) are at least 0: a negative one would
    make room out of nothing, so it is refused like a malformed one."""
    if isinstance(value, str):
        return _string_units(resource, value)
    return _units(resource, value)


def _units(resource: str, value: object) -> int:
    amount = parse_quantity(value)
    if amount < 0:
        raise QuantityError(f"{_shown(value)} is negative: a resource amount is at least 0")
    return scaled_units(amount, 1000 if resource == CPU else 1)


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
