"""Versioned scheduler configuration: defaults and validation that names the bad field."""

from coscheduling.config.errors import ConfigError
from coscheduling.config.load import load_file, parse_config
from coscheduling.config.types import SchedulerConfig

__all__ = ["ConfigError", "SchedulerConfig", "load_file", "parse_config"]
