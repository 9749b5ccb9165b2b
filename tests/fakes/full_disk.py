"""A small filesystem a test can fill: a tmpfs mounted for the test (root), and a file that
takes every byte left on it, so that SQLite's writes fail with "database or disk is full"."""

from __future__ import annotations

import contextlib
import errno
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import require_root_tools


@contextlib.contextmanager
def small_tmpfs(directory: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``directory``/small, mounted while the block runs."""
    require_root_tools("mount", "umount")
    mountpoint = directory / "small"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mountpoint)], check=True, timeout=30)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False, timeout=30)


def fill(path: Path) -> Path:
    """Write zeros to ``path`` until the filesystem has no space left."""
    # Unbuffered: a buffered file still holding bytes would raise ENOSPC again at close.
    with path.open("wb", buffering=0) as out:
        try:
            for _ in range(1024):
                out.write(b"\0" * 65536)
                out.flush()
            for _ in range(1024):
                out.write(b"\0" * 4096)
                out.flush()
        except OSError as err:
            if err.errno != errno.ENOSPC:
                raise
    return path
