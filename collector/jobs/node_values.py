"""What one node shows for one job at one of its window steps: the values the roll-up compares
across the job's nodes.

Only the job's GPUs on the node count (``JobSample.gpus``; all the node's GPUs when the sample
names none). From the node's detector: each GPU's own verdict (before any wait the roll-up set)
and what it did over the step as read (NVML utilization, or without GPM the lower of it and the
computing share from power; GPM SM activity, throttled share: ``NodeDetector.activity``); from
the step's report: SM clocks, PCIe link speeds, NVLink state and error counters, NIC and RDMA
error counters and link speeds, TCP segments sent and retransmitted; from every report
(``nic_peaks``): each NIC's peak rates and bytes over the window.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import NamedTuple

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.nic_peaks import NicPeaks, NicWindow
from nodeagent.core.detector.computing_source import REPORT_LEVEL, Estimate, unknown_words
from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.node_evidence import NodeEvidence
from nodeagent.core.detector.verdict import DATA_CAUSES, GpuVerdict, majority_cause, starved_causes
from nodeagent.core.quantities.units import pcie_bytes_per_second
from nodeagent.v1 import nodeagent_pb2 as pb

# A GPU the detector judges (not idle, lost or warming up).
_JUDGED = frozenset({"busy", "starved", "throttled"})
# The evidence that names the rate of the link or disk behind a network or storage cause.
_INGEST_KEYS = {
    "network": ("network_rx_bytes_per_second", "network_plateau_rx_bytes_per_second"),
    "storage": ("storage_read_bytes_per_second",),
}
# RDMA port counters that count link trouble (counters/ of the kernel): symbol errors and
# recoveries are a link retraining, each costing the port its traffic while it lasts.
_RDMA_ERRORS = ("symbol_error", "link_downed", "link_error_recovery", "port_rcv_errors", "local_link_integrity_errors")


@dataclass(slots=True)
class NodeMember:
    """What a node's stage keeps of one of its jobs between its steps."""

    job: str
    source: str
    gpus: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()
    ranks_count: int = 0
    world_size: int = 0
    node_rank: int | None = None
    # Cumulative link error counters at its last step (node_values turns them into per-step deltas).
    nvlink_errors_total: int | None = None
    nic_errors_total: int | None = None
    rdma_errors_total: int | None = None
    # TCP segments sent and retransmitted at its last step (the host's /proc/net/snmp).
    tcp_out_segments_total: int | None = None
    tcp_retransmitted_segments_total: int | None = None


@dataclass(frozen=True, slots=True)
class LinkValues:
    # NICs that moved traffic over the window: name -> link speed (bytes per second).
    nic_speeds: Mapping[str, float] = field(default_factory=dict)
    # The NIC that carries the collective (the most symmetric traffic) and its window peak.
    fabric_nic: str | None = None
    fabric_peak_bytes_per_second: float | None = None
    fabric_speed_bytes_per_second: float | None = None
    # The slowest current PCIe link among the job's GPUs, and that GPU's maximum.
    pcie_bytes_per_second: float | None = None
    pcie_max_bytes_per_second: float | None = None
    nvlink_inactive: int = 0
    # Errors since the node's previous step (None at its first).
    nvlink_errors: int | None = None
    nic_errors: int | None = None
    # RDMA link errors (symbol errors, link recoveries, downs, receive errors) since the previous step.
    rdma_errors: int | None = None
    # The NIC that carries the collective whatever its volume (the fabric NIC, else the NIC of
    # symmetric traffic that moved the most bytes: a collective in short bursts may never reach
    # the peak floor), and its time on the wire over the window: its bytes (the busier direction)
    # over its rating times the window's seconds; None without a rating.
    wire_nic: str | None = None
    fabric_busy_ratio: float | None = None
    # TCP segments retransmitted over those sent since the previous step, where enough were sent.
    tcp_retransmit_ratio: float | None = None


