"""Build the krew archive of kubectl gang (dist/kubectl-gang.zip) and print its sha256.

The archive holds only the launcher (kubectl-gang), stored uncompressed with fixed times and
modes, so the same launcher always gives the same bytes and gang.yaml's sha256 can be
checked by a test (tests/integration/test_krew.py)."""

from __future__ import annotations

import hashlib
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
LAUNCHER = HERE / "kubectl-gang"


def build(out: Path) -> str:
    """Write the archive to ``out``; its sha256 (hex)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    entry = zipfile.ZipInfo(LAUNCHER.name, date_time=(1980, 1, 1, 0, 0, 0))
    entry.external_attr = (0o100755 << 16)  # a regular file, executable
    entry.create_system = 3  # unix, so the mode is read back
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(entry, LAUNCHER.read_bytes())
    return hashlib.sha256(out.read_bytes()).hexdigest()


if __name__ == "__main__":
    target = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parents[1] / "dist" / \
        "kubectl-gang.zip"
    print(f"{build(target)}  {target}")
