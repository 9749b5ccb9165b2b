"""``--probe``: how fast the dataset volume reads, measured, not assumed.

Direct I/O (``O_DIRECT``, buffers from ``mmap``, so page-aligned) bypasses the page cache, which
would otherwise answer re-reads from memory. The probe lays out a file of at most ``size_bytes``
on the volume, reads it sequentially in 1 MiB blocks from several threads (throughput), then in
4 KiB blocks at random offsets (IOPS, ``queue_depth`` reads in flight; at 1 the figure is the
volume's latency), each for ``seconds`` at most, and deletes the file. On a read-only volume it
reads the largest existing file instead. The figures can feed the detector's "volume peak"
configuration (``read_bytes_per_second``, ``read_iops``).
"""

from __future__ import annotations

import contextlib
import errno
import mmap
import os
import random
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any, Final

SEQUENTIAL_BLOCK_BYTES: Final = 1024 * 1024
RANDOM_BLOCK_BYTES: Final = 4096
SEQUENTIAL_STREAMS: Final = 4
MIN_FILE_BYTES: Final = 16 * 1024 * 1024
_BATCH: Final = 64  # reads between two looks at the clock
_OFFSET_BATCHES: Final = 512  # 32768 random offsets, reused round-robin
RAMP_SECONDS: Final = 0.25  # at the start of each phase, not counted


class ProbeError(RuntimeError):
    """The probe could not run; the message is one line."""


@dataclass(frozen=True, slots=True)
class ProbeOptions:
    path: str
    seconds: float = 2.0  # per phase
    size_bytes: int = 256 * 1024 * 1024
    queue_depth: int = 1  # random reads in flight (threads)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    path: str
    file_bytes: int
    file_created: bool  # False: an existing file was read (read-only volume)
    write_bytes_per_second: float | None  # while laying out the file; None when not written
    read_bytes_per_second: float  # sequential, 1 MiB blocks, SEQUENTIAL_STREAMS streams
    read_iops: float  # random 4 KiB reads
    read_latency_seconds: float  # mean per random read
    queue_depth: int
    random_block_bytes: int = RANDOM_BLOCK_BYTES
    sequential_block_bytes: int = SEQUENTIAL_BLOCK_BYTES

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_probe(options: ProbeOptions) -> ProbeResult:
    if not os.path.isdir(options.path):
        raise ProbeError(f"{options.path}: not a directory")
    with _probe_file(options) as (fd, size, created, write_rate):
        sequential = _sequential(fd, size, options.seconds)
        iops = _random(fd, size, options.seconds, options.queue_depth)
    return ProbeResult(
        path=options.path,
        file_bytes=size,
        file_created=created,
        write_bytes_per_second=write_rate,
        read_bytes_per_second=sequential,
        read_iops=iops,
        read_latency_seconds=options.queue_depth / iops if iops else 0.0,
        queue_depth=options.queue_depth,
    )


