"""The collector's database files are its own: mode 0600 whatever the umask.

The database holds every node's latest report (process names, users, job ids). SQLite gives
its ``-wal`` and ``-shm`` files the database file's mode, so creating that file 0600 before
SQLite opens it is enough for all three. A database left readable by others (by an older
version, under umask 022) is tightened at start, with a warning. The collector creates no
directory: ``--db``'s directory must exist (the systemd unit's StateDirectory is 0700).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import structlog

log = structlog.get_logger("nodeagent.collector")

PRIVATE_MODE = 0o600
SIDE_FILES = ("-wal", "-shm", "-journal")


def make_private(db_path: Path) -> None:
    """Create ``db_path`` 0600 when missing; take group and other access away from it and its side files."""
    fd = os.open(db_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, PRIVATE_MODE)
    try:
        _tighten(fd, db_path)
    finally:
        os.close(fd)
    for suffix in SIDE_FILES:
        side = db_path.with_name(db_path.name + suffix)
        try:
            # Not through a link: a planted -wal link must not turn this into a chmod of its target.
            fd = os.open(side, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW)
        except FileNotFoundError:
            continue
        except OSError as err:
            log.warning("database side file left as it is", path=str(side), error=err.strerror or str(err))
            continue
        try:
            _tighten(fd, side)
        finally:
            os.close(fd)


def _tighten(fd: int, path: Path) -> None:
    mode = stat.S_IMODE(os.fstat(fd).st_mode)
    private = (mode & 0o700) | PRIVATE_MODE  # the owner reads and writes, whatever the umask took away
    if private != mode:
        try:
            os.fchmod(fd, private)
        except PermissionError:  # another user's file: SQLite will say whether it can use it
            log.warning("cannot make the database file private", path=str(path), mode=f"{mode:04o}")
            return
    if mode & 0o077:
        log.warning("database file was readable by others; made it private", path=str(path), was=f"{mode:04o}")