@dataclass(frozen=True, slots=True)
class NodeValues:
    gpus: int
    # The job's GPUs here that the detector judges, and those warming up.
    assigned: int
    warmup: int
    # Means over the judged GPUs: over the step as read (utilization, SM activity, throttled share,
    # data wait: what the roll-up compares step by step) ...
    busy_ratio: float | None
    sm_active_ratio: float | None
    throttled_ratio: float | None
    data_wait_ratio: float | None
    # ... and over the detector's window (its own verdicts: what the wait share counts).
    window_data_wait_ratio: float | None
    idle_ratio: float | None
    interconnect_ratio: float | None
    # The node's own bottleneck for these GPUs: throttled, a data cause, interconnect; None (busy).
    own_cause: str | None
    # The values that decided the node's own verdict, when its cause is own_cause.
    evidence: Mapping[str, float | str]
    # A data cause the node's latest window step points at, even before its verdict says starved.
    evidence_cause: str | None
    needed_bytes_per_second: float | None
    clock_mhz: float | None
    link: LinkValues
    # Raw GPM SM activity over the detector's window, the mean over the judged GPUs; None unless
    # every one of them has GPM (the job's wait share where the job is slowed: wait_share.py).
    window_sm_active_ratio: float | None = None
    # The computing share from power over the detector's window (GPUs without GPM:
    # core/detector/power_share.py), the mean over the judged GPUs; None unless power tells on
    # every one of them (the job's wait share and waiting gate where GPM is missing).
    window_computing_ratio: float | None = None
    # Where some judged GPU's computing-share source cannot tell computing from waiting at this
    # job's step length (core/detector/computing_source.py): the reason's code, and words for
    # the verdict's notes ("GPUs 0,1 read power as a 1-s mean; ...: wait share unknown"). Its
    # wait share is unknown then: the roll-up puts no other estimate in its place.
    wait_unknown_reason: str | None = None
    wait_unknown_words: str | None = None


def node_values(
    member: NodeMember, report: pb.NodeReport, detector: NodeDetector, peaks: NicPeaks | None, config: JobRollupConfig
) -> NodeValues:
    wanted = set(member.gpus)
    own = [g for g in detector.own_gpus if not wanted or g.index in wanted]
    judged = [g for g in own if g.state in _JUDGED]
    m = _gpu_means(detector, judged)
    own_cause = _own_cause(judged)
    verdict = detector.verdict
    evidence: Mapping[str, float | str] = verdict.evidence if verdict.cause == own_cause else {}
    e = detector.evidence
    evidence_cause = "network" if e.network else "storage" if e.storage else "cpu" if e.cpu else None
    needed = _needed(own_cause if own_cause in ("network", "storage") else evidence_cause, m.window_data_wait_ratio, e)
    if needed is None and verdict.cause == own_cause:
        needed = verdict.needed_ingest_bytes_per_second
    samples = [g for g in report.gpus if not wanted or g.index in wanted]
    link, clock = _links(member, report, samples, peaks, config)
    reason, words = _unknown(m.unknown) if m.unknown else (None, None)
    return NodeValues(
        gpus=len(own), assigned=len(judged), warmup=sum(1 for g in own if g.state == "warmup"),
        busy_ratio=m.busy_ratio, sm_active_ratio=m.sm_active_ratio, throttled_ratio=m.throttled_ratio,
        data_wait_ratio=m.data_wait_ratio, window_data_wait_ratio=m.window_data_wait_ratio, idle_ratio=m.idle_ratio,
        interconnect_ratio=m.interconnect_ratio, own_cause=own_cause, evidence=evidence,
        evidence_cause=evidence_cause, needed_bytes_per_second=needed, clock_mhz=clock, link=link,
        window_sm_active_ratio=m.window_sm_active_ratio, window_computing_ratio=m.window_computing_ratio,
        wait_unknown_reason=reason, wait_unknown_words=words,
    )  # fmt: skip


class _GpuMeans(NamedTuple):
    """The means over a node's judged GPUs that ``NodeValues`` carries (its fields of those names)."""

    busy_ratio: float | None
    sm_active_ratio: float | None
    throttled_ratio: float | None
    data_wait_ratio: float | None
    window_data_wait_ratio: float | None
    idle_ratio: float | None
    interconnect_ratio: float | None
    window_sm_active_ratio: float | None
    window_computing_ratio: float | None
    # The GPUs whose computing-share source cannot tell: (index, source, its estimate).
    unknown: list[tuple[int, str, Estimate]]


