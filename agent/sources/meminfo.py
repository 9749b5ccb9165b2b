"""Memory and page cache (``<procfs>/meminfo``): the page cache hides disk reads, so the
detector needs to know how much of the dataset it can hold."""

from __future__ import annotations

from nodeagent.agent.sources.base import Source
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

_FIELDS = {
    "MemTotal": "memory_total_bytes",
    "MemFree": "memory_free_bytes",
    "MemAvailable": "memory_available_bytes",
    "Buffers": "memory_buffers_bytes",
    "Cached": "memory_cached_bytes",
    "Dirty": "memory_dirty_bytes",
    "Writeback": "memory_writeback_bytes",
}


def parse_meminfo(text: str) -> dict[str, int]:
    """``Name:   value kB`` -> bytes (lines without a unit are counts, kept as is)."""
    values: dict[str, int] = {}
    for line in text.splitlines():
        name, sep, rest = line.partition(":")
        fields = rest.split()
        if not sep or not fields:
            continue
        try:
            value = int(fields[0])
        except ValueError:
            continue
        values[name.strip()] = value * 1024 if len(fields) > 1 and fields[1] == "kB" else value
    return values


@register
class MeminfoSource(Source):
    name = "meminfo"
    help = "Memory, page cache, dirty and writeback bytes (meminfo)"

    def scan(self, info: pb.NodeInfo) -> None:
        text = self.ctx.files.read_text(self.ctx.roots.proc("meminfo"))
        if text is not None:
            info.memory_total_bytes = parse_meminfo(text).get("MemTotal", 0)

    def collect(self, report: pb.NodeReport) -> None:
        text = self.ctx.files.read_text(self.ctx.roots.proc("meminfo"))
        if text is None:
            return
        values = parse_meminfo(text)
        for name, field in _FIELDS.items():
            if name in values:
                setattr(report.host, field, values[name])
