"""The agent's ``process_*`` families: the names, help, types and values of prometheus_client's
``ProcessCollector``, which every Python exporter serves and dashboards expect.

Read here from the agent's own /proc entries (stat, limits, fd), as the library reads them,
rather than through prometheus_client: importing that package costs the agent 2.5 MB resident
for these six lines, and the agent's memory has a budget. A test compares this page with the
library's on the same process.
"""

from __future__ import annotations

import os
import resource
from collections.abc import Iterator
from pathlib import Path

from nodeagent.core.metrics_text import TextFamily, sample_line

_TICKS = os.sysconf("SC_CLK_TCK")
_PAGE_BYTES = resource.getpagesize()


class ProcessFamilies:
    """``process_*`` of one process (``proc``: its /proc/PID, by default the agent's own)."""

    def __init__(self, proc: Path = Path("/proc/self"), procfs: Path = Path("/proc")) -> None:
        self.proc = proc
        self.boot_time_seconds = _boot_time(procfs)

    def families(self) -> Iterator[TextFamily]:
        if not self.boot_time_seconds:
            return
        try:
            fields = (self.proc / "stat").read_bytes().rsplit(b")", 1)[-1].split()
        except OSError:
            pass
        else:
            # Fields after the command name, from state (field 3 of proc(5)) on.
            yield _one("process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.", float(fields[20]))
            yield _one(
                "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.",
                float(fields[21]) * _PAGE_BYTES,
            )  # fmt: skip
            yield _one(
                "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.",
                float(fields[19]) / _TICKS + self.boot_time_seconds,
            )  # fmt: skip
            yield _one(
                "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.",
                float(fields[11]) / _TICKS + float(fields[12]) / _TICKS,
            )  # fmt: skip
        try:
            max_fds = next(
                float(line.split()[3])
                for line in (self.proc / "limits").read_bytes().splitlines()
                if line.startswith(b"Max open file")
            )
            open_fds = len(os.listdir(self.proc / "fd"))
        except (OSError, StopIteration):
            return
        yield _one("process_open_fds", "gauge", "Number of open file descriptors.", float(open_fds))
        yield _one("process_max_fds", "gauge", "Maximum number of open file descriptors.", max_fds)


def _one(name: str, kind: str, doc: str, value: float) -> TextFamily:
    family = TextFamily(name, kind, doc)
    family.lines.append(sample_line(name, "", value))
    return family


def _boot_time(procfs: Path) -> float:
    try:
        for line in (procfs / "stat").read_bytes().splitlines():
            if line.startswith(b"btime "):
                return float(line.split()[1])
    except OSError:
        pass
    return 0.0
