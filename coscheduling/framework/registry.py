"""Plugins by name: how a profile in the configuration turns into plugin instances."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from coscheduling.framework.handle import Handle
from coscheduling.framework.interfaces import Plugin

PluginFactory = Callable[[Mapping[str, Any], Handle], Plugin]
"""Builds a plugin from its (already validated) args and the scheduler handle."""

ArgsValidator = Callable[[Mapping[str, Any], str], Mapping[str, Any]]
"""Checks and defaults a plugin's args; raises ConfigError naming the field (second arg is
the path of the args in the config file)."""


class Registry:
    def __init__(self) -> None:
        self._factories: dict[str, PluginFactory] = {}
        self._validators: dict[str, ArgsValidator] = {}

    def register(
        self, name: str, factory: PluginFactory, validate: ArgsValidator | None = None
    ) -> None:
        if name in self._factories:
            raise ValueError(f"plugin {name!r} registered twice")
        self._factories[name] = factory
        if validate is not None:
            self._validators[name] = validate

    def __contains__(self, name: object) -> bool:
        return name in self._factories

    def names(self) -> list[str]:
        return sorted(self._factories)

    def validate_args(self, name: str, args: Mapping[str, Any], path: str) -> Mapping[str, Any]:
        validator = self._validators.get(name)
        return validator(args, path) if validator is not None else args

    def build(self, name: str, args: Mapping[str, Any], handle: Handle) -> Plugin:
        return self._factories[name](args, handle)
