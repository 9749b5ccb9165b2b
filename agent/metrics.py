"""The agent's own ``/metrics`` (``nodeagent run --metrics-listen``), for sites that scrape nodes.

Off the sampling path: the loop only publishes each finished report (one reference assignment);
a scrape reads that report, the spool's counters and the sender's state. The page is written
on the first scrape after a tick and served as it is until the next one. Four groups of
families, each of which can be turned off:

- ``gpu``: dcgm-exporter's families and labels (core/exposition/dcgm.py);
- ``nvlink``: nodeagent's per-link NVLink bytes, errors and state, with the same labels and
  ``link`` (dcgm-exporter gives none by default; 18 links x 8 GPUs is most of the page);
- ``node``: node_exporter's network, InfiniBand, disk, pressure, CPU, stat, load and memory
  families (core/exposition/node.py);
- ``agent``: nodeagent's own: its health (reports produced, spool, acknowledgement lag, the
  sender's stream, every collector's duration and success in the last tick), the highways as a
  share of link speed, and the latest sample's key values under ``nodeagent_agent_*``.
"""

from __future__ import annotations

import gzip
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Final

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from nodeagent import __version__
from nodeagent.agent.delivery.sender import Sender
from nodeagent.agent.delivery.spool import Spool
from nodeagent.core import rates
from nodeagent.core.exposition.dcgm import DCGM_COUNTERS, dcgm_families, gpu_labels, nvlink_families
from nodeagent.core.exposition.node import node_families
from nodeagent.core.metrics_http import GZIP_LEVEL
from nodeagent.core.metrics_text import escape, format_value
from nodeagent.v1 import nodeagent_pb2 as pb

FAMILY_GROUPS: Final = ("gpu", "nvlink", "node", "agent")

# /healthz fails when no tick has completed for this many intervals (and at least this long).
STALE_INTERVALS: Final = 3
STALE_MIN_SECONDS: Final = 10.0


class AgentTelemetry:
    """What the sampling loop hands to /metrics: the latest report and how many were made."""

    def __init__(self, node_id: str, interval_seconds: float) -> None:
        self.node_id = node_id
        self.interval_seconds = interval_seconds
        self.produced_total = 0
        # Never mutated once published: a scrape on another thread reads them as they are.
        self.latest: pb.NodeReport | None = None
        self.previous: pb.NodeReport | None = None
        # Reports carry the topology only when it changes: the last one seen, and the GPU labels.
        self.info: pb.NodeInfo | None = None
        self.gpu_labels: dict[int, dict[str, str]] = {}
        # The last XID of each GPU since the agent started (DCGM_FI_DEV_XID_ERRORS).
        self.last_xid: dict[int, int] = {}
        self.last_tick_monotonic = time.monotonic()

    def publish(self, report: pb.NodeReport) -> None:
        if report.HasField("info"):
            self.info = report.info
            self.gpu_labels = gpu_labels(report.info, self.node_id)
        xids = dict(self.last_xid)
        for event in report.events:
            if event.kind == "xid" and event.subject.startswith("gpu:") and event.subject[4:].isdigit():
                xid = event.attributes.get("xid", "")
                if xid.isdigit():
                    xids[int(event.subject[4:])] = int(xid)
        self.last_xid = xids
        self.previous, self.latest = self.latest, report
        self.produced_total += 1
        self.last_tick_monotonic = time.monotonic()


