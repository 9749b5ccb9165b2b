"""The remote-write process: reads what ingest hands over (``records.py``), turns each report into
series once (``NodeSeries``, one per node; ``JobSeries`` for the job roll-up's snapshots) and
gives the same bytes to every receiver's queue (``sender.py``, a thread each). Its counts go to the
collector's shared page (``counters.py``) as they change (a record read, a report queued, a
request posted, answered): a SIGKILL at any moment leaves them exact up to that moment. CPU
times go there every ``PUBLISH_SECONDS`` and when it exits.

Started by ``process.py`` as ``python -m nodeagent.collector.remote_write.child``, never by hand.
It dies with the collector: ``PR_SET_PDEATHSIG`` (SIGTERM), and the socket's end of file, after
which it builds what was still in the socket, gives the receivers a moment to take the queues
(``DRAIN_SECONDS``) and exits.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import pickle
import signal
import socket
import sys
import time
from pathlib import Path
from typing import Final

import structlog
from google.protobuf.message import DecodeError

from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.counters import SharedCounters
from nodeagent.collector.remote_write.records import (
    INFO,
    JOBS,
    LEDGER,
    REPORT,
    read_info,
    read_jobs,
    read_ledger,
    read_report,
)
from nodeagent.collector.remote_write.sender import RemoteWriter
from nodeagent.collector.remote_write.series import EncodedReport, JobSeries, NodeSeries, VerdictRow
from nodeagent.core.program.child_restart import die_with_parent
from nodeagent.core.program.log import configure_logging
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.collector")

PUBLISH_SECONDS: Final = 0.05
DRAIN_SECONDS: Final = 2.0
_PATH_FIELDS: Final = ("basic_auth_password_file", "bearer_token_file", "tls_ca", "tls_cert", "tls_key")


class SeriesBuilder:
    """Every node's series template and the jobs sent: the state the series need between records."""

    def __init__(self, resolution_seconds: float) -> None:
        self._nodes: dict[str, NodeSeries] = {}
        self._jobs = JobSeries(resolution_seconds)

    def report(self, report: pb.NodeReport, verdict: VerdictRow | None) -> EncodedReport:
        node = self._nodes.get(report.node_id)
        if node is None:
            node = self._nodes[report.node_id] = NodeSeries(report.node_id)
        return node.encode(report, verdict)

    def info(self, node_id: str, info: pb.NodeInfo) -> None:
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = NodeSeries(node_id)
        node.set_info(info)

    def jobs(self, snapshot: tuple[JobVerdict, ...]) -> EncodedReport | None:
        return self._jobs.encode(snapshot)

    def ledger(self, node_id: str, totals: dict[str, tuple[float, ...]]) -> None:
        """The node's GPU-seconds by job and category: its next report's series carry them."""
        node = self._nodes.get(node_id)
        if node is None:
            node = self._nodes[node_id] = NodeSeries(node_id)
        node.gpu_seconds = totals


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="nodeagent-remote-write")
    parser.add_argument("--socket-fd", type=int, required=True)
    parser.add_argument("--counters-fd", type=int, required=True)
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--max-record-bytes", type=int, required=True)
    parser.add_argument("--configs", required=True)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    _die_with(args.parent_pid)
    configure_logging(args.log_level)
    configs = [_config(item) for item in json.loads(args.configs)]
    counters = SharedCounters(args.counters_fd, len(configs))
    writers = [
        RemoteWriter(config, counters.read_stats(i), functools.partial(counters.write_stats, i))
        for i, config in enumerate(configs)
    ]
    for writer in writers:
        writer.start()
    sock = socket.socket(fileno=args.socket_fd)
    try:
        _serve(sock, SeriesBuilder(min(c.resolution_seconds for c in configs)), writers, counters,
               args.max_record_bytes, args.parent_pid)  # fmt: skip
    finally:
        # One budget for all receivers: one that is down does not hold the others' queues back.
        deadline = time.monotonic() + DRAIN_SECONDS
        for writer in writers:
            writer.drain(max(0.0, deadline - time.monotonic()))
        for writer in writers:
            writer.stop(0.5)
        _publish(counters, writers)
    return 0