@contextlib.contextmanager
def _probe_file(options: ProbeOptions) -> Iterator[tuple[int, int, bool, float | None]]:
    """(descriptor open for direct reads, bytes to read, created, write rate); the file is
    removed afterwards, whatever happens."""
    name = os.path.join(options.path, f".nodeagent-probe-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        fd = os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT | os.O_CLOEXEC, 0o600)
    except OSError as err:
        if err.errno == errno.EINVAL:
            raise ProbeError(f"{options.path}: the filesystem does not support direct I/O") from err
        if err.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise ProbeError(f"{options.path}: cannot create a probe file: {err.strerror}") from err
        with _existing_file(options.path) as (existing, size):
            yield existing, size, False, None
        return
    try:
        size, rate = _lay_out(fd, _file_budget(options), options.seconds)
        yield fd, size, True, rate
    finally:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(name)


def _file_budget(options: ProbeOptions) -> int:
    """The file's size: the asked size, at most half the free space, whole 1 MiB blocks."""
    stat = os.statvfs(options.path)
    budget = min(options.size_bytes, stat.f_bavail * stat.f_frsize // 2)
    budget -= budget % SEQUENTIAL_BLOCK_BYTES
    if budget < MIN_FILE_BYTES:
        raise ProbeError(f"{options.path}: not enough free space for a {MIN_FILE_BYTES >> 20} MiB probe file")
    return budget


def _lay_out(fd: int, size: int, seconds: float) -> tuple[int, float]:
    """Write up to ``size`` bytes of random data (no zeros a volume could skip), for at most
    ``seconds``; returns the bytes written and the rate."""
    buffer = mmap.mmap(-1, SEQUENTIAL_BLOCK_BYTES)
    buffer.write(os.urandom(SEQUENTIAL_BLOCK_BYTES))
    written = 0
    started = time.perf_counter()
    deadline = started + seconds
    try:
        while written < size:
            done = os.pwritev(fd, [buffer], written)
            if done != SEQUENTIAL_BLOCK_BYTES:
                raise ProbeError(f"short direct write ({done} bytes)")
            written += done
            if written >= MIN_FILE_BYTES and time.perf_counter() > deadline:
                break
        os.fsync(fd)
    except OSError as err:
        raise ProbeError(f"writing the probe file failed: {err.strerror}") from err
    finally:
        buffer.close()
    return written, written / max(time.perf_counter() - started, 1e-9)


@contextlib.contextmanager
def _existing_file(path: str) -> Iterator[tuple[int, int]]:
    """The largest regular file near the top of a read-only volume, opened for direct reads."""
    best: tuple[int, str] | None = None
    seen = 0
    for directory, _, files in os.walk(path):
        for entry in files:
            seen += 1
            full = os.path.join(directory, entry)
            with contextlib.suppress(OSError):
                size = os.stat(full).st_size
                if size >= MIN_FILE_BYTES and (best is None or size > best[0]):
                    best = (size, full)
        if seen > 2000:  # a dataset holds millions of files: a sample will do
            break
    if best is None:
        raise ProbeError(f"{path}: read-only, and no file of {MIN_FILE_BYTES >> 20} MiB or more to read")
    try:
        fd = os.open(best[1], os.O_RDONLY | os.O_DIRECT | os.O_CLOEXEC)
    except OSError as err:
        raise ProbeError(f"{best[1]}: cannot open for direct reads: {err.strerror}") from err
    try:
        yield fd, best[0] - best[0] % SEQUENTIAL_BLOCK_BYTES
    finally:
        os.close(fd)


def _sequential(fd: int, size: int, seconds: float) -> float:
    """Bytes per second of 1 MiB reads, SEQUENTIAL_STREAMS streams each walking its share."""
    blocks = max(1, size // SEQUENTIAL_BLOCK_BYTES)

    def stream(index: int, meter: _Meter) -> None:
        buffer = mmap.mmap(-1, SEQUENTIAL_BLOCK_BYTES)
        buffers = [buffer]
        block = index
        try:
            while True:
                done = 0
                for _ in range(8):
                    done += os.preadv(fd, buffers, (block % blocks) * SEQUENTIAL_BLOCK_BYTES)
                    block += SEQUENTIAL_STREAMS
                if not meter.add(done):
                    return
        finally:
            buffer.close()

    return _in_threads(SEQUENTIAL_STREAMS, stream, seconds)


def _random(fd: int, size: int, seconds: float, queue_depth: int) -> float:
    """Random RANDOM_BLOCK_BYTES reads per second, ``queue_depth`` at a time."""
    blocks = max(1, size // RANDOM_BLOCK_BYTES)

    # Offsets drawn before the clock starts: the loop below is as little Python as a read can be.
    rng = random.Random(0)
    offsets = [[rng.randrange(blocks) * RANDOM_BLOCK_BYTES for _ in range(_BATCH)] for _ in range(_OFFSET_BATCHES)]

    def reader(index: int, meter: _Meter) -> None:
        buffer = mmap.mmap(-1, RANDOM_BLOCK_BYTES)
        buffers = [buffer]
        preadv = os.preadv
        batch = index
        try:
            while True:
                for offset in offsets[batch % _OFFSET_BATCHES]:
                    preadv(fd, buffers, offset)
                batch += 1
                if not meter.add(_BATCH):
                    return
        finally:
            buffer.close()

    return _in_threads(queue_depth, reader, seconds)


class _Meter:
    """One worker's progress. What it does in the phase's first moments is not counted (fio's
    ramp_time): a volume's burst allowance, or its cache warming, would inflate a short phase."""

    __slots__ = ("counted", "deadline", "first", "last", "ramp_end", "started", "total")

    def __init__(self, started: float, seconds: float) -> None:
        self.started = started
        self.ramp_end = started + min(RAMP_SECONDS, seconds * 0.2)
        self.deadline = started + seconds
        self.first: float | None = None  # when counting began
        self.last = started
        self.counted = 0
        self.total = 0

    def add(self, amount: int) -> bool:
        """Record ``amount`` done since the last call; False once the phase is over."""
        now = time.perf_counter()
        self.total += amount
        if self.first is None:
            if now >= self.ramp_end:
                self.first = now  # counting starts after this batch
        else:
            self.counted += amount
        self.last = now
        return now < self.deadline

    def rate(self) -> float:
        if self.first is not None and self.counted and self.last > self.first:
            return self.counted / (self.last - self.first)
        return self.total / max(self.last - self.started, 1e-9)  # too short to leave out a ramp


def _in_threads(count: int, work: Callable[[int, _Meter], None], seconds: float) -> float:
    """Run ``work(index, meter)`` in ``count`` threads (os.preadv releases the GIL while a read is
    in flight) for ``seconds``; the sum of their rates."""
    errors: list[OSError] = []
    started = time.perf_counter()
    meters = [_Meter(started, seconds) for _ in range(count)]

    def run(index: int) -> None:
        try:
            work(index, meters[index])
        except OSError as err:
            errors.append(err)

    if count == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,), name=f"probe-{i}") for i in range(count)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise ProbeError(f"direct read failed: {errors[0].strerror}")
    return sum(meter.rate() for meter in meters)
