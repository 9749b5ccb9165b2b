"""Reading procfs and sysfs attributes cheaply, keeping descriptors open.

sysfs and procfs regenerate an attribute's content on every read at offset 0, so a
descriptor kept open and re-read with ``os.pread`` returns fresh values for a tenth of the
cost of open + read + close. A device that goes away makes the read fail with ENODEV or
ENOENT; the descriptor is then dropped and the path reopened once.

Every failure is "no value" (``None``), never an exception: one unreadable attribute must
lose only that value.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource

_CHUNK = 65536
_REOPEN_ERRNOS = frozenset({errno.ENODEV, errno.ENOENT, errno.ESTALE, errno.EBADF, errno.ENXIO})


class KernelFiles:
    """A cache of open descriptors, one per attribute path."""

    __slots__ = ("_fds",)

    def __init__(self) -> None:
        self._fds: dict[str, int] = {}

    def read_bytes(self, path: str) -> bytes | None:
        fd = self._fds.get(path)
        if fd is None:
            fd = self._open(path)
            if fd is None:
                return None
        try:
            return _pread_all(fd)
        except OSError as err:
            self._drop(path)
            if err.errno not in _REOPEN_ERRNOS:
                # EINVAL and friends: the attribute exists but has no value now
                # (e.g. `speed` of a link that is down).
                return None
        fd = self._open(path)
        if fd is None:
            return None
        try:
            return _pread_all(fd)
        except OSError:
            self._drop(path)
            return None

    def read_text(self, path: str) -> str | None:
        data = self.read_bytes(path)
        if data is None:
            return None
        return data.decode("utf-8", "replace")

    def read_str(self, path: str) -> str | None:
        """The attribute's single value, stripped; None when missing or empty."""
        text = self.read_text(path)
        if text is None:
            return None
        text = text.strip()
        return text or None

    def read_int(self, path: str) -> int | None:
        text = self.read_str(path)
        if text is None:
            return None
        try:
            return int(text, 0) if text.startswith("0x") else int(text)
        except ValueError:
            return None

    def forget(self, prefix: str) -> None:
        """Close every descriptor under ``prefix`` (a device that disappeared)."""
        for path in [p for p in self._fds if p.startswith(prefix)]:
            self._drop(path)

    def close(self) -> None:
        for path in list(self._fds):
            self._drop(path)

    def __len__(self) -> int:
        return len(self._fds)

    def _open(self, path: str) -> int | None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        self._fds[path] = fd
        return fd

    def _drop(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _pread_all(fd: int) -> bytes:
    """The whole content. A short read is not the end: procfs files such as net/dev,
    diskstats and mountinfo hand out about one page per read, so read until empty."""
    data = os.pread(fd, _CHUNK, 0)
    if not data:
        return data
    parts = [data]
    offset = len(data)
    while True:
        more = os.pread(fd, _CHUNK, offset)
        if not more:
            break
        parts.append(more)
        offset += len(more)
    return b"".join(parts) if len(parts) > 1 else data


def list_dir(path: str) -> list[str]:
    """Sorted entries of a directory; empty when it does not exist or cannot be read."""
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def raise_open_file_limit() -> None:
    """Lift the soft descriptor limit to the hard one: a node with many RDMA ports keeps
    hundreds of attribute descriptors open."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else 65536
    if soft < target:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