def _serve(
    sock: socket.socket, builder: SeriesBuilder, writers: list[RemoteWriter], counters: SharedCounters,
    max_record_bytes: int, parent_pid: int,
) -> None:  # fmt: skip
    """Until end of file: read a record, build, enqueue; publish the counters as time passes."""
    buffer = bytearray(max_record_bytes + 1)
    view = memoryview(buffer)
    reports, jobs = counters.reports_read(), counters.jobs_read()
    refused_logged = False
    published = time.monotonic()
    sock.settimeout(PUBLISH_SECONDS)
    while True:
        try:
            size = sock.recv_into(buffer)
        except TimeoutError:
            size = -1
        if size == 0:
            return  # the collector closed its end (or is gone)
        if size > 0:
            record = view[:size]
            kind = bytes(record[:1])
            encoded: EncodedReport | None = None
            reports += kind == REPORT  # one of them, or neither (a topology, the ledger)
            jobs += kind == JOBS
            # Published as each is read: the collector counts what a killed process had not read.
            counters.set_read(reports, jobs)
            try:
                encoded = _build(builder, kind, record)
            except (DecodeError, ValueError, EOFError, pickle.UnpicklingError) as err:
                if not refused_logged:  # a bug, not load: once is enough to find it
                    log.error("remote write: a record it cannot read", error=str(err))
                    refused_logged = True
            if encoded is not None:
                for writer in writers:
                    writer.enqueue(encoded)
        if size < 0 and _STOP["asked"]:
            # Asked to stop (the collector died, or a signal to this process): what was in the
            # socket has been read (the read timed out); its end of file may never come from a
            # collector that is alive and did not ask.
            counters.set_read(reports, jobs)
            return
        now = time.monotonic()
        if now - published >= PUBLISH_SECONDS:
            published = now
            counters.set_read(reports, jobs)
            _publish(counters, writers)
            if os.getppid() != parent_pid:
                return
    counters.set_read(reports, jobs)


def _build(builder: SeriesBuilder, kind: bytes, record: memoryview) -> EncodedReport | None:
    """A record handed over, given to the builder by its kind: a report's or the jobs' series to
    send, or None (a node's topology, the ledger: held for the series to come)."""
    if kind == REPORT:
        return builder.report(*read_report(record))
    if kind == JOBS:
        return builder.jobs(read_jobs(record))
    if kind == INFO:
        builder.info(*read_info(record))
    elif kind == LEDGER:
        builder.ledger(*read_ledger(record))
    return None


def _publish(counters: SharedCounters, writers: list[RemoteWriter]) -> None:
    # Each writer publishes its counts as they change; this adds its CPU, which changes always.
    for writer in writers:
        writer.publish()
    counters.set_cpu(time.process_time())


def _die_with(parent_pid: int) -> None:
    """SIGTERM when the collector dies, however it dies (Linux's parent-death signal). It does
    not stop the process at once: what the collector handed over before it died is still in the
    socket, and is built and given to the receivers first (``_serve`` ends at the socket's end)."""
    signal.signal(signal.SIGTERM, _stop_asked)
    # Ctrl-C reaches the whole process group: the collector's shutdown (end of file) ends this one.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    die_with_parent(signal.SIGTERM)  # not Linux: the socket's end of file still ends it
    if os.getppid() != parent_pid:
        sys.exit(0)  # the collector died before the signal was armed


_STOP = {"asked": False}


def _stop_asked(_signal: int, _frame: object) -> None:
    _STOP["asked"] = True


def _config(item: dict[str, object]) -> RemoteWriteConfig:
    values = {k: (Path(str(v)) if k in _PATH_FIELDS and v is not None else v) for k, v in item.items()}
    return RemoteWriteConfig(**values)  # type: ignore[arg-type]


if __name__ == "__main__":
    sys.exit(main())
