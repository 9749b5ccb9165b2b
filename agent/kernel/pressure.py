"""The kernel's pressure stall information, parsed: the ``<procfs>/pressure/*`` files the
pressure source reads and a job cgroup's ``cpu.pressure``/``io.pressure`` alike."""

from __future__ import annotations

from nodeagent.v1 import nodeagent_pb2 as pb


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
