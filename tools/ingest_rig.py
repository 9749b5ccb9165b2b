"""The collector's ingest path in one process, without gRPC, stage by stage.

A real ``Ingest`` on a SQLite file holds ``nodes`` simulated 8-GPU nodes (the reports
``nodeagent-collector loadgen`` sends: a pool of simulator ticks, each node's id, epoch, seq and
time merged in), fed one report per node per simulated second, with a flush every
``flush_every`` reports. Each report takes the path ``collector/ingest/streams.py`` gives it:
parse, serialize, validate (``core/wire/proof.py``'s ``check_report``, on those bytes), then
``Ingest.accept``, whose inner stages (``INNER``) are wrapped to be metered. The flusher's
monotonic clock follows the simulated one.

A ``Meter`` is told where each stage begins and ends (stages nest: accept holds the inner ones);
``bench/ingest_profile.py`` times them, the cost gate (``tests/costs/``) counts their Python calls
and allocations. The trace is the same on every run (the simulator's seed is fixed).
"""

from __future__ import annotations

import time
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.history.node_history import NodeHistory
from nodeagent.collector.ingest import flush as flush_module
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.ingest.node_timeline import NodeTimeline
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.wire.framing import frame_report
from nodeagent.core.wire.proof import check_report
from nodeagent.tools.loadgen import _report_pool
from nodeagent.tools.simulator.simulation import DEFAULT_START_TIME
from nodeagent.v1 import nodeagent_pb2 as pb

# Stage name -> (class, method) metered. Each is called from inside accept().
INNER: dict[str, tuple[type, str]] = {
    "alert rules": (Alerting, "observe"),
    "detector": (NodeDetector, "observe"),
    "job roll-up": (JobRollup, "observe"),
    "job signals": (JobRollup, "signals"),
    "verdict signals": (NodeDetector, "signals"),
    "timeline": (NodeTimeline, "record"),
    "history": (NodeHistory, "observe"),
}
ACCEPT = "accept (own)"  # accept() less the inner stages: dedup, the node's row
ORDER = ("parse", "validate", "serialize", *INNER, ACCEPT, "flush")


class Meter(Protocol):
    """Told where each stage begins and ends; a stage begun inside another ends first."""

    def begin(self, stage: str) -> None: ...

    def end(self) -> None: ...


class IngestRig:
    """``Ingest`` with ``nodes`` attached; ``run`` feeds it simulated seconds of reports."""

    def __init__(
        self,
        db: Path,
        nodes: int,
        *,
        flush_every: int = 50,
        scenario: str = "healthy",
        history: bool = True,
        pool: tuple[pb.NodeInfo, list[bytes]] | None = None,
    ) -> None:
        self.info, self.pool = pool or _report_pool(scenario)
        self.flush_every = flush_every
        self.clock = DEFAULT_START_TIME
        self.meter: Meter | None = None
        # Wrapped before Ingest is built: its pipeline keeps the bound methods it was given.
        self._undo = [_wrap(self, name, *where) for name, where in INNER.items()]
        self.writer = StoreWriter(db)
        self.ingest = build_ingest(
            self.writer, Alerting(AlertConfig(), []), clock=lambda: self.clock, max_nodes=nodes,
            history=HistoryConfig(enabled=history),
        )  # fmt: skip
        self.streams: list[StreamHandle] = []
        for n in range(nodes):
            node_id = f"sim-{n:06d}"
            stream = StreamHandle(node_id, "bench")
            hello = pb.NodeInfo()
            hello.CopyFrom(self.info)
            hello.node_id = hello.hostname = node_id
            self.ingest.attach(stream, hello)
            self.streams.append(stream)
        self._second = 0
        self._since_flush = 0

    async def run(self, seconds: int, meter: Meter | None = None) -> int:
        """Feed ``seconds`` more simulated seconds, one report per node each; every stage is told
        to ``meter`` (none: unmetered, as a warm-up). Returns the reports fed."""
        reports = 0
        with self._metered(meter):
            for _ in range(seconds):
                self._second += 1
                seq = self._second
                for n, stream in enumerate(self.streams):
                    # The nodes spread over the second.
                    self.clock = DEFAULT_START_TIME + self._second - 1 + n / len(self.streams)
                    suffix = pb.NodeReport(node_id=stream.node_id, epoch=1, seq=seq, time_unix_seconds=self.clock)
                    raw = frame_report(self.pool[(seq + n) % len(self.pool)] + suffix.SerializeToString())
                    await self._feed(stream, raw, meter)
                    reports += 1
        return reports

    async def close(self) -> None:
        for restore in self._undo:
            restore()
        await self.ingest.flusher.flush(final=True)
        self.writer.call_sync(self.ingest.alerting.close)
        self.writer.close()

    async def _feed(self, stream: StreamHandle, raw: bytes, meter: Meter | None) -> None:
        begin, end = (meter.begin, meter.end) if meter is not None else (_nothing, _nothing_yet)
        begin("parse")
        message = pb.AgentMessage.FromString(raw)
        message.DiscardUnknownFields()
        report = message.report
        end()
        begin("serialize")
        serialized = report.SerializeToString()
        end()
        begin("validate")
        check_report(report, stream.node_id, serialized)
        end()
        begin(ACCEPT)
        self.ingest.accept(stream, report, serialized)
        end()
        self._since_flush += 1
        if self._since_flush >= self.flush_every:
            self._since_flush = 0
            begin("flush")
            await self.ingest.flusher.flush()
            end()

    @contextmanager
    def _metered(self, meter: Meter | None) -> Iterator[None]:
        """The inner stages told to ``meter`` and the flusher on the simulated clock, while it runs."""
        self.meter = meter
        flush_module.time = types.SimpleNamespace(monotonic=lambda: self.clock, perf_counter=time.perf_counter)  # type: ignore[attr-defined,assignment]
        try:
            yield
        finally:
            self.meter = None
            flush_module.time = time  # type: ignore[attr-defined]


def _nothing(stage: str) -> None:
    pass


def _nothing_yet() -> None:
    pass


def _wrap(rig: IngestRig, name: str, owner: type, method: str) -> Callable[[], None]:
    """Wrap ``owner.method`` to tell the rig's meter, while it has one, when it begins and ends;
    returns what undoes it."""
    original = getattr(owner, method)

    def metered(*args: Any, **kwargs: Any) -> Any:
        meter = rig.meter
        if meter is None:
            return original(*args, **kwargs)
        meter.begin(name)
        try:
            return original(*args, **kwargs)
        finally:
            meter.end()

    setattr(owner, method, metered)
    return lambda: setattr(owner, method, original)
