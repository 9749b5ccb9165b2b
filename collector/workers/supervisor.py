"""The front's workers: start them, restart one that dies or cannot start (with backoff, counted,
logged with its reason), and stop them all on the front's SIGTERM or SIGINT, each with its own drain.

A worker says it is up the way ``serve`` does, on stdout (``listening on HOST:PORT``, then
``database PATH``): the supervisor reads its agent port there. One that fails says why in one
line in its reason file (``WorkerSpec.reason_path``), which the supervisor reads when it exits.
One worker's failure is its own: the others start and serve, and the failed one is started
again and again (``core/program/child_restart.py``: 0.5 s growing to 30 s) until it comes up;
only when no worker at all comes up does ``start`` fail. Workers run in their own session, so a
terminal's Ctrl-C reaches the front alone and the front stops them in order; a worker whose
front is SIGKILLed stops itself (``worker_main``: the parent-death signal).
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from nodeagent.collector.workers.worker_args import WorkerSpec, worker_command
from nodeagent.core.program.child_restart import RestartPolicy

log = structlog.get_logger("nodeagent.collector")

# A worker has this long to open its database and ports (a big database's checks take a while).
START_TIMEOUT_SECONDS = 60.0
# A worker has this long after SIGTERM to drain (its final flush and acks) before SIGKILL:
# within the systemd unit's TimeoutStopSec (30 s), which counts the front's own stop too.
STOP_TIMEOUT_SECONDS = 20.0


class WorkerStartError(RuntimeError):
    """A worker did not come up: ``reason`` in one line, ``status`` its exit status (None: it hung)."""

    def __init__(self, index: int, status: int | None, reason: str) -> None:
        super().__init__(f"worker {index}: {reason}")
        self.index = index
        self.status = status
        self.reason = reason


class NoWorkerStartedError(RuntimeError):
    """Not one worker came up: the front cannot serve. ``status``: 2 when every worker refused its
    input (a bad flag, a database another collector holds), else 1."""

    def __init__(self, errors: list[WorkerStartError]) -> None:
        super().__init__("no worker started: " + "; ".join(str(err) for err in errors))
        self.status = 2 if all(err.status == 2 for err in errors) else 1


@dataclass
class Worker:
    """One worker process as the front sees it."""

    index: int
    port: int = 0
    db_path: Path | None = None
    pid: int = 0
    up: bool = False
    # Times it was started again, after it died or failed to start.
    restarts_total: int = 0
    # Why it last died or failed to start, in one line ("" before that).
    last_error: str = ""
    process: asyncio.subprocess.Process | None = field(default=None, repr=False)
    restarts: RestartPolicy = field(default_factory=RestartPolicy, repr=False)


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
    def any_up(self) -> bool:
        return any(worker.up for worker in self.workers)

    def down_reason(self, index: int) -> str:
        """ "" while worker ``index`` serves; else why it does not, in one line."""
        worker = self.workers[index]
        if worker.up:
            return ""
        if self.stopping:
            return f"worker {index} is stopping"
        why = f": {worker.last_error}" if worker.last_error else ""
        return f"worker {index} is not serving (restarting, {worker.restarts_total} restarts){why}"

    async def start(self) -> None:
        """Start every worker. Those that do not come up are logged and started again in the
        background; ``NoWorkerStartedError`` (after stopping) when none came up at all."""
        results = await asyncio.gather(*(self._first_launch(w) for w in self.workers), return_exceptions=True)
        errors = [r for r in results if isinstance(r, WorkerStartError)]
        unexpected = [r for r in results if isinstance(r, BaseException) and not isinstance(r, WorkerStartError)]
        if unexpected or len(errors) == len(self.workers):
            await self.stop()
            if unexpected:
                raise unexpected[0]
            raise NoWorkerStartedError(errors)
        self._tasks += [asyncio.create_task(self._watch(w), name=f"worker-{w.index}-watch") for w in self.workers]

    async def stop(self) -> None:
        """SIGTERM every worker and wait for each to drain (SIGKILL past ``stop_timeout``)."""
        self.stopping = True
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await asyncio.gather(*(self._stop_one(w) for w in self.workers))

    # ---- one worker ----

    async def _first_launch(self, worker: Worker) -> None:
        try:
            await self._launch(worker, None)
        except WorkerStartError as err:
            worker.last_error = err.reason
            raise

    async def _launch(self, worker: Worker, port: int | None) -> None:
        """Start ``worker`` and wait until it is up; ``WorkerStartError`` with its reason when not."""
        reason_path = self.spec.reason_path(worker.index)
        reason_path.unlink(missing_ok=True)  # a reason left by its previous run
        command = worker_command(self.spec_path, worker.index, port)
        process = await asyncio.create_subprocess_exec(
            *command, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE, start_new_session=True
        )
        worker.process = process  # from here on, stop() terminates it even half started
        try:
            async with asyncio.timeout(self.start_timeout):
                started = await self._read_banner(worker, process)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
            raise WorkerStartError(worker.index, None, f"did not come up within {self.start_timeout:g} s") from None
        if not started:  # it exited before saying it is up
            status = await process.wait()
            raise WorkerStartError(worker.index, status, self._exit_reason(worker, status))
        worker.pid = process.pid
        worker.up = True
        worker.restarts.started()
        log.info(
            "worker up", worker=worker.index, port=worker.port, pid=process.pid, db=str(worker.db_path),
            restarts=worker.restarts_total,
        )  # fmt: skip
        self._changed()
        # Nothing more comes on stdout, but a full pipe would block the worker: keep reading.
        self._tasks.append(asyncio.create_task(_drain(process), name=f"worker-{worker.index}-stdout"))

    async def _read_banner(self, worker: Worker, process: asyncio.subprocess.Process) -> bool:
        assert process.stdout is not None
        while True:
            line = (await process.stdout.readline()).decode(errors="replace").strip()
            if not line:
                return False
            if line.startswith("listening on "):
                worker.port = int(line.rpartition(":")[2])
            elif line.startswith("database "):
                worker.db_path = Path(line.removeprefix("database "))
                return True

    def _exit_reason(self, worker: Worker, status: int) -> str:
        """The worker's own line (its reason file), else what its exit status says."""
        with contextlib.suppress(OSError):
            said = " ".join(self.spec.reason_path(worker.index).read_text(errors="replace").split())
            if said:
                return said[:500]
        if status < 0:
            with contextlib.suppress(ValueError):
                return f"killed by {signal.Signals(-status).name}"
        return f"exited with status {status}"

    async def _watch(self, worker: Worker) -> None:
        """While the front serves: wait for ``worker`` to die, then start it again until it is up."""
        logged = ""  # the failure last logged as an error: a worker failing the same way says it once
        if not worker.up:
            logged = worker.last_error
            log.error(
                "worker not started; restarting it", worker=worker.index, reason=worker.last_error,
                db=str(self.spec.worker_config(worker.index).db_path),
            )  # fmt: skip
        while not self.stopping:
            if worker.up:
                assert worker.process is not None
                status = await worker.process.wait()
                worker.up = False
                self._changed()
                if self.stopping:
                    return
                ran = worker.restarts.ran_seconds()
                worker.last_error = self._exit_reason(worker, status)
                logged = worker.last_error
                log.warning(
                    "worker exited; restarting it", worker=worker.index, reason=worker.last_error, pid=worker.pid,
                    ran_seconds=round(ran, 1), restarts=worker.restarts_total,
                )  # fmt: skip
            await asyncio.sleep(worker.restarts.delay())
            worker.restarts_total += 1
            # Its agents were sent to its port: keep it. An ephemeral one that was taken since is
            # given up after it failed once (a fixed --worker-ports port is the worker's own).
            keep = worker.port or None
            try:
                await self._launch(worker, keep)
            except WorkerStartError as err:
                if keep is not None and not self.spec.worker_ports:
                    worker.port = 0
                worker.last_error = err.reason
                if err.reason != logged:
                    logged = err.reason
                    log.error(
                        "worker not started; restarting it", worker=worker.index, reason=err.reason,
                        restarts=worker.restarts_total,
                    )  # fmt: skip
                else:
                    log.debug("worker not started again", worker=worker.index, restarts=worker.restarts_total)

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
