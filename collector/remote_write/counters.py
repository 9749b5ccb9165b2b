"""The remote-write process's counters, in a page of shared memory the collector reads for
``/metrics``: one ``memfd`` made by the collector, passed to each child it starts.

Every slot is a float64 (integers exact to 2**53), written by the child alone and read by the
collector alone; an aligned 8-byte store is not torn on the machines we run on, and a scrape
that reads one counter a moment older than another is what a scrape of any process sees.
A restarted child reads the counters its predecessor left and goes on from them, so they stay
monotonic across restarts; only the queue's gauge starts again from zero.
"""

from __future__ import annotations

import mmap
import os
import struct
from dataclasses import fields
from typing import Final

from nodeagent.collector.remote_write.sender import RemoteWriteStats

HEADER_SLOTS: Final = 8
# The header: reports and job snapshots the child read, its process CPU, the build thread's.
_REPORTS, _JOBS, _PROCESS_CPU = 0, 1, 2
_STATS_FIELDS: Final = tuple(f.name for f in fields(RemoteWriteStats))
RECEIVER_SLOTS: Final = len(_STATS_FIELDS)
_SLOT = struct.Struct("<d")


class SharedCounters:
    """The page: made by the collector (``create``), opened by the child on the descriptor given."""

    def __init__(self, fd: int, receivers: int) -> None:
        self.fd = fd
        self.receivers = receivers
        size = (HEADER_SLOTS + receivers * RECEIVER_SLOTS) * _SLOT.size
        if os.fstat(fd).st_size < size:
            os.ftruncate(fd, size)
        self._map = mmap.mmap(fd, size)

    @classmethod
    def create(cls, receivers: int) -> SharedCounters:
        fd = os.memfd_create("nodeagent-remote-write", 0)  # not close-on-exec: the child inherits it
        return cls(fd, receivers)

    def close(self) -> None:
        self._map.close()

    # ---- the header ----

    def set_read(self, reports: int, jobs: int) -> None:
        self._put(_REPORTS, reports)
        self._put(_JOBS, jobs)

    def set_cpu(self, process_seconds: float) -> None:
        self._put(_PROCESS_CPU, process_seconds)

    def reports_read(self) -> int:
        return int(self._get(_REPORTS))

    def jobs_read(self) -> int:
        return int(self._get(_JOBS))

    def process_cpu_seconds(self) -> float:
        return self._get(_PROCESS_CPU)

    # ---- per receiver ----

    def write_stats(self, receiver: int, stats: RemoteWriteStats) -> None:
        base = HEADER_SLOTS + receiver * RECEIVER_SLOTS
        for i, name in enumerate(_STATS_FIELDS):
            self._put(base + i, getattr(stats, name))

    def read_stats(self, receiver: int) -> RemoteWriteStats:
        base = HEADER_SLOTS + receiver * RECEIVER_SLOTS
        stats = RemoteWriteStats()
        for i, name in enumerate(_STATS_FIELDS):
            value = self._get(base + i)
            setattr(stats, name, value if name == "cpu_seconds_total" else int(value))
        return stats

    def _put(self, slot: int, value: float) -> None:
        _SLOT.pack_into(self._map, slot * _SLOT.size, float(value))

    def _get(self, slot: int) -> float:
        return float(_SLOT.unpack_from(self._map, slot * _SLOT.size)[0])
