"""Pressure stall information (``<procfs>/pressure/{cpu,io,memory}``): the share of time
tasks waited on a resource. High I/O pressure with a busy disk is the storage signature."""

from __future__ import annotations

from nodeagent.agent.kernel.pressure import parse_pressure
from nodeagent.agent.sources.base import Source
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

_RESOURCES = (("cpu", "pressure_cpu"), ("io", "pressure_io"), ("memory", "pressure_memory"))


@register
class PressureSource(Source):
    name = "pressure"
    help = "Pressure stall information for cpu, io and memory (pressure/)"

    def collect(self, report: pb.NodeReport) -> None:
        for resource, field in _RESOURCES:
            text = self.ctx.files.read_text(self.ctx.roots.proc("pressure", resource))
            parsed = parse_pressure(text) if text is not None else None
            if parsed is not None:
                getattr(report.host, field).CopyFrom(parsed)