class AgentMetrics(Collector):
    def __init__(self, telemetry: AgentTelemetry, spool: Spool, sender: Sender, targets: tuple[str, ...]) -> None:
        self.telemetry = telemetry
        self.spool = spool
        self.sender = sender
        self.targets = targets

    def collect(self) -> Iterator[Metric]:
        telemetry, stats = self.telemetry, self.spool.stats()
        info = GaugeMetricFamily(
            "nodeagent_build_info", "The running nodeagent.", labels=["version", "component", "node"]
        )
        info.add_metric([__version__, "agent", telemetry.node_id], 1.0)
        yield info
        yield CounterMetricFamily(
            "nodeagent_agent_reports", "Reports produced since the agent started.", value=telemetry.produced_total
        )
        yield GaugeMetricFamily("nodeagent_agent_spool_reports", "Reports waiting for an ack.", value=stats.reports)
        yield GaugeMetricFamily("nodeagent_agent_spool_bytes", "Bytes of unacknowledged reports.", value=stats.bytes)
        yield CounterMetricFamily(
            "nodeagent_agent_spool_dropped_reports", "Reports dropped unsent (spool full or too old), this epoch.",
            value=stats.dropped_total,
        )  # fmt: skip
        yield CounterMetricFamily(
            "nodeagent_agent_spool_disk_failures",
            "Times the spool directory failed (full disk, I/O error) and the spool went on in memory only.",
            value=stats.disk_failures_total,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "nodeagent_agent_spool_on_disk", "1 while the spool writes to its directory, 0 in memory only.",
            value=1.0 if stats.on_disk else 0.0,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "nodeagent_agent_spool_disk_bytes", "What the spool directory takes on disk (within --spool-max-bytes).",
            value=stats.disk_bytes,
        )  # fmt: skip
        yield GaugeMetricFamily(
            "nodeagent_agent_ack_lag_reports", "Reports produced after the last one the collector acknowledged.",
            value=max(0, stats.last_seq - stats.acked_seq),
        )  # fmt: skip
        connected = GaugeMetricFamily(
            "nodeagent_agent_sender_connected", "1 for the collector the agent streams to now.", labels=["target"]
        )
        current = self.sender.connected_to
        for target in self.targets:
            connected.add_metric([target], 1.0 if target == current else 0.0)
        yield connected
        yield CounterMetricFamily(
            "nodeagent_agent_sender_reconnects", "Streams to a collector that ended (the sender connects again).",
            value=self.sender.reconnects_total,
        )  # fmt: skip
        report = telemetry.latest
        if report is not None:
            yield GaugeMetricFamily(
                "nodeagent_agent_last_report_timestamp_seconds", "Time of the latest report (Unix time).",
                value=report.time_unix_seconds,
            )  # fmt: skip
            yield from _collectors(report)
            yield from _sample(report)
            yield from _highways(telemetry.previous, report, telemetry.info)