def _gpu_means(detector: NodeDetector, judged: list[GpuVerdict]) -> _GpuMeans:
    # One pass, sums in locals: this runs for every node of every job at every step.
    busy = throttled = step_data = sm = window_data = idle = sync = window_sm = computing = 0.0
    n_act = n_step_data = n_sm = n_window = n_idle = n_sync = n_window_sm = n_computing = 0
    unknown: list[tuple[int, str, Estimate]] = []
    for g in judged:
        w = detector.window_sm_active(g.index)
        blind = False
        if w is not None:
            window_sm += w
            n_window_sm += 1
        elif (estimate := detector.window_estimate(g.index)) is not None:
            source, told = estimate
            blind = source in REPORT_LEVEL or told.unknown is not None
            if told.computing_ratio is not None:
                computing += told.computing_ratio
                n_computing += 1
            elif told.unknown is not None:
                unknown.append((g.index, source, told))
        a = detector.activity(g.index)
        if a is not None:
            # Without GPM, power read between reports where it tells (not report draws: docs/jobs.md).
            share = a.computing_ratio if a.sm_active_ratio is None and not blind else None
            busy += a.utilization_ratio if share is None else min(a.utilization_ratio, share)
            throttled += a.throttled_ratio
            n_act += 1
            if a.data_wait_ratio is not None:
                step_data += a.data_wait_ratio
                n_step_data += 1
            if a.sm_active_ratio is not None:
                sm += a.sm_active_ratio
                n_sm += 1
        if g.starvation_ratio is not None:
            window_data += g.starvation_ratio
            n_window += 1
        if g.idle_ratio is not None:
            idle += g.idle_ratio
            n_idle += 1
        if g.interconnect_ratio is not None:
            sync += g.interconnect_ratio
            n_sync += 1
    return _GpuMeans(
        busy / n_act if n_act else None,
        # GPM counts where at least half the judged GPUs have it.
        sm / n_sm if n_sm and n_sm * 2 >= len(judged) else None,
        throttled / n_act if n_act else None,
        step_data / n_step_data if n_step_data else None,
        window_data / n_window if n_window else None,
        idle / n_idle if n_idle else None,
        sync / n_sync if n_sync else None,
        window_sm / n_window_sm if n_window_sm and n_window_sm == len(judged) else None,
        computing / n_computing if n_computing and n_computing == len(judged) else None,
        unknown,
    )


def _unknown(gpus: list[tuple[int, str, Estimate]]) -> tuple[str, str]:
    """The first GPU's reason code, and the words of each group of GPUs alike ("GPUs 0,1 read ...")."""
    groups: dict[str, list[int]] = {}
    for index, source, e in gpus:
        groups.setdefault(unknown_words(source, e), []).append(index)
    said = [
        f"{'GPU' if len(ids) == 1 else 'GPUs'} {','.join(str(i) for i in sorted(ids))} {words}"
        for words, ids in groups.items()
    ]
    return str(gpus[0][2].unknown), "; ".join(said)


def _needed(cause: str | None, data_wait: float | None, e: NodeEvidence) -> float | None:
    """The rate the link or volume that decided the cause would need to keep the GPUs busy: what
    it carries over the share of time not spent waiting for data (NodeDetector's rule, for the
    one link or disk the evidence names rather than the node's total)."""
    if cause not in _INGEST_KEYS or data_wait is None or data_wait >= 1.0:
        return None
    observed = next((v for k in _INGEST_KEYS[cause] if isinstance(v := e.values.get(k), int | float)), None)
    if observed is None:
        observed = e.network_rx_bytes_per_second if cause == "network" else e.disk_read_bytes_per_second
    return None if observed is None else observed / (1.0 - data_wait)


def _own_cause(judged: list[GpuVerdict]) -> str | None:
    if not judged:
        return None
    if sum(1 for g in judged if g.state == "throttled") * 2 > len(judged):
        return "throttled"
    votes = starved_causes(tuple(judged))
    if sum(votes.values()) * 2 >= len(judged):
        return majority_cause(votes)
    return None


def _links(
    member: NodeMember, report: pb.NodeReport, samples: list[pb.GpuSample], peaks: NicPeaks | None,
    config: JobRollupConfig,
) -> tuple[LinkValues, float | None]:  # fmt: skip
    """The node's link values, and the mean SM clock of the job's GPUs (one pass over them)."""
    slowest, slowest_rate, inactive, nvlink_errors, clock = _gpu_links(samples)
    nic_errors, speeds = _nic_errors_and_speeds(report, peaks)
    rdma_errors = 0
    for port in report.rdma_ports:
        counters = port.counters
        if counters:
            rdma_errors += sum(counters.get(name, 0) for name in _RDMA_ERRORS)
    window = peaks.window() if peaks is not None else {}
    moving, fabric, wire = _fabric_and_wire(window, config)
    wire_speed = speeds.get(wire) if wire is not None else None
    before_nvlink, before_nic, before_rdma = (
        member.nvlink_errors_total,
        member.nic_errors_total,
        member.rdma_errors_total,
    )
    member.nvlink_errors_total, member.nic_errors_total = nvlink_errors, nic_errors
    member.rdma_errors_total = rdma_errors if report.rdma_ports else None
    fabric_speed = speeds.get(fabric) if fabric is not None else None
    links = LinkValues(
        nic_speeds={name: speeds[name] for name in moving if name in speeds},
        fabric_nic=fabric,
        fabric_peak_bytes_per_second=moving[fabric].peak_bytes_per_second if fabric is not None else None,
        fabric_speed_bytes_per_second=fabric_speed,
        pcie_bytes_per_second=None if slowest is None else slowest_rate,
        pcie_max_bytes_per_second=None
        if slowest is None
        else _pcie(slowest.pcie_max_link_generation, slowest.pcie_max_link_width),
        nvlink_inactive=inactive,
        nvlink_errors=_increase(before_nvlink, nvlink_errors),
        nic_errors=_increase(before_nic, nic_errors),
        rdma_errors=_increase(before_rdma, rdma_errors) if report.rdma_ports else None,
        wire_nic=wire,
        fabric_busy_ratio=window[wire].busy_ratio(wire_speed) if wire is not None and wire_speed else None,
        tcp_retransmit_ratio=_retransmits(member, report.host, config),
    )
    return links, clock


