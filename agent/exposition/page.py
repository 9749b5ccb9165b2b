"""The agent's own ``/metrics`` (``nodeagent run --metrics-listen``), for sites that scrape nodes.

Off the sampling path: the loop only publishes each finished report (one reference assignment);
a scrape reads that report, the spool's counters and the sender's state. The page is written
on the first scrape after a tick and served as it is until the next one. Four groups of
families, each of which can be turned off:

- ``gpu``: dcgm-exporter's families and labels (core/exposition/dcgm.py), MIG instances among
  them, and nodeagent's GPU health (fabric, Xid counts, suspect readings:
  core/exposition/gpu_health.py) and per-process shares (core/exposition/gpu_shares.py);
- ``xid_count`` (off unless asked): dcgm-exporter's opt-in ``DCGM_EXP_XID_ERRORS_COUNT``, Xids
  per GPU and number over its default 5-minute window;
- ``nvlink``: nodeagent's per-link NVLink bytes, errors and state, with the same labels and
  ``link`` (dcgm-exporter gives none by default; 18 links x 8 GPUs is most of the page);
- ``node``: node_exporter's network, InfiniBand, disk, pressure, CPU, stat, load and memory
  families (core/exposition/node.py);
- ``agent``: nodeagent's own: its health (reports produced, spool, acknowledgement lag, the
  sender's stream, every source's duration and success in the last tick), the highways as a
  share of link speed, and the latest sample's key values under ``nodeagent_agent_*``.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final

from nodeagent import __version__
from nodeagent.agent.delivery.sender import Sender
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.pod_resources import PodResources
from nodeagent.agent.exposition.process import ProcessFamilies
from nodeagent.agent.exposition.telemetry import AgentTelemetry
from nodeagent.core.exposition.dcgm import dcgm_families, nvlink_families
from nodeagent.core.exposition.gpu_health import (
    computing_source_family,
    gpu_answer_families,
    gpu_health_families,
    xid_count_family,
)
from nodeagent.core.exposition.gpu_shares import gpu_share_families
from nodeagent.core.exposition.http_reply import gzip_bytes
from nodeagent.core.exposition.node import node_families
from nodeagent.core.exposition.text import TextFamily, label, label_text, render, sample_line
from nodeagent.core.quantities import rates
from nodeagent.v1 import nodeagent_pb2 as pb

FAMILY_GROUPS: Final = ("gpu", "nvlink", "node", "agent", "xid_count")

# /healthz fails when no tick has completed for this many intervals (and at least this long).
STALE_INTERVALS: Final = 3
STALE_MIN_SECONDS: Final = 10.0


def _scalar(name: str, kind: str, doc: str, value: float) -> TextFamily:
    family = TextFamily(name, kind, doc)
    family.lines.append(sample_line(name, "", value))
    return family


class AgentMetrics:
    """nodeagent's own families: the agent's health and delivery, and the latest tick's key values."""

    def __init__(self, telemetry: AgentTelemetry, spool: Spool, sender: Sender, targets: tuple[str, ...]) -> None:
        self.telemetry = telemetry
        self.spool = spool
        self.sender = sender
        self.targets = targets
        # Lines and label texts that stay the same for the process, written once.
        build = label_text({"version": __version__, "component": "agent", "node": telemetry.node_id})
        self._build_line = sample_line("nodeagent_build_info", build, 1)
        self._target_labels = [(target, label("target", target)) for target in targets]

    def families(self) -> Iterator[TextFamily]:
        telemetry, stats = self.telemetry, self.spool.stats()
        info = TextFamily("nodeagent_build_info", "gauge", "The running nodeagent.")
        info.lines.append(self._build_line)
        yield info
        yield _scalar("nodeagent_agent_reports_total", "counter", "Reports produced since the agent started.",
                      telemetry.produced_total)  # fmt: skip
        yield _scalar("nodeagent_agent_spool_reports", "gauge", "Reports waiting for an ack.", stats.reports)
        yield _scalar("nodeagent_agent_spool_bytes", "gauge", "Bytes of unacknowledged reports.", stats.bytes)
        yield _scalar(
            "nodeagent_agent_spool_dropped_reports_total", "counter",
            "Reports lost (spool full, too old, damaged), this epoch.", stats.dropped_total,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_spool_dropped_unresolved_reports", "gauge",
            "Reports dropped after they may have been sent, counted as dropped once the collector says it lacks them.",
            stats.dropped_unresolved,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_spool_disk_failures_total", "counter",
            "Times the spool directory failed (full disk, I/O error) and the spool went on in memory only.",
            stats.disk_failures_total,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_spool_on_disk", "gauge", "1 while the spool writes to its directory, 0 in memory only.",
            1 if stats.on_disk else 0,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_spool_disk_bytes", "gauge",
            "What the spool directory takes on disk (within --spool-max-bytes).", stats.disk_bytes,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_ack_lag_reports", "gauge",
            "Reports produced after the last one the collector acknowledged.", max(0, stats.last_seq - stats.acked_seq),
        )  # fmt: skip
        connected = TextFamily(
            "nodeagent_agent_sender_connected", "gauge", "1 for the collector the agent streams to now."
        )
        current = self.sender.connected_to
        for target, labels in self._target_labels:
            connected.lines.append(f"{connected.name}{{{labels}}} {1 if target == current else 0}\n")
        yield connected
        yield _scalar(
            "nodeagent_agent_sender_reconnects_total", "counter",
            "Streams to a collector that ended (the sender connects again).", self.sender.reconnects_total,
        )  # fmt: skip
        yield _scalar(
            "nodeagent_agent_reports_resent_total", "counter",
            "Reports sent again to another collector after the stream that sent them ended unacknowledged "
            "(at most what is stored twice across shards).", self.sender.reports_resent_total,
        )  # fmt: skip
        report = telemetry.latest
        if report is not None:
            yield _scalar(
                "nodeagent_agent_last_report_timestamp_seconds", "gauge", "Time of the latest report (Unix time).",
                report.time_unix_seconds,
            )  # fmt: skip
            yield from _source_families(report)
            yield from _sample(report)
            yield from _highways(telemetry.previous, report, telemetry.info)


