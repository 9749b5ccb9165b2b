"""Per-GPU deadlines: each GPU is read on its own thread, and the tick waits for it within bounds.

A failing GPU makes NVML calls take seconds or never return, and a call blocked in the library
cannot be interrupted from Python. So each GPU's calls run on that GPU's own daemon thread
(``GpuReader``), and the tick waits for all of them at once within ``[gpu_deadlines]``
(``nodeagent.agent.config.GpuDeadlines``): past ``call_seconds`` in one call, or past the tick's
bound in all of them, the tick goes on without that GPU. The GPU is then unresponsive, with the
call that overran: its thread's next calls are abandoned (``nvml_library.abandon``), so the one call
blocked in the library is all that is left of it, and it is tried again with backoff (1 s,
doubling to ``backoff_max_seconds``) by a probe the tick does not wait for. A probe that finishes
within the bounds makes the GPU responsive again.

A GPU whose thread is still busy is given no more work: threads, and calls left blocked in the
library, are at most one per GPU, beside the power read between ticks: that runs for every GPU on
one shared thread (``power_sampler.py``), whose read in flight is watched here like a GPU's own
call (past ``call_seconds`` the GPU turns unresponsive and that thread is retired, a fresh one
reading the others), so at most one more blocked call per GPU. The threads are daemons: a call that
never returns does not keep the process from exiting.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.agent.config import GpuDeadlines
from nodeagent.agent.gpu import nvml_library
from nodeagent.agent.gpu.power_sampler import Between, PowerSampler
from nodeagent.v1 import nodeagent_pb2 as pb

FIRST_BACKOFF_SECONDS = 1.0
# What an overrun names when no NVML call was in flight (the GPU's work as a whole was too slow).
ALL_CALLS = "the tick's calls"


@dataclass(frozen=True, slots=True)
class Overrun:
    """A GPU that did not answer in time this tick."""

    call: str  # the NVML call that overran, or ALL_CALLS
    since: float  # wall-clock time it stopped answering
    began: bool  # it stopped answering this tick (an event says so)


@dataclass(frozen=True, slots=True)
class Recovery:
    """A GPU that answers again after ``seconds`` unresponsive."""

    call: str
    seconds: float


class _Job:
    __slots__ = ("done", "error", "finished", "judged", "probe", "result", "slowest", "started", "work")

    def __init__(self, work: Callable[[], Any], probe: bool, started: float) -> None:
        self.work = work
        self.probe = probe  # nobody waits for it; judged at a later tick
        self.started = started
        self.finished = 0.0
        self.done = False
        self.judged = False
        self.result: Any = None
        self.error: BaseException | None = None
        self.slowest: tuple[str, float] | None = None


class GpuReader:
    """One GPU's thread, its job, and how the GPU has been answering."""

    def __init__(self, index: int, done: threading.Condition, sampler: PowerSampler | None = None) -> None:
        self.index = index
        self._sampler = sampler
        self._done = done
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self.thread_id = 0
        self.job: _Job | None = None
        self.unresponsive = False
        self.call = ""
        self.since = 0.0  # wall clock
        self.since_monotonic = 0.0
        self.backoff = FIRST_BACKOFF_SECONDS
        self.next_try = 0.0
        self.taken = 0
        self.expected = 0
        self._stopping = False
        # Work done between ticks, every ``between_seconds`` or when it asks (``power_samples.py``):
        # on the readers' shared sampler thread (``power_sampler.py``), watched like the tick's calls.
        self._between: Between | None = None
        self._between_seconds = 0.0

    @property
    def between(self) -> Between | None:
        return self._between

    @between.setter
    def between(self, hook: Between | None) -> None:
        changed = hook is not self._between
        self._between = hook
        if changed and self._sampler is not None:
            self._sampler.nudge()

    @property
    def between_seconds(self) -> float:
        return self._between_seconds

    @between_seconds.setter
    def between_seconds(self, seconds: float) -> None:
        changed = seconds != self._between_seconds
        self._between_seconds = seconds
        if changed and self._sampler is not None and self._between is not None:
            self._sampler.nudge()

    @property
    def busy(self) -> bool:
        return self.job is not None and not self.job.done

    def submit(self, work: Callable[[], Any], *, probe: bool, now: float) -> _Job:
        assert not self.busy, "one job per GPU at a time"
        job = self.job = _Job(work, probe, now)
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"nvml-gpu{self.index}", daemon=True)
            self._thread.start()
        self._wake.set()
        return job

    def stop(self) -> None:
        """The thread ends when idle, or when its blocked call returns."""
        self._stopping = True
        self._wake.set()

    def _run(self) -> None:
        self.thread_id = threading.get_ident()
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._stopping:
                return
            job = self.job
            if job is None or job.done:
                continue
            nvml_library.watch_reset()
            try:
                job.result = job.work()
            except Exception as err:  # handed to the tick, which raises it
                job.error = err
            job.slowest = nvml_library.slowest_call(self.thread_id)
            with self._done:
                job.finished = time.monotonic()
                job.done = True
                self._done.notify_all()


