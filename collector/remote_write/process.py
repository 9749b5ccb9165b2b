"""Remote write off the ingest path: the collector's side of its remote-write process.

A ``CollectorServer`` owns one ``RemoteWriteProcess`` (each worker its own, with
``serve --workers``). Building series and posting them took the interpreter lock from the ingest
loop (at full resolution, 63 of 1,500 reports/s acked); now a child process does both
(``child.py``), and ingest only hands each accepted report over (``offer``): the report's bytes
as the agent sent them and its verdict's plain values (``records.py``), one non-blocking send on
a unix seqpacket socket, a few microseconds. Ingest never waits for it: when the child is behind
and the socket is full, or the child is down, the report is not handed over and is counted, in
reports (``dropped``, by reason): a report never handed over was never turned into series, so
its samples are not known. Inside the child the bounded queue per receiver counts in samples, as
before.

The child dies with the collector (``PR_SET_PDEATHSIG``, and the socket's end of file), and is
started again when it dies (``restarts_total``), after the delay the workers' supervisor waits by
too (``core/program/child_restart.py``: 0.5 s, growing while it keeps dying at once), given each
node's topology again before the node's next report: what the dead child had read and not posted is
lost and counted (``lost_samples``: its queue, less the request it was posting, whose samples
are in doubt, ``in_doubt_samples``: the receiver may have taken them; reports handed over and
never read: ``dropped["process_died"]``). Its counters live in shared memory (``counters.py``),
written as they change, so a SIGKILL leaves them exact; they are continued by the next child,
and ``/metrics`` reads them there.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Final

import structlog

from nodeagent.collector.history.counters import SplitCounters
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.counters import SharedCounters
from nodeagent.collector.remote_write.records import (
    info_record,
    jobs_record,
    ledger_record,
    report_record,
    verdict_bytes,
)
from nodeagent.collector.remote_write.sender import RemoteWriteStats
from nodeagent.collector.remote_write.series import verdict_row
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.program.child_restart import RestartPolicy
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.collector")

STOP_SECONDS: Final = 5.0
# Why a report was not handed over (the label of nodeagent_remote_write_reports_dropped_total).
DROP_REASONS: Final = ("handover_full", "process_down", "too_large", "process_died")
_SO_SNDBUFFORCE: Final = 32


class RemoteWriteProcess:
    """The child, its socket and its counters; ``offer`` is the only call on the ingest path."""

    def __init__(
        self,
        configs: Sequence[RemoteWriteConfig],
        jobs: Callable[[], tuple[JobVerdict, ...]] | None = None,
        *,
        max_record_bytes: int = 4 * 1024 * 1024,
        gpu_seconds: Callable[[str], SplitCounters | None] | None = None,
    ) -> None:
        self.configs = tuple(configs)
        # One resolution for all (serve has one flag); the smallest if a caller gave several.
        self._resolution = min(c.resolution_seconds for c in self.configs)
        self._max_record_bytes = max_record_bytes
        # The socket's buffer (one socket for all: the largest asked for).
        self._handover_bytes = max(c.handover_bytes for c in self.configs)
        self.counters = SharedCounters.create(len(self.configs))
        # Reports not handed over, by reason (DROP_REASONS); reports handed over.
        self.dropped = dict.fromkeys(DROP_REASONS, 0)
        self.handed_over = 0
        self.restarts_total = 0
        self._restarts = RestartPolicy()
        # Per receiver: samples a dead child held in its queue and had not posted (lost), and
        # those of the request it was posting (in doubt: the receiver may have taken them).
        self.lost_samples = [0] * len(self.configs)
        self.in_doubt_samples = [0] * len(self.configs)
        self._unread_counted = 0
        self._jobs = jobs
        # Each node's split counters (its history's), and the version of them last handed over.
        self._gpu_seconds = gpu_seconds
        self._ledger_sent: dict[str, int] = {}
        self._jobs_seen: tuple[JobVerdict, ...] | None = None
        self._last_pushed: dict[str, float] = {}
        self._verdicts: dict[str, tuple[NodeVerdict, bytes]] = {}
        # Each node's topology as last sent, and the nodes a restarted child has not been given it.
        self._infos: dict[str, bytes] = {}
        self._needs_info: set[str] = set()
        self._sock: socket.socket | None = None
        self._retired: list[socket.socket] = []
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._watcher = threading.Thread(target=self._watch, name="nodeagent-remote-write-watch", daemon=True)

    @property
    def pid(self) -> int | None:
        proc = self._proc
        return proc.pid if proc is not None else None

    def start(self) -> None:
        with self._lock:
            self._spawn()
        self._watcher.start()

    def stop(self, timeout: float = STOP_SECONDS) -> None:
        """End of file to the child, which sends what it holds for a moment and exits; killed
        after ``timeout``."""
        self._stopping.set()
        with self._lock:
            sock, proc = self._sock, self._proc
            self._sock = None
        if sock is not None:
            sock.close()
        if proc is not None:
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(5)
        if self._watcher.is_alive():
            self._watcher.join(5)
        for old in self._retired:
            old.close()

    def receivers(self) -> list[tuple[str, RemoteWriteStats]]:
        """Each receiver's URL and counters, as the child last published them."""
        return [(c.url, self.counters.read_stats(i)) for i, c in enumerate(self.configs)]

    # ---- the ingest path ----

    def offer(self, report: pb.NodeReport, verdict: NodeVerdict, raw: bytes) -> None:
        """From the event loop: one accepted report (skipped inside the resolution); never waits."""
        if self._retired:
            for old in self._retired:
                old.close()  # on this thread, the only one that sends
            self._retired.clear()
        node_id = report.node_id
        resolution = self._resolution
        if resolution > 0:
            last = self._last_pushed.get(node_id)
            if last is not None and report.time_unix_seconds - last < resolution and not report.HasField("info"):
                return
            self._last_pushed[node_id] = report.time_unix_seconds
        if report.HasField("info"):
            self._infos[node_id] = report.info.SerializeToString()
            self._needs_info.discard(node_id)
        elif (
            self._needs_info
            and node_id in self._needs_info
            and self._send(info_record(node_id, self._infos[node_id]), count=False)
        ):
            self._needs_info.discard(node_id)
        counters = self._gpu_seconds(node_id) if self._gpu_seconds is not None else None
        if (
            counters is not None
            and counters.version != self._ledger_sent.get(node_id)
            and self._send(ledger_record(node_id, counters.closed), count=False)
        ):
            self._ledger_sent[node_id] = counters.version
        cached = self._verdicts.get(node_id)
        if cached is None or cached[0] is not verdict:
            cached = self._verdicts[node_id] = (verdict, verdict_bytes(verdict_row(verdict)))
        if self._send(report_record(cached[1], raw)):
            self.handed_over += 1
        if self._jobs is not None:
            snapshot = self._jobs()
            # Sent again with the next report when it did not fit: a snapshot is not lost to a burst.
            if snapshot is not self._jobs_seen and self._send(jobs_record(snapshot), count=False):
                self._jobs_seen = snapshot

    def _send(self, record: bytes, *, count: bool = True) -> bool:
        sock = self._sock
        reason = ""
        if sock is None:
            reason = "process_down"
        elif len(record) > self._max_record_bytes:
            reason = "too_large"
        else:
            try:
                sock.send(record)
                return True
            except BlockingIOError:
                reason = "handover_full"
            except OSError as err:
                # EMSGSIZE: larger than the socket's buffer; anything else: the child is gone.
                reason = "too_large" if err.errno == 90 else "process_down"
        if count:
            self.dropped[reason] += 1
        return False

    # ---- the child ----

    def _spawn(self) -> None:
        # PR_SET_PDEATHSIG fires when the *thread* that started the child ends: it is started
        # from the thread that calls ``start`` (the event loop's) and from the watcher, both of
        # which live as long as the collector does.
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        for option in (_SO_SNDBUFFORCE, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                ours.setsockopt(socket.SOL_SOCKET, option, self._handover_bytes)
                break
        ours.setblocking(False)
        configs = [{k: str(v) if isinstance(v, Path) else v for k, v in asdict(c).items()} for c in self.configs]
        command = [
            sys.executable, "-m", "nodeagent.collector.remote_write.child",
            "--socket-fd", str(theirs.fileno()), "--counters-fd", str(self.counters.fd),
            "--parent-pid", str(os.getpid()), "--max-record-bytes", str(self._max_record_bytes),
            "--configs", json.dumps(configs),
        ]  # fmt: skip
        try:
            fds = (theirs.fileno(), self.counters.fd)
            self._proc = subprocess.Popen(command, pass_fds=fds, stdin=subprocess.DEVNULL)
            self._restarts.started()
        finally:
            theirs.close()
        old, self._sock = self._sock, ours
        if old is not None:
            self._retired.append(old)

    def _watch(self) -> None:
        """Start the child again whenever it dies, until ``stop``."""
        while not self._stopping.is_set():
            proc = self._proc
            if proc is None:
                return
            proc.wait()
            if self._stopping.is_set():
                return
            self._count_losses()
            ran = self._restarts.ran_seconds()
            delay = self._restarts.delay()
            log.warning(
                "remote-write process exited; starting it again", pid=proc.pid, status=proc.returncode,
                ran_seconds=round(ran, 1), restart_in_seconds=round(delay, 2),
            )  # fmt: skip
            if self._stopping.wait(delay):
                return
            with self._lock:
                if self._stopping.is_set():
                    return
                self._spawn()
                self._needs_info = set(self._infos)  # replaced whole: the ingest thread reads it
                self._ledger_sent = {}  # a new child has no node's counters: each sent again
                self.restarts_total += 1

    def _count_losses(self) -> None:
        # Handed over and never read: in the dead child's socket.
        unread = self.handed_over - self.counters.reports_read() - self._unread_counted
        if unread > 0:
            self.dropped["process_died"] += unread
            self._unread_counted += unread
        for i in range(len(self.configs)):
            stats = self.counters.read_stats(i)
            # The request it was posting when it died may or may not have reached the receiver:
            # those samples are neither sent nor lost, but in doubt. The rest of its queue was
            # never posted: lost.
            in_flight = min(stats.in_flight_samples, stats.queued_samples)
            self.in_doubt_samples[i] += in_flight
            self.lost_samples[i] += stats.queued_samples - in_flight
            # The queue is gone with it (written here while no child runs: the next one starts later).
            stats.queued_samples = stats.in_flight_samples = 0
            self.counters.write_stats(i, stats)
