"""JSON of any depth, decoded without ``RecursionError``.

The C decoder recurses once per level of nesting, so a value nested more deeply than the
interpreter's recursion limit (about a thousand levels, a few KiB of ``[[[[...``) raises
``RecursionError`` for the whole list page or watch event it is in. The API server stores
such values where a type leaves fields free (a ResourceClaim's opaque driver parameters, a
CRD with ``x-kubernetes-preserve-unknown-fields``). ``loads`` keeps the C decoder for every
answer and, only when it fails that way (or on a number Python will not convert), decodes
that answer again level by level, with depth as data: values nested deeper than
``MAX_DEPTH`` (or numbers it cannot convert) are left out, each replaced by an
``Undecodable`` and listed with its path, so the caller can set aside the one object that
holds it and keep the rest.
"""

from __future__ import annotations

import json
import json.decoder
import re
from collections.abc import Callable, Iterator
from json.scanner import NUMBER_RE
from typing import Any

MAX_DEPTH = 512
"""Levels of nesting the level-by-level decoder builds; deeper values are left out (half
the interpreter's recursion limit, so what it builds can still be walked and encoded)."""
PATH_SHOWN = 12
"""Path elements kept for a message: enough to name the field, not its 512 levels."""

Path = tuple[str | int, ...]

# The C string scanner json.loads uses (typeshed does not declare it).
scanstring: Callable[[str, int], tuple[str, int]] = json.decoder.scanstring  # type: ignore[attr-defined]
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_STRUCTURE = re.compile(r'["\[\]{}]')
_CONSTANTS: dict[str, Any] = {
    "null": None, "true": True, "false": False,
    "NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf"),
}


class Undecodable:
    """Stands in for a value the level-by-level decoder did not build, and says why."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why

    def __repr__(self) -> str:
        return f"Undecodable({self.why!r})"


class Decoded(dict[str, Any]):
    """A JSON object decoded level by level; ``left_out`` holds the path and reason of each
    value replaced by an ``Undecodable``."""

    left_out: list[tuple[Path, str]]


def loads(data: bytes | str) -> Any:
    """``json.loads``, falling back to the level-by-level decoder when the answer is too
    deep for it or holds a number it cannot convert; malformed JSON still raises."""
    try:
        return json.loads(data)
    except RecursionError:
        pass
    except json.JSONDecodeError:
        raise
    except ValueError:  # an integer beyond int()'s digit limit
        pass
    return decode_bounded(data.decode() if isinstance(data, bytes) else data)


def field_path(path: Path) -> str:
    """``("spec", "devices", "config", 0, "opaque")`` -> ``spec.devices.config[0].opaque``,
    cut after ``PATH_SHOWN`` elements."""
    text = ""
    for element in path[:PATH_SHOWN]:
        text += f"[{element}]" if isinstance(element, int) else (
            f".{element}" if text else str(element))
    return text + ("..." if len(path) > PATH_SHOWN else "")


class _Frame:
    """A container being filled: the value, and the key its next value goes under."""

    __slots__ = ("key", "value")

    def __init__(self, value: dict[str, Any] | list[Any]) -> None:
        self.value = value
        self.key = ""


def decode_bounded(text: str, max_depth: int = MAX_DEPTH) -> Any:
    """Decode ``text`` without recursion; values nested deeper than ``max_depth`` and
    numbers that do not convert become ``Undecodable`` (listed in ``left_out`` when the
    result is an object)."""
    frames: list[_Frame] = []
    left_out: list[tuple[Path, str]] = []
    pos = _skip_space(text, 0)
    while True:
        value, pos, opened = _value(text, pos, frames, left_out, max_depth)
        if opened:
            continue
        while True:
            if not frames:
                return _finish(text, pos, value, left_out)
            frame = frames[-1]
            _attach(frame, value)
            pos = _skip_space(text, pos)
            char = text[pos:pos + 1]
            if char == ",":
                pos = _next_member(text, pos + 1, frame)
                break
            if char != ("}" if isinstance(frame.value, dict) else "]"):
                raise json.JSONDecodeError("Expecting ',' delimiter", text, pos)
            value, pos = frames.pop().value, pos + 1


def _value(text: str, pos: int, frames: list[_Frame], left_out: list[tuple[Path, str]],
           max_depth: int) -> tuple[Any, int, bool]:
    """The value at ``pos``: (value, position after it, False), or (None, position of its
    first member, True) when a container was opened (pushed onto ``frames``)."""
    char = text[pos:pos + 1]
    if char in ("{", "["):
        if len(frames) >= max_depth:
            left_out.append((_path(frames), f"nested deeper than {max_depth} levels"))
            return Undecodable(f"nested deeper than {max_depth} levels"), \
                _skip_container(text, pos), False
        container: dict[str, Any] | list[Any] = {} if char == "{" else []
        pos = _skip_space(text, pos + 1)
        if text[pos:pos + 1] == ("}" if char == "{" else "]"):
            return container, pos + 1, False
        frame = _Frame(container)
        frames.append(frame)
        if char == "{":
            pos = _key(text, pos, frame)
        return None, pos, True
    if char == '"':
        string, end = scanstring(text, pos + 1)
        return string, end, False
    number = NUMBER_RE.match(text, pos)
    if number is not None:
        return _number(number, frames, left_out), number.end(), False
    for word, constant in _CONSTANTS.items():
        if text.startswith(word, pos):
            return constant, pos + len(word), False
    raise json.JSONDecodeError("Expecting value", text, pos)


def _number(match: re.Match[str], frames: list[_Frame],
            left_out: list[tuple[Path, str]]) -> Any:
    integer, fraction, exponent = match.groups()
    if fraction or exponent:
        return float(integer + (fraction or "") + (exponent or ""))
    try:
        return int(integer)
    except ValueError:  # more digits than int() converts
        why = f"an integer of {len(integer.lstrip('-'))} digits"
        left_out.append((_path(frames), why))
        return Undecodable(why)


def _key(text: str, pos: int, frame: _Frame) -> int:
    """Read an object member's key and its colon; the position of its value."""
    if text[pos:pos + 1] != '"':
        raise json.JSONDecodeError("Expecting property name enclosed in double quotes",
                                   text, pos)
    frame.key, pos = scanstring(text, pos + 1)
    pos = _skip_space(text, pos)
    if text[pos:pos + 1] != ":":
        raise json.JSONDecodeError("Expecting ':' delimiter", text, pos)
    return _skip_space(text, pos + 1)


