"""The system calls the disk spool writes with, and what the filesystem allocates for it.

A write takes every byte or fails (one that takes nothing is a full disk); a whole file is
synced before it is renamed into place, and the directory after; a file can be rewritten in
place where there is no room for a new one. A new directory and every file are private
(``0700``, ``0600``) whatever the umask. Files count against the spool's bound in whole blocks.
"""

from __future__ import annotations

import os
from pathlib import Path

# What the filesystem allocates per file (a page on tmpfs, a block on ext4).
BLOCK_BYTES = 4096


class SpoolDiskError(OSError):
    """The spool directory cannot take a write (full disk, I/O error)."""


def blocks(size: int) -> int:
    """``size`` bytes rounded up to whole blocks."""
    return -(-size // BLOCK_BYTES) * BLOCK_BYTES


def write_all(fd: int, blob: bytes) -> None:
    view = memoryview(blob)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise OSError(28, "short write")  # ENOSPC: a write that takes nothing is a full disk
        view = view[written:]


def write_file(path: Path, blob: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        write_all(fd, blob)
        os.fsync(fd)
    finally:
        os.close(fd)


def overwrite(path: Path, blob: bytes) -> None:
    """Rewrite ``path`` in place (no new blocks where ``blob`` is no longer than the file was)."""
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        view = memoryview(blob)
        offset = 0
        while offset < len(blob):
            written = os.pwrite(fd, view[offset:], offset)
            if written <= 0:
                raise OSError(28, "short write")
            offset += written
        os.ftruncate(fd, len(blob))
        os.fdatasync(fd)
    finally:
        os.close(fd)


def private_directory(directory: Path) -> None:
    """Create the spool directory 0700 whatever the umask (reports say what runs on the node)."""
    if directory.is_dir():
        return
    directory.mkdir(parents=True, exist_ok=True)
    os.chmod(directory, 0o700)


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
