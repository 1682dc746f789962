"""Configuration errors that name the field at fault."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class ConfigError(ValueError):
    """A bad configuration value. ``path`` is where it sits, e.g. ``profiles.plugins.score``."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path
        self.message = message


def reject_unknown(raw: Mapping[str, Any], known: set[str], path: str) -> None:
    """Unknown keys are errors: a typo must not silently fall back to a default."""
    for key in raw:
        if key not in known:
            choices = ", ".join(sorted(known))
            raise ConfigError(f"{path}.{key}" if path else str(key),
                              f"unknown field (known fields: {choices})")


def as_mapping(value: object, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(path, f"must be a mapping, got {type(value).__name__}")
    return value


def as_int(value: object, path: str, *, minimum: int | None = None,
           maximum: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(path, f"must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise ConfigError(path, f"must be >= {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise ConfigError(path, f"must be <= {maximum}, got {value}")
    return value


def as_float(value: object, path: str, *, minimum: float | None = None,
             exclusive_minimum: float | None = None) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(path, f"must be a number, got {value!r}")
    number = float(value)
    if number != number or number in (float("inf"), float("-inf")):
        raise ConfigError(path, f"must be a finite number, got {value!r}")
    if minimum is not None and number < minimum:
        raise ConfigError(path, f"must be >= {minimum:g}, got {value!r}")
    if exclusive_minimum is not None and number <= exclusive_minimum:
        raise ConfigError(path, f"must be > {exclusive_minimum:g}, got {value!r}")
    return number


def as_str(value: object, path: str, *, choices: tuple[str, ...] = ()) -> str:
    if not isinstance(value, str):
        raise ConfigError(path, f"must be a string, got {value!r}")
    if choices and value not in choices:
        raise ConfigError(path, f"must be one of {', '.join(choices)}, got {value!r}")
    return value


def as_bool(value: object, path: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(path, f"must be true or false, got {value!r}")
    return value


def as_list(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise ConfigError(path, f"must be a list, got {type(value).__name__}")
    return value
