"""The front's workers: start them, restart one that dies (with backoff, counted, logged), and
stop them all on the front's SIGTERM or SIGINT, each with its own drain.

A worker says it is up the way ``serve`` does, on stdout (``listening on HOST:PORT``, then
``database PATH``): the supervisor reads its agent port there. Workers run in their own session,
so a terminal's Ctrl-C reaches the front alone and the front stops them in order; a worker
whose front is SIGKILLed stops itself (``worker_main``).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from nodeagent.collector.workers.worker_args import WorkerSpec, worker_command
from nodeagent.core.transport.backoff import Backoff

log = structlog.get_logger("nodeagent.collector")

# A worker has this long to open its database and ports (a big database's checks take a while).
START_TIMEOUT_SECONDS = 60.0
# A worker has this long after SIGTERM to drain (its final flush and acks) before SIGKILL:
# within the systemd unit's TimeoutStopSec (30 s), which counts the front's own stop too.
STOP_TIMEOUT_SECONDS = 20.0
# Restart delays: 0.5 s, growing to 30 s while a worker keeps dying; reset once it ran a minute.
RESTART_BASE_SECONDS = 0.5
RESTART_CAP_SECONDS = 30.0
HEALTHY_RUN_SECONDS = 60.0


class WorkerStartError(RuntimeError):
    def __init__(self, index: int, status: int | None) -> None:
        why = "did not come up in time" if status is None else f"exited with status {status}"
        super().__init__(f"worker {index} {why}")
        self.index = index
        self.status = status


@dataclass
class Worker:
    """One worker process as the front sees it."""

    index: int
    port: int = 0
    db_path: Path | None = None
    pid: int = 0
    up: bool = False
    restarts_total: int = 0
    started_monotonic: float = 0.0
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    backoff: Backoff = field(
        default_factory=lambda: Backoff(RESTART_BASE_SECONDS, RESTART_CAP_SECONDS, jitter="equal"), repr=False
    )


class Supervisor:
    def __init__(
        self, spec: WorkerSpec, spec_path: Path, *, start_timeout: float = START_TIMEOUT_SECONDS,
        stop_timeout: float = STOP_TIMEOUT_SECONDS,
    ) -> None:  # fmt: skip
        self.spec = spec
        self.spec_path = spec_path
        self.start_timeout = start_timeout
        self.stop_timeout = stop_timeout
        self.workers = [Worker(i) for i in range(spec.workers)]
        self.stopping = False
        # Called (on the event loop) whenever a worker goes up or down: the front's health.
        self.on_change: list[Callable[[], None]] = []
        self._tasks: list[asyncio.Task[None]] = []

    @property
    def all_up(self) -> bool:
        return all(worker.up for worker in self.workers)

    async def start(self) -> None:
        """Start every worker; ``WorkerStartError`` (the others stopped) when one does not come up."""
        results = await asyncio.gather(*(self._launch(w, None) for w in self.workers), return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        if failed:
            await self.stop()
            raise failed[0]
        self._tasks = [asyncio.create_task(self._watch(w), name=f"worker-{w.index}-watch") for w in self.workers]

    async def stop(self) -> None:
        """SIGTERM every worker and wait for each to drain (SIGKILL past ``stop_timeout``)."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self._stop_one(w) for w in self.workers))

    # ---- one worker ----

    async def _launch(self, worker: Worker, port: int | None) -> None:
        command = worker_command(self.spec_path, worker.index, port)
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        worker.process = process
        try:
            async with asyncio.timeout(self.start_timeout):
                await self._read_banner(worker, process)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise WorkerStartError(worker.index, None) from None
        worker.pid = process.pid
        worker.started_monotonic = time.monotonic()
        worker.up = True
        log.info("worker up", worker=worker.index, port=worker.port, pid=process.pid, db=str(worker.db_path))
        self._changed()
        # Nothing more comes on stdout, but a full pipe would block the worker: keep reading.
        self._tasks.append(asyncio.create_task(_drain(process), name=f"worker-{worker.index}-stdout"))

    async def _read_banner(self, worker: Worker, process: asyncio.subprocess.Process) -> None:
        assert process.stdout is not None
        while True:
            line = (await process.stdout.readline()).decode(errors="replace").strip()
            if not line:  # it exited before saying it is up: its reason is on the shared stderr
                raise WorkerStartError(worker.index, await process.wait())
            if line.startswith("listening on "):
                worker.port = int(line.rpartition(":")[2])
            elif line.startswith("database "):
                worker.db_path = Path(line.removeprefix("database "))
                return

    async def _watch(self, worker: Worker) -> None:
        while not self.stopping:
            assert worker.process is not None
            status: int | None = await worker.process.wait()
            worker.up = False
            self._changed()
            if self.stopping:
                return
            ran = time.monotonic() - worker.started_monotonic
            if ran > HEALTHY_RUN_SECONDS:
                worker.backoff.reset()
            worker.restarts_total += 1
            port: int | None = worker.port  # its agents were sent there: keep it when it is free
            while not self.stopping:
                delay = worker.backoff.next()
                log.warning(
                    "worker exited; restarting", worker=worker.index, status=status, pid=worker.pid,
                    ran_seconds=round(ran, 1), restart_in_seconds=round(delay, 2), restarts=worker.restarts_total,
                )  # fmt: skip
                await asyncio.sleep(delay)
                try:
                    await self._launch(worker, port)
                    break
                except WorkerStartError as err:
                    status = err.status
                    # A fixed --worker-ports port is its own; an ephemeral one may be taken now.
                    port = None if not self.spec.worker_ports_base else port

    async def _stop_one(self, worker: Worker) -> None:
        process = worker.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(process.wait(), self.stop_timeout)
        except TimeoutError:
            log.error("worker did not drain in time; killed", worker=worker.index, seconds=self.stop_timeout)
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        worker.up = False
        log.info("worker stopped", worker=worker.index, status=process.returncode)

    def _changed(self) -> None:
        for callback in self.on_change:
            callback()


async def _drain(process: asyncio.subprocess.Process) -> None:
    assert process.stdout is not None
    while await process.stdout.read(65536):
        pass
