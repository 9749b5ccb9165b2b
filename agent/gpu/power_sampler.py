"""One thread that reads every sampled GPU's draw between ticks, in turn, on one timer.

Power read between reports (``power_samples.py``) once ran on each GPU's own reader thread
(``deadlines.GpuReader``), each waking every 0.1 s: 8 GPUs were 80 wake-ups a second, and a
wake-up (26-33 us of CPU on the development machine) cost six times the read (4.4 us). Here one
thread wakes once a period and reads each GPU whose reader has a ``between`` hook, one after the
other: 10 wake-ups a second however many GPUs are sampled, and none while no GPU asks.

A hook says when it wants its next call (``Between``: a monotonic time, or None for the next
period), so a GPU whose power regime makes sub-second readings tell nothing (``power_samples``)
is read only for its short probes, and the thread sleeps until the soonest GPU is due.

The per-GPU deadlines hold: a GPU whose reader is unresponsive or busy with the tick is skipped,
and the read in flight is watched from the tick (``in_flight``). A read that overruns
``call_seconds`` retires this thread (``retire``: its later NVML calls are abandoned, the GPU is
marked blocked until that call returns, and a fresh thread reads the others), so a hung GPU
stops only its own readings. At most one retired thread per GPU is left blocked, beside that
GPU's reader.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from nodeagent.agent.gpu import nvml_library

# A hook between ticks: the monotonic time it wants its next call, or None for the next period.
Between = Callable[[], float | None]


class Sampled(Protocol):
    """What the sampler needs of a GPU's reader (``deadlines.GpuReader``)."""

    index: int
    unresponsive: bool

    @property
    def between(self) -> Between | None: ...

    @property
    def between_seconds(self) -> float: ...

    @property
    def busy(self) -> bool: ...


class PowerSampler:
    """The readers' ``between`` hooks run on one thread; started at the first hook, woken by
    ``nudge`` when a hook appears or changes."""

    def __init__(self, readers: Callable[[], Iterable[Sampled]]) -> None:
        self._readers = readers
        self._lock = threading.Lock()  # the thread's start and retirement, and the read in flight
        # Held but while a nudge is pending: the thread waits on it with a timeout (one futex
        # wait in C; a Condition's wait costs several Python calls and a lock allocated per wait).
        self._wake = threading.Lock()
        self._wake.acquire()
        self._thread: threading.Thread | None = None
        self._generation = 0  # a retired thread sees a newer one and ends
        self._stopping = False
        self._due: dict[int, float] = {}  # GPU index -> when a resting GPU's next read is due (monotonic)
        self._round_at = 0.0  # when the next round of reads is due (monotonic); 0: none yet
        self._period = 0.0
        self._current: tuple[int, int] | None = None  # (GPU index, thread id) of the read in flight
        self.blocked: set[int] = set()  # GPUs whose read overran on a retired thread, until it returns
        self.wakeups = 0  # times the thread woke to read (for tests: counts, not times)

    def nudge(self) -> None:
        """A hook was set or cleared: (re)start the thread, or wake it to look again."""
        with self._lock:
            if self._stopping:
                return
            if self._thread is None:
                self._start()
        self._release()

    def stop(self) -> None:
        self._stopping = True
        self._release()

    def _release(self) -> None:
        with contextlib.suppress(RuntimeError):  # already released: a nudge is pending
            self._wake.release()

    def in_flight(self, index: int) -> tuple[str, float] | None:
        """(NVML call, monotonic start) of the read in flight on GPU ``index``, or None."""
        current = self._current
        if current is None or current[0] != index:
            return None
        return nvml_library.call_in_flight(current[1])

    def overrun(self, call_seconds: float, now: float) -> tuple[int, str] | None:
        """The GPU whose read has been in flight past ``call_seconds``, with its call; None if none."""
        current = self._current
        if current is None:
            return None
        in_call = nvml_library.call_in_flight(current[1])
        if in_call is None or now - in_call[1] < call_seconds:
            return None
        return current[0], in_call[0]

    def retire(self, index: int) -> None:
        """The thread blocked in GPU ``index``'s read: its later calls abandoned, the GPU blocked
        until that call returns, and a fresh thread for the others."""
        with self._lock:
            current = self._current
            if current is None or current[0] != index:
                return
            nvml_library.abandon(current[1])
            self.blocked.add(index)
            self._current = None
            self._generation += 1
            self._thread = None
            if not self._stopping:
                self._start()

    def _start(self) -> None:
        generation = self._generation
        thread = threading.Thread(target=self._run, args=(generation,), name="nvml-power", daemon=True)
        self._thread = thread
        thread.start()

    def _run(self, generation: int) -> None:
        nvml_library.watch_reset()
        ident = threading.get_ident()
        wake = self._wake
        while True:
            if self._stopping or generation != self._generation:
                return
            now = time.monotonic()
            wait = self._wait_seconds(now)
            if wait is None or wait > 0:
                wake.acquire(True, -1 if wait is None else wait)
                continue
            self.wakeups += 1
            period = self._period
            self._round_at = self._round_at + period if self._round_at + period > now else now + period
            ready = now + period / 2  # a GPU due within half a period is read in this round
            for reader in list(self._readers()):
                if not self._read(reader, ready, generation, ident):
                    return

    def _wait_seconds(self, now: float) -> float | None:
        """Seconds until the next round that reads a GPU (<= 0: now); None while no hook is set.
        Rounds come every period (the shortest ``between_seconds``); a GPU that asked for a later
        call (resting) is left out of them, and while every GPU rests the thread sleeps on."""
        period = soonest = 0.0
        due = self._due
        for reader in self._readers():
            seconds = reader.between_seconds
            if reader.between is None or seconds <= 0:
                due.pop(reader.index, None)
                continue
            period = seconds if not period else min(period, seconds)
            at = due.get(reader.index, 0.0)
            soonest = at if not soonest else min(soonest, at)
        if not period:
            self._round_at = 0.0
            return None
        if not self._round_at:
            self._round_at = now + period  # the first round a period after the first hook
        self._period = period
        return max(self._round_at, soonest) - now

    def _read(self, reader: Sampled, ready: float, generation: int, ident: int) -> bool:
        """GPU ``reader``'s hook if it is due and may be called; False when this thread was retired."""
        index = reader.index
        between = reader.between
        if between is None or self._due.get(index, 0.0) > ready:
            return True
        if reader.unresponsive or reader.busy or index in self.blocked:
            return True
        self._current = (index, ident)
        want: float | None = None
        with contextlib.suppress(Exception):  # a reading is worth no thread
            want = between()
        with self._lock:
            if generation != self._generation:  # retired while blocked in this read: it returned
                self.blocked.discard(index)
                return False
            self._current = None
            self._due[index] = want or 0.0
        return True