class AgentExposition:
    def __init__(
        self, metrics: AgentMetrics, groups: Iterable[str] = FAMILY_GROUPS, pods: PodResources | None = None
    ) -> None:
        self.telemetry = metrics.telemetry
        self.pods = pods  # the kubelet's pod, namespace and container of each GPU, when it has them
        self.groups = frozenset(groups)
        unknown = self.groups - set(FAMILY_GROUPS)
        if unknown:
            raise ValueError(f"unknown metric family group {sorted(unknown)[0]!r} (known: {', '.join(FAMILY_GROUPS)})")
        self.metrics = metrics
        # Every family is written as text straight from the report and the agent's state;
        # process_* (CPU, memory, descriptors) from the agent's /proc entries.
        self.process = ProcessFamilies() if "agent" in self.groups else None

        self._page: tuple[int, bytes] = (-1, b"")
        self._gzipped: tuple[int, bytes] = (-1, b"")
        self._lock = threading.Lock()  # scrapes run on threads of their own: one writes, the others wait

    def render(self) -> bytes:
        """The page of the latest tick: written on the first scrape after a tick, then served as it
        is (every value on it comes from that tick), so scrapers beyond the first pay nothing."""
        with self._lock:
            return self._current()

    def render_gzip(self) -> bytes:
        """``render()`` gzipped as the HTTP server would, kept for the tick as well."""
        with self._lock:
            page = self._current()
            tick, packed = self._gzipped
            if tick != self._page[0] or tick <= 0:
                packed = gzip_bytes(page)
                self._gzipped = (self._page[0], packed)
            return packed

    def _current(self) -> bytes:
        tick = self.telemetry.produced_total
        cached_tick, page = self._page
        if cached_tick != tick or tick == 0:
            page = self._write()
            self._page = (tick, page)
        return page

    def _write(self) -> bytes:
        telemetry, groups = self.telemetry, self.groups
        report = telemetry.latest
        families: list[TextFamily] = []
        if report is not None:
            pods = self.pods.labels() if self.pods is not None else {}
            if "gpu" in groups:
                families.extend(dcgm_families(report, telemetry.gpu_labels, telemetry.last_xid, pods))
                families.extend(gpu_health_families(report, telemetry.gpu_labels, pods))
                families.extend(gpu_answer_families(report, telemetry.gpu_labels, pods))
                families.append(computing_source_family(report, telemetry.gpu_labels, pods))
                families.extend(gpu_share_families(report, telemetry.gpu_labels))
            if "xid_count" in groups:
                families.append(xid_count_family(report, telemetry.gpu_labels, telemetry.recent_xids, pods=pods))
            if "nvlink" in groups:
                families.extend(nvlink_families(report, telemetry.gpu_labels, pods))
            if "node" in groups:
                families.extend(node_families(report, telemetry.info))
        if "agent" in groups:
            families.extend(self.metrics.families())
        if self.process is not None:
            families.extend(self.process.families())
        # A family with no sample (InfiniBand on a node without it, rates on the first tick) is
        # left out, as the Go exporters (dcgm-exporter, node_exporter) leave it out.
        return render([family for family in families if family.lines]).encode()

    def health(self) -> tuple[bool, str]:
        """Healthy while sampling ticks keep completing."""
        age = time.monotonic() - self.telemetry.last_tick_monotonic
        limit = max(STALE_MIN_SECONDS, STALE_INTERVALS * self.telemetry.interval_seconds)
        if age > limit:
            return False, f"no sampling tick completed for {age:.1f} s"
        return True, "ok"


def _source_families(report: pb.NodeReport) -> Iterator[TextFamily]:
    # The names, help and label keep node_exporter's word for a source (node_scrape_collector_*).
    duration = TextFamily(
        "nodeagent_agent_collector_duration_seconds", "gauge", "Time each collector took in the latest tick."
    )
    success = TextFamily(
        "nodeagent_agent_collector_success", "gauge", "1 when the collector succeeded in the latest tick."
    )
    for status in report.collectors:
        labels = _source_label(status.name)
        duration.lines.append(sample_line(duration.name, labels, status.duration_seconds))
        success.lines.append(f"{success.name}{{{labels}}} {1 if status.success else 0}\n")
    yield duration
    yield success