class GpuFamilies(Collector):
    """dcgm-exporter's families from the latest report."""

    def __init__(self, telemetry: AgentTelemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        telemetry = self.telemetry
        report = telemetry.latest
        if report is not None:
            yield from dcgm_families(report, telemetry.gpu_labels, telemetry.last_xid)


class NvlinkFamilies(Collector):
    """nodeagent's per-link NVLink families from the latest report."""

    def __init__(self, telemetry: AgentTelemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        report = self.telemetry.latest
        if report is not None:
            yield from nvlink_families(report, self.telemetry.gpu_labels)


class NodeFamilies(Collector):
    """node_exporter's families from the latest report."""

    def __init__(self, telemetry: AgentTelemetry) -> None:
        self.telemetry = telemetry

    def collect(self) -> Iterator[Metric]:
        report = self.telemetry.latest
        if report is not None:
            yield from node_families(report, self.telemetry.info)


class AgentExposition:
    def __init__(self, metrics: AgentMetrics, groups: Iterable[str] = FAMILY_GROUPS) -> None:
        self.telemetry = metrics.telemetry
        self.groups = frozenset(groups)
        unknown = self.groups - set(FAMILY_GROUPS)
        if unknown:
            raise ValueError(f"unknown metric family group {sorted(unknown)[0]!r} (known: {', '.join(FAMILY_GROUPS)})")
        self.registry = CollectorRegistry(auto_describe=False)
        if "gpu" in self.groups:
            self.registry.register(GpuFamilies(self.telemetry))
        if "nvlink" in self.groups:
            self.registry.register(NvlinkFamilies(self.telemetry))
        if "node" in self.groups:
            self.registry.register(NodeFamilies(self.telemetry))
        if "agent" in self.groups:
            self.registry.register(metrics)
            ProcessCollector(registry=self.registry)

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
                packed = gzip.compress(page, compresslevel=GZIP_LEVEL)
                self._gzipped = (self._page[0], packed)
            return packed

    def _current(self) -> bytes:
        tick = self.telemetry.produced_total
        cached_tick, page = self._page
        if cached_tick != tick or tick == 0:
            page = encode(self.registry.collect())
            self._page = (tick, page)
        return page

    def health(self) -> tuple[bool, str]:
        """Healthy while sampling ticks keep completing."""
        age = time.monotonic() - self.telemetry.last_tick_monotonic
        limit = max(STALE_MIN_SECONDS, STALE_INTERVALS * self.telemetry.interval_seconds)
        if age > limit:
            return False, f"no sampling tick completed for {age:.1f} s"
        return True, "ok"


def _collectors(report: pb.NodeReport) -> Iterator[Metric]:
    duration = GaugeMetricFamily(
        "nodeagent_agent_collector_duration_seconds", "Time each collector took in the latest tick.",
        labels=["collector"],
    )  # fmt: skip
    success = GaugeMetricFamily(
        "nodeagent_agent_collector_success", "1 when the collector succeeded in the latest tick.", labels=["collector"]
    )
    for status in report.collectors:
        duration.add_metric([status.name], status.duration_seconds)
        success.add_metric([status.name], 1.0 if status.success else 0.0)
    yield duration
    yield success


def _sample(report: pb.NodeReport) -> Iterator[Metric]:
    utilization = GaugeMetricFamily(
        "nodeagent_agent_gpu_utilization_ratio", "Share of the latest interval a kernel ran on the GPU (NVML).",
        labels=["gpu"],
    )  # fmt: skip
    memory = GaugeMetricFamily(
        "nodeagent_agent_gpu_memory_used_bytes", "GPU memory in use at the latest sample.", labels=["gpu"]
    )
    for gpu in report.gpus:
        labels = [str(gpu.index)]
        if gpu.HasField("utilization_gpu_ratio"):
            utilization.add_metric(labels, gpu.utilization_gpu_ratio)
        if gpu.HasField("memory_used_bytes"):
            memory.add_metric(labels, gpu.memory_used_bytes)
    yield utilization
    yield memory
    rx = CounterMetricFamily("nodeagent_agent_network_receive_bytes", "Bytes received by the NIC.", labels=["device"])
    tx = CounterMetricFamily("nodeagent_agent_network_transmit_bytes", "Bytes sent by the NIC.", labels=["device"])
    for nic in report.nics:
        rx.add_metric([nic.name], nic.rx_bytes_total)
        tx.add_metric([nic.name], nic.tx_bytes_total)
    yield rx
    yield tx
    rdma_rx = CounterMetricFamily(
        "nodeagent_agent_rdma_receive_bytes", "Bytes received on the RDMA port.", labels=["device", "port"]
    )
    rdma_tx = CounterMetricFamily(
        "nodeagent_agent_rdma_transmit_bytes", "Bytes sent on the RDMA port.", labels=["device", "port"]
    )
    for port in report.rdma_ports:
        labels = [port.device, str(port.port)]
        if port.HasField("rx_bytes_total"):
            rdma_rx.add_metric(labels, port.rx_bytes_total)
        if port.HasField("tx_bytes_total"):
            rdma_tx.add_metric(labels, port.tx_bytes_total)
    yield rdma_rx
    yield rdma_tx


def _highways(prev: pb.NodeReport | None, cur: pb.NodeReport, info: pb.NodeInfo | None) -> Iterator[Metric]:
    """Each link's traffic over the last tick as a share of its speed: the detector's first look
    at whether the network highway is full. No sample on the first tick, over a counter reset, or
    for a link whose speed nobody knows."""
    nic_rx = GaugeMetricFamily(
        "nodeagent_network_receive_link_ratio", "Receive rate over the latest tick / link speed.", labels=["device"]
    )
    nic_tx = GaugeMetricFamily(
        "nodeagent_network_transmit_link_ratio", "Transmit rate over the latest tick / link speed.", labels=["device"]
    )
    ib_rx = GaugeMetricFamily(
        "nodeagent_infiniband_receive_link_ratio", "Receive rate over the latest tick / port rate.",
        labels=["device", "port"],
    )  # fmt: skip
    ib_tx = GaugeMetricFamily(
        "nodeagent_infiniband_transmit_link_ratio", "Transmit rate over the latest tick / port rate.",
        labels=["device", "port"],
    )  # fmt: skip
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
                    family.add_metric([nic.name], rate / nic.speed_bytes_per_second)
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
                        family.add_metric([port.device, str(port.port)], rate / speed)
    yield from (nic_rx, nic_tx, ib_rx, ib_tx)


# prometheus_client names a counter family without "_total" and its encoder adds the suffix to the
# HELP and TYPE lines; dcgm-exporter's counters have none, and a TYPE line must name its samples.
_BARE_COUNTERS: Final = frozenset(DCGM_COUNTERS)


def encode(families: Iterable[Metric]) -> bytes:
    """Text format 0.0.4 of prometheus_client families, the library's way (HELP, TYPE, samples
    with sorted labels) at a fraction of its encoder's cost: that one validates and escapes every
    label of every sample (about 15 us a sample with dcgm-exporter's seven labels, 17 ms for an
    8-GPU page). Here a label set is written once per scrape; the families share one label dict
    per GPU, so that is once per GPU. The output is checked with prometheus_client's parser and
    promtool."""
    out: list[str] = []
    written: dict[int, tuple[dict[str, str], str]] = {}  # id(labels) -> (labels, text): keeps ids unique
    for family in families:
        name, kind = family.name, family.type
        if kind == "counter" and name not in _BARE_COUNTERS:
            name += "_total"
        doc = family.documentation.replace("\\", r"\\").replace("\n", r"\n")
        out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
        for sample in family.samples:
            labels = sample.labels
            if not labels:
                out.append(f"{sample.name} {format_value(sample.value)}\n")
                continue
            entry = written.get(id(labels))
            if entry is None:
                text = ",".join(f'{k}="{escape(v)}"' for k, v in sorted(labels.items()))
                entry = written[id(labels)] = (labels, text)
            out.append(f"{sample.name}{{{entry[1]}}} {format_value(sample.value)}\n")
    return "".join(out).encode()
