"""A degraded link of one node, against the job's other nodes: NIC, PCIe or NVLink speed down,
link error counters rising, its time on the wire or its retransmits far above the others', or
(counters only) the fabric NIC's peak rate far below the others'.

Each finding compares the node with the others (their median), never with a fixed value:

- ``nic_speed``: a NIC that moved traffic over the window runs below ``link_speed_ratio`` of the
  speed the other nodes' NIC of that name runs at;
- ``pcie``: the slowest current PCIe link of the job's GPUs below ``link_speed_ratio`` of the
  others' and below its own maximum (a link trained down);
- ``nvlink_down``: NVLinks inactive where the others' median has none;
- ``nvlink_errors``, ``nic_errors``: error counters (NVLink replay, recovery, CRC; NIC errors and
  carrier changes, RDMA symbol and link errors) rose this step where the others' median did not;
- ``fabric_peak``: the NIC that carries the collective (symmetric traffic) peaked below
  ``link_peak_ratio`` of the others' median peak, while theirs are above the floor and not
  saturated (under ``link_saturated_ratio`` of their speed): the others could have sent faster;
- ``fabric_busy``: the time on the wire of the NIC that carries the collective (``wire_nic``: the
  fabric NIC, else the busiest NIC of symmetric traffic), its bytes over its rating over the
  window (``NicWindow.busy_ratio``), at least ``link_busy_factor`` x the others' median and above it by
  ``link_busy_excess_ratio``. The members of a synchronous job move the same bytes per step, so
  the node whose link spends a far larger share of its rating carrying them is the slow one,
  whether its transfers saturate the link or come in short bursts well under its rating;
- ``retransmits``: TCP segments retransmitted over sent since the previous step at least
  ``link_retransmit_ratio`` and ``link_retransmit_factor`` x the others' median (of a lossy
  link's two ends, the busier link's: ``_retransmits``);
- ``rdma_errors``: RDMA link errors (symbol errors, link recoveries and downs, receive errors)
  rose this step where the others' median did not.

The last three show their own cost (time on the wire, segments sent again, a link retraining):
they set a node apart whether or not the job's GPUs are seen waiting (``LinkFinding.costly``),
where the others count only while they are (a slower NIC the job never fills costs nothing).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Final

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.node_values import LinkValues, NodeValues
from nodeagent.collector.jobs.robust import medians_of_others

# The findings that show their own cost: they count whether or not the job's GPUs are seen waiting.
COSTLY: Final = frozenset({"fabric_busy", "retransmits", "rdma_errors"})


@dataclass(frozen=True, slots=True)
class LinkFinding:
    # nic_speed, pcie, nvlink_down, nvlink_errors, nic_errors, fabric_peak, fabric_busy,
    # retransmits, rdma_errors
    kind: str
    # What it is about: "nic:eth1", "pcie", "nvlink", "nics", "tcp", "rdma".
    subject: str
    value: float
    job_median: float

    @property
    def costly(self) -> bool:
        return self.kind in COSTLY


def link_findings(values: Mapping[str, NodeValues], config: JobRollupConfig) -> dict[str, list[LinkFinding]]:
    """Per node, what sets its links apart from the other nodes' (only nodes with a finding)."""
    out: dict[str, list[LinkFinding]] = defaultdict(list)
    links = {node: v.link for node, v in values.items()}
    if len(links) < 2:
        return {}
    ratio = config.link_speed_ratio
    _nic_speeds(links, config, out)
    for node, value, median in _compare(links, config, lambda lv: lv.pcie_bytes_per_second):
        top = links[node].pcie_max_bytes_per_second
        if value < ratio * median and (top is None or value < top):
            out[node].append(LinkFinding("pcie", "pcie", value, median))
    for kind, subject, get in (
        ("nvlink_down", "nvlink", lambda lv: float(lv.nvlink_inactive)),
        ("nvlink_errors", "nvlink", lambda lv: None if lv.nvlink_errors is None else float(lv.nvlink_errors)),
        ("nic_errors", "nics", lambda lv: None if lv.nic_errors is None else float(lv.nic_errors)),
        ("rdma_errors", "rdma", lambda lv: None if lv.rdma_errors is None else float(lv.rdma_errors)),
    ):
        for node, value, median in _compare(links, config, get):
            if value > 0 and median == 0:
                out[node].append(LinkFinding(kind, subject, value, median))
    _fabric_peaks(links, config, out)
    for node, value, median in _compare(links, config, lambda lv: lv.fabric_busy_ratio):
        if value >= config.link_busy_factor * median and value - median >= config.link_busy_excess_ratio:
            out[node].append(LinkFinding("fabric_busy", f"nic:{links[node].wire_nic or '?'}", value, median))
    _retransmits(links, config, out)
    return dict(out)


