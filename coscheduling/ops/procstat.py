"""Reading a process's /proc/<pid>/stat (Linux), for the few places that need its state or
start time: start-up timing, and telling a live process from a recycled pid."""

from __future__ import annotations

from pathlib import Path

START_TIME_FIELD = 19  # field 22 of the stat line, counted from the state (field 3)


def stat_fields(pid: int | str = "self") -> list[str] | None:
    """The fields of the stat line after the command name (the state first), or None when
    the process is gone or there is no /proc. The name is skipped by its last ")": it may
    hold spaces and parentheses."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def start_ticks(pid: int | str = "self") -> int | None:
    """When the process started, in clock ticks since boot; None when it is gone or a
    zombie."""
    fields = stat_fields(pid)
    if fields is None or fields[0] == "Z":
        return None
    return int(fields[START_TIME_FIELD])
