"""One process per state: a lock file held for as long as a program owns its directory or database.

Two agents on one spool directory would reuse its epoch and sequence numbers, and two collectors
on one database would each believe their own watermarks: both lose reports without a word. The
owner takes an exclusive ``flock`` on a lock file (Prometheus locks its TSDB directory the same
way) and holds it until it closes or dies: the kernel drops a dead process's lock, so a crash
never leaves a stale lock behind. The file keeps the owner's pid, for the message the second
process prints; it is left in place on exit, since removing it would race the next owner.

Within one process a second ``LockFile`` on the same file takes the lock over from the first
(which then holds nothing): the owner is the process, and a store reopened in the process that
held it (a restart in a test, a spool reopened after its disk came back) is that same owner.
"""

from __future__ import annotations

import errno
import fcntl
import os
from pathlib import Path

# The locks this process holds, by the lock file's (device, inode).
_HELD: dict[tuple[int, int], LockFile] = {}


class LockedError(RuntimeError):
    """Another live process holds the lock. The message names the path and, when known, its pid."""


class LockFile:
    """An exclusive lock on ``path``, taken at construction (``LockedError`` when another process
    holds it) and released by ``release`` or when the process ends."""

    def __init__(self, path: Path, what: str) -> None:
        self.path = path
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        stat = os.fstat(fd)
        key = (stat.st_dev, stat.st_ino)
        held = _HELD.get(key)
        if held is not None and held._fd is not None:
            os.close(fd)  # this process holds it already: take that descriptor, and its lock, over
            self._fd: int | None = held._fd
            self._key = key
            held._fd = None
            _HELD[key] = self
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as err:
            os.close(fd)
            if err.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            holder = _holder(path)
            by = f" by process {holder}" if holder else " by another process"
            raise LockedError(f"{what} is in use{by} (lock file {path})") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd
        self._key = key
        _HELD[key] = self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None
            if _HELD.get(self._key) is self:
                del _HELD[self._key]

    @property
    def held(self) -> bool:
        return self._fd is not None


def _holder(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
