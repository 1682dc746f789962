"""NodeResourcesFit: resource fit (gang claims included) and allocation scoring."""

from coscheduling.plugins.noderesources.args import FitArgs, parse_args, validate_args
from coscheduling.plugins.noderesources.fit import (
    NAME,
    STATE_KEY,
    NodeResourcesFit,
    fit_items,
    fits,
    insufficient,
)

__all__ = [
    "NAME",
    "STATE_KEY",
    "FitArgs",
    "NodeResourcesFit",
    "fit_items",
    "fits",
    "insufficient",
    "parse_args",
    "validate_args",
]