def _next_member(text: str, pos: int, frame: _Frame) -> int:
    pos = _skip_space(text, pos)
    return _key(text, pos, frame) if isinstance(frame.value, dict) else pos


def _attach(frame: _Frame, value: Any) -> None:
    if isinstance(frame.value, dict):
        frame.value[frame.key] = value
    else:
        frame.value.append(value)


def _path(frames: list[_Frame]) -> Path:
    """Where the next value of the innermost frame goes."""
    return tuple(frame.key if isinstance(frame.value, dict) else len(frame.value)
                 for frame in frames)


def _skip_space(text: str, pos: int) -> int:
    match = _WHITESPACE.match(text, pos)
    return match.end() if match is not None else pos


def _skip_container(text: str, pos: int) -> int:
    """The position after the container opening at ``pos``, strings skipped whole."""
    depth = 0
    for match in _structure(text, pos):
        char = match.group()
        if char in "[{":
            depth += 1
        elif char in "]}":
            depth -= 1
            if depth == 0:
                return match.end()
    raise json.JSONDecodeError("Unterminated container", text, pos)


def _structure(text: str, pos: int) -> Iterator[re.Match[str]]:
    """Brackets from ``pos`` on, outside strings."""
    while True:
        match = _STRUCTURE.search(text, pos)
        if match is None:
            return
        if match.group() == '"':
            _, pos = scanstring(text, match.end())
            continue
        yield match
        pos = match.end()


def _finish(text: str, pos: int, value: Any, left_out: list[tuple[Path, str]]) -> Any:
    if _skip_space(text, pos) != len(text):
        raise json.JSONDecodeError("Extra data", text, pos)
    if not isinstance(value, dict):
        return value
    decoded = Decoded(value)
    decoded.left_out = left_out
    return decoded