def _retransmits(links: Mapping[str, LinkValues], config: JobRollupConfig, out: dict[str, list[LinkFinding]]) -> None:
    """A lossy link makes both its ends resend: the node behind it, and the node sending into it
    (in a ring, its predecessor). Where several nodes retransmit, the one whose link spends a far
    larger share of its rating on the job's bytes (``link_busy_factor`` x every other
    retransmitter's) is the degraded link, alone; else each is."""
    found = [
        (node, value, median)
        for node, value, median in _compare(links, config, lambda lv: lv.tcp_retransmit_ratio)
        if value >= config.link_retransmit_ratio and value >= config.link_retransmit_factor * median
    ]
    if len(found) > 1:
        busy = {node: links[node].fabric_busy_ratio for node, _, _ in found}
        ranked = sorted(found, key=lambda f: busy[f[0]] or 0.0, reverse=True)
        top, rest = busy[ranked[0][0]], [busy[f[0]] for f in ranked[1:]]
        if top is not None and all(b is not None and top >= config.link_busy_factor * b for b in rest):
            found = ranked[:1]
    for node, value, median in found:
        out[node].append(LinkFinding("retransmits", "tcp", value, median))


def _nic_speeds(links: Mapping[str, LinkValues], config: JobRollupConfig, out: dict[str, list[LinkFinding]]) -> None:
    names = {name for lv in links.values() for name in lv.nic_speeds}
    for name in sorted(names):
        for node, value, median in _compare(links, config, partial(_nic_speed, name=name)):
            if value < config.link_speed_ratio * median:
                out[node].append(LinkFinding("nic_speed", f"nic:{name}", value, median))


def _nic_speed(lv: LinkValues, name: str) -> float | None:
    return lv.nic_speeds.get(name)


def _fabric_peaks(links: Mapping[str, LinkValues], config: JobRollupConfig, out: dict[str, list[LinkFinding]]) -> None:
    with_peak = {node: lv for node, lv in links.items() if lv.fabric_peak_bytes_per_second is not None}
    if len(with_peak) < 2:
        return
    nodes = list(with_peak)
    peaks = [with_peak[n].fabric_peak_bytes_per_second or 0.0 for n in nodes]
    # The others' share of their speed, where known: saturated links say the job is link-bound.
    shares = [
        (lv.fabric_peak_bytes_per_second or 0.0) / lv.fabric_speed_bytes_per_second
        if lv.fabric_speed_bytes_per_second
        else 0.0
        for lv in with_peak.values()
    ]
    median_peaks = medians_of_others(peaks, config.exact_nodes)
    median_shares = medians_of_others(shares, config.exact_nodes)
    for node, peak, median, share in zip(nodes, peaks, median_peaks, median_shares, strict=True):
        if (
            median >= config.link_peak_floor_bytes_per_second
            and share < config.link_saturated_ratio
            and peak < config.link_peak_ratio * median
        ):
            nic = with_peak[node].fabric_nic or "?"
            out[node].append(LinkFinding("fabric_peak", f"nic:{nic}", peak, median))


def _compare(
    links: Mapping[str, LinkValues], config: JobRollupConfig, get: Callable[[LinkValues], float | None]
) -> list[tuple[str, float, float]]:
    """(node, its value, the others' median) for the nodes with a value, when at least two have one."""
    known = [(node, v) for node, lv in links.items() if (v := get(lv)) is not None]
    if len(known) < 2:
        return []
    medians = medians_of_others([v for _, v in known], config.exact_nodes)
    return [(node, v, m) for (node, v), m in zip(known, medians, strict=True)]
