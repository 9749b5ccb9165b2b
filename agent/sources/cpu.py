"""CPU time, total and per core, with iowait (``<procfs>/stat``), and load (``loadavg``).

Data pre-processing runs on these cores: a busy total means the input pipeline is CPU
bound, one busy core with an idle total means a single-threaded loader.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from nodeagent.agent.sources.base import Source
from nodeagent.agent.sources.registry import register
from nodeagent.v1 import nodeagent_pb2 as pb

_CLK_TCK = float(os.sysconf("SC_CLK_TCK"))
_TIME_FIELDS = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# CpuTimes' fields, named once: setattr interns its name, and a name built on every call is
# interned and dropped again each time (see cpu_times).
_TIME_ATTRIBUTES = tuple(f"{name}_seconds_total" for name in _TIME_FIELDS)


@dataclass(frozen=True, slots=True)
class StatSnapshot:
    cpus: dict[str, tuple[int, ...]]  # "" for the total, "0", "1", ... per core; USER_HZ ticks
    context_switches: int | None
    procs_running: int | None
    procs_blocked: int | None


def parse_stat(text: str) -> StatSnapshot:
    cpus: dict[str, tuple[int, ...]] = {}
    scalars: dict[str, int] = {}
    for line in text.splitlines():
        fields = line.split()
        if not fields:
            continue
        key = fields[0]
        try:
            if key.startswith("cpu"):
                cpus[key[3:]] = tuple(map(int, fields[1:9]))
            elif key in ("ctxt", "procs_running", "procs_blocked") and len(fields) > 1:
                scalars[key] = int(fields[1])
        except ValueError:
            continue
    return StatSnapshot(cpus, scalars.get("ctxt"), scalars.get("procs_running"), scalars.get("procs_blocked"))


def parse_loadavg(text: str) -> tuple[float, float, float] | None:
    fields = text.split()
    try:
        return float(fields[0]), float(fields[1]), float(fields[2])
    except (IndexError, ValueError):
        return None


def cpu_times(cpu: str, ticks: tuple[int, ...]) -> pb.CpuTimes:
    times = pb.CpuTimes(cpu=cpu)
    for attribute, value in zip(_TIME_ATTRIBUTES, ticks, strict=False):
        setattr(times, attribute, value / _CLK_TCK)
    return times


@register
class CpuSource(Source):
    name = "cpu"
    help = "CPU time per core with iowait (stat), run queue and load (loadavg)"

    def scan(self, info: pb.NodeInfo) -> None:
        text = self.ctx.files.read_text(self.ctx.roots.proc("stat"))
        if text is not None:
            info.cpu_count = sum(1 for c in parse_stat(text).cpus if c)

    def collect(self, report: pb.NodeReport) -> None:
        files, roots = self.ctx.files, self.ctx.roots
        host = report.host
        text = files.read_text(roots.proc("stat"))
        if text is not None:
            stat = parse_stat(text)
            for cpu, ticks in stat.cpus.items():
                if cpu == "":
                    host.cpu_total.CopyFrom(cpu_times("", ticks))
                else:
                    host.cpus.append(cpu_times(cpu, ticks))
            if stat.context_switches is not None:
                host.context_switches_total = stat.context_switches
            if stat.procs_running is not None:
                host.procs_running = stat.procs_running
            if stat.procs_blocked is not None:
                host.procs_blocked = stat.procs_blocked
        load_text = files.read_text(roots.proc("loadavg"))
        load = parse_loadavg(load_text) if load_text is not None else None
        if load is not None:
            host.load1, host.load5, host.load15 = load
