"""Pressure stall information (``<procfs>/pressure/{cpu,io,memory}``): the share of time
tasks waited on a resource. High I/O pressure with a busy disk is the storage signature."""

from __future__ import annotations

from nodeagent.agent.sources.base import Source
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

_RESOURCES = (("cpu", "pressure_cpu"), ("io", "pressure_io"), ("memory", "pressure_memory"))


def parse_pressure(text: str) -> pb.Pressure | None:
    """``some avg10=0.18 avg60=0.34 avg300=0.10 total=159886802`` (+ a ``full`` line).

    Averages are percentages in the file and ratios here; totals are microseconds.
    None when the ``some`` line is missing or malformed."""
    pressure = pb.Pressure()
    found_some = False
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        if kind not in ("some", "full"):
            continue
        try:
            pairs = dict(item.split("=", 1) for item in rest.split())
            avg10, avg60 = float(pairs["avg10"]) / 100, float(pairs["avg60"]) / 100
            avg300, total = float(pairs["avg300"]) / 100, int(pairs["total"])
        except (KeyError, ValueError):
            continue
        if kind == "some":
            found_some = True
            pressure.some_avg10_ratio, pressure.some_avg60_ratio = avg10, avg60
            pressure.some_avg300_ratio, pressure.some_total_microseconds = avg300, total
        else:
            pressure.full_avg10_ratio, pressure.full_avg60_ratio = avg10, avg60
            pressure.full_avg300_ratio, pressure.full_total_microseconds = avg300, total
    return pressure if found_some else None


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