@functools.lru_cache(maxsize=256)
def _source_label(name: str) -> str:
    return label("collector", name)


def _sample(report: pb.NodeReport) -> Iterator[TextFamily]:
    utilization = TextFamily(
        "nodeagent_agent_gpu_utilization_ratio", "gauge",
        "Share of the latest interval a kernel ran on the GPU (NVML).",
    )  # fmt: skip
    memory = TextFamily("nodeagent_agent_gpu_memory_used_bytes", "gauge", "GPU memory in use at the latest sample.")
    for gpu in report.gpus:
        labels = f'gpu="{gpu.index}"'
        # A value that is not zero is set: HasField only for a zero.
        ratio, used = gpu.utilization_gpu_ratio, gpu.memory_used_bytes
        if ratio or gpu.HasField("utilization_gpu_ratio"):
            utilization.lines.append(sample_line(utilization.name, labels, ratio))
        if used or gpu.HasField("memory_used_bytes"):
            memory.lines.append(f"{memory.name}{{{labels}}} {used}\n")
    yield utilization
    yield memory
    rx = TextFamily("nodeagent_agent_network_receive_bytes_total", "counter", "Bytes received by the NIC.")
    tx = TextFamily("nodeagent_agent_network_transmit_bytes_total", "counter", "Bytes sent by the NIC.")
    for nic in report.nics:
        labels = label("device", nic.name)
        rx.lines.append(sample_line(rx.name, labels, nic.rx_bytes_total))
        tx.lines.append(sample_line(tx.name, labels, nic.tx_bytes_total))
    yield rx
    yield tx
    rdma_rx = TextFamily("nodeagent_agent_rdma_receive_bytes_total", "counter", "Bytes received on the RDMA port.")
    rdma_tx = TextFamily("nodeagent_agent_rdma_transmit_bytes_total", "counter", "Bytes sent on the RDMA port.")
    for port in report.rdma_ports:
        labels = f'{label("device", port.device)},port="{port.port}"'
        if port.HasField("rx_bytes_total"):
            rdma_rx.lines.append(sample_line(rdma_rx.name, labels, port.rx_bytes_total))
        if port.HasField("tx_bytes_total"):
            rdma_tx.lines.append(sample_line(rdma_tx.name, labels, port.tx_bytes_total))
    yield rdma_rx
    yield rdma_tx


def _highways(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo | None) -> Iterator[TextFamily]:
    """Each link's traffic over the last tick as a share of its speed: the detector's first look
    at whether the network highway is full. No sample on the first tick, over a counter reset, or
    for a link whose speed nobody knows."""
    nic_rx = TextFamily(
        "nodeagent_network_receive_link_ratio", "gauge", "Receive rate over the latest tick / link speed."
    )
    nic_tx = TextFamily(
        "nodeagent_network_transmit_link_ratio", "gauge", "Transmit rate over the latest tick / link speed."
    )
    ib_rx = TextFamily(
        "nodeagent_infiniband_receive_link_ratio", "gauge", "Receive rate over the latest tick / port rate."
    )
    ib_tx = TextFamily(
        "nodeagent_infiniband_transmit_link_ratio", "gauge", "Transmit rate over the latest tick / port rate."
    )
    if prev is not None:
        seconds = cur.time_unix_seconds - prev.time_unix_seconds
        earlier = {n.name: n for n in prev.nics}
        for nic in cur.nics:
            before = earlier.get(nic.name)
            if before is None or not nic.HasField("speed_bytes_per_second") or nic.speed_bytes_per_second <= 0:
                continue
            for family, field in ((nic_rx, "rx_bytes_total"), (nic_tx, "tx_bytes_total")):
                rate = rates.rate(getattr(before, field), getattr(nic, field), seconds)
                if rate is not None:
                    family.lines.append(
                        sample_line(family.name, label("device", nic.name), rate / nic.speed_bytes_per_second)
                    )
        port_rates = {(p.device, p.port): p.rate_bytes_per_second for p in info.rdma_ports} if info else {}
        earlier_ports = {(p.device, p.port): p for p in prev.rdma_ports}
        for port in cur.rdma_ports:
            key = (port.device, port.port)
            speed = port.rate_bytes_per_second if port.HasField("rate_bytes_per_second") else port_rates.get(key)
            before_port = earlier_ports.get(key)
            if before_port is None or not speed:
                continue
            for family, field in ((ib_rx, "rx_bytes_total"), (ib_tx, "tx_bytes_total")):
                if port.HasField(field) and before_port.HasField(field):
                    rate = rates.rate(getattr(before_port, field), getattr(port, field), seconds)
                    if rate is not None:
                        labels = f'{label("device", port.device)},port="{port.port}"'
                        family.lines.append(sample_line(family.name, labels, rate / speed))
    yield from (nic_rx, nic_tx, ib_rx, ib_tx)
