"""Timestamps and durations in the forms the API server and PodGroups use."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime

_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]*)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNIT = {
    "ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0,
}


def parse_rfc3339(value: object) -> float:
    """Seconds since the epoch for an RFC 3339 timestamp; 0.0 when absent or unreadable."""
    if not isinstance(value, str) or not value:
        return 0.0
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


# The last second formatted and its text: every event and condition written in one second
# carries the same timestamp, formatted once.
_last_second: tuple[int, str] = (0, "1970-01-01T00:00:00Z")


def format_rfc3339(epoch: float) -> str:
    """The API server's timestamp form (seconds precision, UTC)."""
    global _last_second  # a one-entry memo, replaced whole: safe across threads
    second = math.floor(epoch)
    memo = _last_second
    if memo[0] == second:
        return memo[1]
    text = datetime.fromtimestamp(second, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    _last_second = (second, text)
    return text


def format_rfc3339_micro(epoch: float) -> str:
    """MicroTime form, used by events."""
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_duration(value: str) -> float:
    """Seconds in a Go-style duration string such as ``"30s"``, ``"1m30s"`` or ``"500ms"``.

    Raises ValueError for anything else, including negative and empty durations.
    """
    text = value.strip()
    if not text:
        raise ValueError("empty duration")
    pos = 0
    total = 0.0
    while pos < len(text):
        match = _DURATION_PART.match(text, pos)
        if not match:
            raise ValueError(f"{value!r} is not a duration like '30s', '5m' or '1h30m'")
        total += float(match.group(1)) * _DURATION_UNIT[match.group(2)]
        pos = match.end()
    return total


def format_duration(seconds: float) -> str:
    """Short human form of a duration, for messages."""
    if seconds >= 60 and seconds % 60 == 0:
        return f"{int(seconds // 60)}m"
    if seconds == int(seconds):
        return f"{int(seconds)}s"
    return f"{seconds:.1f}s"