class GpuReaders:
    """The readers of a node's GPUs, by index, and the tick's wait on them."""

    def __init__(self, deadlines: GpuDeadlines, wall_clock: Callable[[], float] = time.time) -> None:
        self.deadlines = deadlines
        self._wall = wall_clock
        self._done = threading.Condition()
        self._readers: dict[int, GpuReader] = {}
        self.sampler = PowerSampler(lambda: tuple(self._readers.values()))
        self.recovered: dict[int, Recovery] = {}  # of the last ``read``

    def reader(self, index: int) -> GpuReader:
        found = self._readers.get(index)
        if found is None:
            found = self._readers[index] = GpuReader(index, self._done, self.sampler)
        return found

    def close(self) -> None:
        self.sampler.stop()
        for r in self._readers.values():
            r.stop()
        self._readers = {}

    def completeness(self, index: int) -> tuple[int, int]:
        """(samples taken, samples expected) of the GPU at ``index`` since the agent started."""
        found = self._readers.get(index)
        return (0, 0) if found is None else (found.taken, found.expected)

    def answering(self, index: int) -> bool:
        found = self._readers.get(index)
        return found is None or not (found.unresponsive or found.busy)

    def read(self, work: Mapping[int, Callable[[], Any]], bound: float, *, count: bool = True) -> dict[int, Any]:
        """Each GPU's ``work`` on its own thread; its result, or an ``Overrun`` for a GPU that did not
        answer within ``bound`` seconds (``call_seconds`` a call). ``count``: a tick's read, counted
        in the GPU's completeness (a scan's is not)."""
        self.recovered = {}
        now = time.monotonic()
        out: dict[int, Any] = {}
        waiting: list[GpuReader] = []
        sampled = self._sampler_overrun(now)
        for index, fn in work.items():
            r = self.reader(index)
            if count:
                r.expected += 1
            job = r.job
            if job is not None and job.probe and not job.judged:
                self._judge_probe(r, job, bound, now)
            if r.busy or index == sampled:  # still in its last work, or its read between ticks hung
                out[index] = Overrun(r.call, r.since, began=index == sampled)
            elif r.unresponsive:
                if now >= r.next_try:
                    r.submit(fn, probe=True, now=now)
                out[index] = Overrun(r.call, r.since, began=False)
            else:
                r.submit(fn, probe=False, now=now)
                waiting.append(r)
        for r in self._wait(waiting, bound):
            out[r.index] = Overrun(r.call, r.since, began=True)
        for r in waiting:
            job = r.job
            if job is None or not job.done or r.unresponsive:
                continue
            if job.error is not None:
                raise job.error
            if count:
                r.taken += 1
            out[r.index] = job.result
        return out

    def _wait(self, waiting: list[GpuReader], bound: float) -> list[GpuReader]:
        """Wait until each job is done or past its deadline; the readers that overran."""
        overran: list[GpuReader] = []
        pending = list(waiting)
        with self._done:
            while pending:
                pending = [r for r in pending if r.job is not None and not r.job.done]
                if not pending:
                    break
                now = time.monotonic()
                soonest = None
                for r in list(pending):
                    deadline, call = self._deadline(r, bound)
                    if now >= deadline:
                        self._overrun(r, call, now)
                        overran.append(r)
                        pending.remove(r)
                    elif soonest is None or deadline < soonest:
                        soonest = deadline
                if soonest is not None:
                    self._done.wait(soonest - now)
        return overran

    def _deadline(self, r: GpuReader, bound: float) -> tuple[float, str]:
        assert r.job is not None
        deadline, call = r.job.started + bound, ALL_CALLS
        in_call = nvml_library.call_in_flight(r.thread_id) if r.thread_id else None
        if in_call is not None:
            deadline, call = min(deadline, in_call[1] + self.deadlines.call_seconds), in_call[0]
        sampled = self.sampler.in_flight(r.index)  # the power read between ticks, on the sampler
        if sampled is not None and sampled[1] + self.deadlines.call_seconds < deadline:
            deadline, call = sampled[1] + self.deadlines.call_seconds, sampled[0]
        return deadline, call

    def _sampler_overrun(self, now: float) -> int | None:
        """The GPU whose read between ticks overran ``call_seconds`` on the sampler thread: it turns
        unresponsive and the sampler goes on without it (``PowerSampler.retire``); None if none."""
        found = self.sampler.overrun(self.deadlines.call_seconds, now)
        if found is None:
            return None
        index, call = found
        self.sampler.retire(index)
        r = self.reader(index)
        if r.unresponsive:
            return None
        self._overrun(r, call, now)
        return index

    def _overrun(self, r: GpuReader, call: str, now: float) -> None:
        """The GPU stops being waited for: its remaining calls abandoned, tried again after backoff."""
        if r.thread_id:
            nvml_library.abandon(r.thread_id)
        if self.sampler.in_flight(r.index) is not None:
            self.sampler.retire(r.index)
        if not r.unresponsive:
            r.unresponsive = True
            r.call = call
            r.since = self._wall()
            r.since_monotonic = now
            r.backoff = FIRST_BACKOFF_SECONDS
        else:
            r.call = call or r.call
            r.backoff = min(r.backoff * 2, self.deadlines.backoff_max_seconds)
        r.next_try = now + r.backoff

    def _judge_probe(self, r: GpuReader, job: _Job, bound: float, now: float) -> None:
        """A probe done within the bounds brings the GPU back; one past them backs off further."""
        if not job.done:
            deadline, call = self._deadline(r, bound)
            if now >= deadline:
                job.judged = True
                self._overrun(r, call, now)
            return
        job.judged = True
        slowest = job.slowest
        if slowest is not None and slowest[1] > self.deadlines.call_seconds:
            self._overrun(r, slowest[0], now)
        elif job.finished - job.started > bound:
            self._overrun(r, ALL_CALLS, now)
        else:
            self.recovered[r.index] = Recovery(r.call, now - r.since_monotonic)
            r.unresponsive = False
            r.call = ""
            r.backoff = FIRST_BACKOFF_SECONDS


