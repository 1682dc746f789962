"""CEL selectors of DeviceClasses and requests, with the Kubernetes functions DRA uses.

The library is cel-expr-python (Google's cel-cpp with Python bindings): it type-checks at
compile time as cel-go does in the API server, and a compiled expression evaluates in a few
microseconds (see docs/dra.md for the comparison with cel-python and
common-expression-language). Values the CEL standard lacks travel as tagged maps:
a quantity as ``{QUANTITY: milli-units}``, a semantic version as ``{SEMVER: [major, minor,
patch], "pre": prerelease}``; the functions below recognise the tag.

Compiled programs are cached by expression text; a compile error is kept in the cache too,
so an object with a bad expression is reported, not compiled again on every cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from coscheduling.api.dra import QUANTITY, SEMVER, Device, quantity_value, semver_value
from coscheduling.api.quantity import QuantityError, parse_quantity

_T = cel.Type
_MAP = _T.Map(_T.STRING, _T.DYN)
CACHE_SIZE = 4096


class CelRuntimeError(Exception):
    """An expression failed while evaluating one device: the device does not match."""


@dataclass(frozen=True)
class Compiled:
    """A compiled selector, or why it does not compile (``error``)."""

    expression: str
    program: Any = None
    error: str = ""

    def matches(self, device: Device) -> bool:
        """Whether ``device`` passes; raises CelRuntimeError when evaluation fails."""
        value = self.program.eval(data={"device": device_value(device)})
        if value.type() == _T.ERROR:
            raise CelRuntimeError(str(value.plain_value()))
        result = value.plain_value()
        if not isinstance(result, bool):
            raise CelRuntimeError(f"the expression gave {result!r}, not a bool")
        return result


def device_value(device: Device) -> dict[str, Any]:
    """The ``device`` variable of a selector (cached on the device record)."""
    cached = device.cel_cache
    if not cached:
        cached.update({
            "driver": device.driver,
            "attributes": {domain: dict(values) for domain, values in device.attributes.items()},
            "capacity": {domain: dict(values) for domain, values in device.capacity.items()},
            "allowMultipleAllocations": False,
        })
    return cached


# -- the Kubernetes CEL library (quantity, semver) over tagged maps ----------------------
def _quantity(text: str) -> dict[str, Any]:
    try:
        return quantity_value(parse_quantity(text))
    except QuantityError as err:
        raise ValueError(f"quantity({text!r}): {err}") from None


def _is_quantity(text: str) -> bool:
    try:
        parse_quantity(text)
    except QuantityError:
        return False
    return True


def _semver(text: str) -> dict[str, Any]:
    value = semver_value(text)
    if value is None:
        raise ValueError(f"semver({text!r}): not a semantic version")
    return value


def _pre_key(pre: str) -> tuple[int, tuple[tuple[int, int, str], ...]]:
    """Prerelease order of semver: a release sorts after every prerelease of it."""
    if not pre:
        return (1, ())
    parts = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in pre.split("."))
    return (0, parts)


def _compare(a: Mapping[str, Any], b: Mapping[str, Any]) -> int:
    if QUANTITY in a and QUANTITY in b:
        left, right = int(a[QUANTITY]), int(b[QUANTITY])
        return (left > right) - (left < right)
    if SEMVER in a and SEMVER in b:
        x = (tuple(a[SEMVER]), _pre_key(str(a.get("pre", ""))))
        y = (tuple(b[SEMVER]), _pre_key(str(b.get("pre", ""))))
        return (x > y) - (x < y)
    raise ValueError("compareTo: both sides must be quantities or both semantic versions")


def _milli(a: Mapping[str, Any]) -> int:
    if QUANTITY not in a:
        raise ValueError("not a quantity")
    return int(a[QUANTITY])


def _version_part(index: int) -> Any:
    def part(a: Mapping[str, Any]) -> int:
        if SEMVER not in a:
            raise ValueError("not a semantic version")
        return int(a[SEMVER][index])
    return part


def _as_integer(a: Mapping[str, Any]) -> int:
    milli = _milli(a)
    if milli % 1000:
        raise ValueError("asInteger: the quantity is not a whole number")
    return milli // 1000


def _add(a: Mapping[str, Any], b: Any) -> dict[str, Any]:
    extra = b * 1000 if isinstance(b, int) else _milli(b)
    return {QUANTITY: _milli(a) + extra}


def _sub(a: Mapping[str, Any], b: Any) -> dict[str, Any]:
    extra = b * 1000 if isinstance(b, int) else _milli(b)
    return {QUANTITY: _milli(a) - extra}


def _overload(name: str, result: Any, params: list[Any], impl: Any, *,
              member: bool = True) -> Any:
    ident = f"{name}_{'_'.join(p.name() for p in params)}".lower()
    return cel.Overload(ident, result, params, is_member=member, impl=impl)


def _functions() -> list[Any]:
    """Declarations of the Kubernetes CEL functions DRA selectors use."""
    b, i, s, d = _T.BOOL, _T.INT, _T.STRING, _T.DOUBLE
    decl = cel.FunctionDecl
    return [
        decl("quantity", [_overload("quantity", _MAP, [s], _quantity, member=False)]),
        decl("isQuantity", [_overload("isQuantity", b, [s], _is_quantity, member=False)]),
        decl("semver", [_overload("semver", _MAP, [s], _semver, member=False)]),
        decl("isSemver", [_overload("isSemver", b, [s],
                                    lambda t: semver_value(t) is not None, member=False)]),
        decl("compareTo", [_overload("compareTo", i, [_MAP, _MAP], _compare)]),
        decl("isGreaterThan", [_overload("isGreaterThan", b, [_MAP, _MAP],
                                         lambda x, y: _compare(x, y) > 0)]),
        decl("isLessThan", [_overload("isLessThan", b, [_MAP, _MAP],
                                      lambda x, y: _compare(x, y) < 0)]),
        decl("asInteger", [_overload("asInteger", i, [_MAP], _as_integer)]),
        decl("isInteger", [_overload("isInteger", b, [_MAP], lambda x: _milli(x) % 1000 == 0)]),
        decl("asApproximateFloat", [_overload("asApproximateFloat", d, [_MAP],
                                              lambda x: _milli(x) / 1000.0)]),
        decl("sign", [_overload("sign", i, [_MAP],
                                lambda x: (_milli(x) > 0) - (_milli(x) < 0))]),
        decl("add", [_overload("add", _MAP, [_MAP, _MAP], _add),
                     _overload("add", _MAP, [_MAP, i], _add)]),
        decl("sub", [_overload("sub", _MAP, [_MAP, _MAP], _sub),
                     _overload("sub", _MAP, [_MAP, i], _sub)]),
        decl("major", [_overload("major", i, [_MAP], _version_part(0))]),
        decl("minor", [_overload("minor", i, [_MAP], _version_part(1))]),
        decl("patch", [_overload("patch", i, [_MAP], _version_part(2))]),
    ]


@lru_cache(maxsize=1)
def _env() -> Any:
    return cel.NewEnv(variables={"device": _T.DYN}, functions=_functions())


@lru_cache(maxsize=CACHE_SIZE)
def compile_selector(expression: str) -> Compiled:
    """The compiled program of ``expression`` (cached), or its compile error."""
    try:
        program = _env().compile(expression)
    except RuntimeError as err:
        return Compiled(expression, error=_short(str(err)))
    kind = program.return_type()
    if kind != _T.BOOL and kind != _T.DYN:
        return Compiled(expression, error=f"the expression gives {kind.name().lower()}, "
                                          "not bool")
    return Compiled(expression, program)


def _short(message: str) -> str:
    """cel-cpp's message without its status prefix, on one line."""
    message = message.removeprefix("INVALID_ARGUMENT: ").removeprefix("ERROR: ")
    return " ".join(line.strip() for line in message.splitlines() if line.strip())