def _gpu_links(samples: list[pb.GpuSample]) -> tuple[pb.GpuSample | None, float, int, int, float | None]:
    """Over the job's GPUs: the one on the slowest current PCIe link and that link's rate, the
    inactive NVLinks, the NVLink error counters summed, and the mean SM clock."""
    slowest: pb.GpuSample | None = None
    slowest_rate = math.inf
    inactive = nvlink_errors = clocks = 0
    clock_sum = 0.0
    for g in samples:
        if g.HasField("sm_clock_mhz"):
            clock_sum += g.sm_clock_mhz
            clocks += 1
        # Unset, a generation or width reads 0: no rate.
        rate = _pcie(g.pcie_link_generation, g.pcie_link_width)
        if rate is not None and rate < slowest_rate:
            slowest, slowest_rate = g, rate
        for link in g.nvlinks:
            if not link.active and link.HasField("active"):
                inactive += 1
            nvlink_errors += (
                link.replay_errors_total + link.recovery_errors_total + link.crc_flit_errors_total
                + link.crc_data_errors_total
            )  # fmt: skip
    return slowest, slowest_rate, inactive, nvlink_errors, clock_sum / clocks if clocks else None


def _nic_errors_and_speeds(report: pb.NodeReport, peaks: NicPeaks | None) -> tuple[int, dict[str, float]]:
    """The NICs' error and carrier-change counters summed (loopback aside), and each NIC's link
    speed: as reported, else as its peaks last knew it."""
    nic_errors = 0
    speeds: dict[str, float] = {}
    for nic in report.nics:
        if nic.name == "lo":
            continue
        nic_errors += nic.rx_errors_total + nic.tx_errors_total + nic.carrier_changes_total
        if nic.HasField("speed_bytes_per_second") and nic.speed_bytes_per_second > 0:
            speeds[nic.name] = nic.speed_bytes_per_second
    if peaks is not None:
        for name, speed in peaks.speeds.items():
            speeds.setdefault(name, speed)
    return nic_errors, speeds


def _fabric_and_wire(
    window: Mapping[str, NicWindow], config: JobRollupConfig
) -> tuple[dict[str, NicWindow], str | None, str | None]:
    """The NICs that moved traffic over the window (their peak at the floor or above), the fabric
    NIC among them (the most symmetric traffic, the highest peak), and the wire NIC (the fabric
    NIC, else the symmetric one that moved the most bytes)."""
    floor = config.link_peak_floor_bytes_per_second
    moving = {name: w for name, w in window.items() if w.peak_bytes_per_second >= floor}
    fabric = max(
        (name for name, w in moving.items() if w.symmetry() >= config.fabric_symmetry_ratio),
        key=lambda name: moving[name].peak_bytes_per_second,
        default=None,
    )
    wire = fabric or max(
        (name for name, w in window.items() if w.symmetry() >= config.fabric_symmetry_ratio),
        key=lambda name: max(window[name].rx_bytes, window[name].tx_bytes),
        default=None,
    )
    return moving, fabric, wire


def _retransmits(member: NodeMember, host: pb.HostSample, config: JobRollupConfig) -> float | None:
    """Segments retransmitted over segments sent since the node's previous step; None at its
    first, after a reset, or where fewer than ``link_retransmit_min_segments`` were sent."""
    if not (host.HasField("tcp_out_segments_total") and host.HasField("tcp_retransmitted_segments_total")):
        member.tcp_out_segments_total = member.tcp_retransmitted_segments_total = None
        return None
    out, again = host.tcp_out_segments_total, host.tcp_retransmitted_segments_total
    sent, resent = (
        _increase(member.tcp_out_segments_total, out),
        _increase(member.tcp_retransmitted_segments_total, again),
    )
    member.tcp_out_segments_total, member.tcp_retransmitted_segments_total = out, again
    if sent is None or resent is None or sent < config.link_retransmit_min_segments:
        return None
    return min(1.0, resent / sent)


@functools.cache
def _pcie(generation: int, width: int) -> float | None:
    return pcie_bytes_per_second(generation, width) if generation and width else None


def _increase(before: int | None, now: int) -> int | None:
    if before is None or now < before:
        return None  # the first step, or counters reset: nothing to say this step
    return now - before


def is_data_cause(cause: str | None) -> bool:
    return cause in DATA_CAUSES and cause != "unknown"
