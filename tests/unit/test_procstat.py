"""Reading /proc/<pid>/stat: a live process's start time, none for a zombie or a gone pid,
and a command name with spaces and parentheses read past."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from coscheduling.ops.procstat import start_ticks, stat_fields


def test_a_live_process_has_a_start_time_a_zombie_and_a_gone_one_have_none() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        started = start_ticks(child.pid)
        mine = start_ticks()
        assert started is not None and mine is not None and started >= mine
        child.kill()
        deadline = time.monotonic() + 10
        while (stat_fields(child.pid) or ["?"])[0] != "Z":  # killed, not yet waited for
            assert time.monotonic() < deadline, "the child never became a zombie"
            time.sleep(0.05)
        assert start_ticks(child.pid) is None
    finally:
        child.kill()
        child.wait()
    assert stat_fields(child.pid) is None and start_ticks(child.pid) is None


def test_a_command_name_with_spaces_and_parentheses_is_read_past() -> None:
    folder = Path(tempfile.mkdtemp())
    try:
        odd = folder / "a b) (c"
        shutil.copy("/bin/sleep", odd)
        child = subprocess.Popen([str(odd), "30"])
        try:
            fields = stat_fields(child.pid)
            assert fields is not None and fields[0] in "RSD"
            assert int(fields[1]) == os.getpid()  # the parent's pid follows the state
            assert start_ticks(child.pid) is not None
        finally:
            child.kill()
            child.wait()
    finally:
        shutil.rmtree(folder)