def unresponsive_sample(index: int, uuid: str, overrun: Overrun, now: float) -> pb.GpuSample:
    """The sample of a GPU that did not answer: no readings, which call overran, since when."""
    return pb.GpuSample(
        index=index,
        uuid=uuid,
        unresponsive=True,
        unresponsive_call=overrun.call,
        unresponsive_seconds=max(0.0, now - overrun.since),
    )


def unresponsive_event(index: int, uuid: str, overrun: Overrun, deadlines: GpuDeadlines, now: float) -> pb.Event:
    return pb.Event(
        time_unix_seconds=now,
        kind="gpu_unresponsive",
        severity="critical",
        subject=f"gpu:{index}",
        message=(
            f"GPU {index} ({uuid or 'unknown uuid'}) does not answer: {overrun.call} overran "
            f"(bounds {deadlines.call_seconds:g} s a call, {deadlines.tick_seconds:g} s a tick); "
            "reported without readings, tried again with backoff"
        ),
        attributes={"uuid": uuid, "call": overrun.call},
    )


def responsive_event(index: int, uuid: str, recovery: Recovery, now: float) -> pb.Event:
    return pb.Event(
        time_unix_seconds=now,
        kind="gpu_responsive",
        severity="info",
        subject=f"gpu:{index}",
        message=f"GPU {index} ({uuid or 'unknown uuid'}) answers again after {recovery.seconds:.0f} s unresponsive",
        attributes={"uuid": uuid, "call": recovery.call, "seconds": f"{recovery.seconds:.1f}"},
    )
