"""The agent's ``process_*`` families: the names, help, types and values of prometheus_client's
``ProcessCollector``, which every Python exporter serves and dashboards expect.

Read here rather than through prometheus_client: importing that package costs the agent 2.5 MB
resident for these six lines, and the agent's memory has a budget. The values are the ones the
library reads from /proc/PID/stat and /proc/PID/limits, taken from cheaper sources of the same
kernel figures: the memory from /proc/self/statm (the same VmSize and resident pages), CPU time
from ``times(2)`` (the same utime and stime ticks), the descriptor limit from ``getrlimit(2)``
(the soft limit that /proc's "Max open files" shows), and the start time once (it does not
change). A test compares this page with the library's on the same process.
"""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator
from pathlib import Path

from nodeagent.core.exposition.text import TextFamily, sample_line

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = resource.getpagesize()


class ProcessFamilies:
    """``process_*`` of this process."""

    def __init__(self, procfs: Path = Path("/proc")) -> None:
        self.procfs = procfs
        self.start_time_seconds = _start_time(procfs)
        self._statm: int | None = None
        self._fd_dir: int | None = None
        self._pid = 0
        self._open_own()

    def _open_own(self) -> None:
        """Kept open: a scrape then reads statm with one pread and lists fd/ without resolving a
        path (an open() through Python's io stack cost more than the six lines' text). They name
        the process that opened them, so a forked child opens its own."""
        self.close()
        self._pid = os.getpid()
        self._statm = _open(self.procfs / "self" / "statm", os.O_RDONLY)
        self._fd_dir = _open(self.procfs / "self" / "fd", os.O_RDONLY | os.O_DIRECTORY)

    def close(self) -> None:
        for fd in (self._statm, self._fd_dir):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._statm = self._fd_dir = None

    def __del__(self) -> None:
        self.close()

    def families(self) -> Iterator[TextFamily]:
        if self.start_time_seconds is None:  # no /proc (another OS, a sandbox): none, as the library does
            return
        if os.getpid() != self._pid:
            self._open_own()
        try:
            if self._statm is None:
                raise OSError("statm not open")
            size_pages, resident_pages = os.pread(self._statm, 256, 0).split()[:2]
        except (OSError, ValueError):
            pass
        else:
            yield _one(
                "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.",
                float(int(size_pages) * _PAGE_BYTES),
            )  # fmt: skip
            yield _one(
                "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                float(int(resident_pages) * _PAGE_BYTES),
            )  # fmt: skip
        yield _one(
            "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
            self.start_time_seconds,
        )  # fmt: skip
        times = os.times()
        yield _one(
            "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
            times.user + times.system,
        )  # fmt: skip
        if self._fd_dir is None:
            return
        try:
            # The listing holds one descriptor of its own while it runs, as the library's does.
            open_fds = len(os.listdir(self._fd_dir))
        except OSError:
            return
        soft_limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        yield _one("process_open_fds", "gauge", "Number of open file descriptors.", float(open_fds))
        yield _one(
            "process_max_fds", "gauge", "Maximum number of open file descriptors.",
            float("inf") if soft_limit == resource.RLIM_INFINITY else float(soft_limit),
        )  # fmt: skip


def _open(path: Path, flags: int) -> int | None:
    try:
        return os.open(path, flags)
    except OSError:
        return None


def _one(name: str, kind: str, doc: str, value: float) -> TextFamily:
    family = TextFamily(name, kind, doc)
    family.lines.append(sample_line(name, "", value))
    return family


def _start_time(procfs: Path) -> float | None:
    """Boot time plus the process's start in ticks after boot, as the library computes it."""
    try:
        boot = next(
            float(line.split()[1]) for line in (procfs / "stat").read_bytes().splitlines() if line.startswith(b"btime ")
        )
        fields = (procfs / "self" / "stat").read_bytes().rsplit(b")", 1)[-1].split()
    except (OSError, StopIteration, ValueError):
        return None
    return float(fields[19]) / _TICKS + boot
