"""One tick: run every enabled source and assemble the node's report.

Each source reports its own duration and success; one that raises loses only its own
section of the report (a health event says so) and the others run as usual.
"""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Mapping, Sequence

import structlog

from nodeagent import __version__
from nodeagent.agent.config import AgentConfig
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sampling.report_source import ReportSequence
from nodeagent.agent.sources import Roots, Source, SourceContext, available
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.sampler")


class Sampler:
    """The live ``ReportSource``: the node's sources, read each tick."""

    def __init__(
        self,
        sources: Sequence[str],
        *,
        node_id: str | None = None,
        roots: Roots | None = None,
        config: AgentConfig | None = None,
        sequence: ReportSequence | None = None,
        clock: Callable[[], float] = time.time,
        options: Mapping[str, str] | None = None,
    ) -> None:
        self.files = KernelFiles()
        self.ctx = SourceContext(
            roots=roots or Roots(), files=self.files, config=config or AgentConfig(), options=dict(options or {})
        )
        registry = available()
        self.sources: list[Source] = [registry[name](self.ctx) for name in sources]
        self.node_id = node_id or platform.node()
        self.sequence = sequence or ReportSequence()
        self.info = pb.NodeInfo()
        self._clock = clock
        self._last_scan: float | None = None
        self._info_sent = False

    def tick(self) -> pb.NodeReport:
        """Sample every source once; the report carries ``info`` when the topology changed."""
        now = self._clock()
        if self._rescan_due(now):
            self._scan(now)
        report = pb.NodeReport(node_id=self.node_id, time_unix_seconds=now)
        self.sequence.stamp(report)
        for source in self.sources:
            started = time.perf_counter()
            status = report.collectors.add(name=source.name, success=True)  # node_exporter's word, on the wire
            try:
                source.collect(report)
            except Exception as err:  # one bad source must not stop the others
                status.success = False
                status.error = _one_line(err)
                report.events.add(
                    time_unix_seconds=now, kind="collector_error", severity="warning",
                    subject=f"collector:{source.name}", message=status.error,
                )  # fmt: skip
                # The event's and the log's words are node_exporter's, as the flags are: kept as users see them.
                log.warning("collector failed", collector=source.name, error=status.error)
            status.duration_seconds = time.perf_counter() - started
        if not self._info_sent:
            report.info.CopyFrom(self.info)
            self._info_sent = True
        return report

    def close(self) -> None:
        for source in self.sources:
            try:
                source.close()
            except Exception as err:
                log.warning("collector close failed", collector=source.name, error=_one_line(err))
        self.files.close()

    def _rescan_due(self, now: float) -> bool:
        if self._last_scan is None or any(s.needs_rescan for s in self.sources):
            return True
        return now - self._last_scan >= self.ctx.config.rescan_seconds

    def _scan(self, now: float) -> None:
        # Fresh descriptors on every rescan: those of devices that went away are released
        # (on sysfs their reads fail with ENODEV anyway; on other trees they would go stale).
        self.files.close()
        info = pb.NodeInfo()
        info.CopyFrom(self.info)
        info.node_id = self.node_id
        info.hostname = platform.node()
        info.agent_version = __version__
        info.kernel_release = os.uname().release
        for source in self.sources:
            source.needs_rescan = False
            try:
                source.scan(info)
            except Exception as err:
                log.warning("collector scan failed", collector=source.name, error=_one_line(err))
        if info != self.info:
            self.info = info
            self._info_sent = False
        self._last_scan = now


def _one_line(err: BaseException) -> str:
    text = f"{type(err).__name__}: {err}"
    return text.splitlines()[0] if text else type(err).__name__
