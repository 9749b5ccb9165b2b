"""The agent's own ``/metrics`` (``nodeagent run --metrics-listen``), for sites that scrape nodes.

Off the sampling path: the loop only publishes each finished report (one reference assignment);
a scrape reads that report, the spool's counters and the sender's state when it comes. Families:
the agent's health (reports produced, spool, acknowledgement lag, the sender's stream, every
collector's duration and success in the last tick) and the latest sample's key values (GPU
utilization and memory, NIC and RDMA byte counters as counters).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Final

from prometheus_client import generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.process_collector import ProcessCollector
from prometheus_client.registry import Collector, CollectorRegistry

from nodeagent import __version__
from nodeagent.agent.delivery.sender import Sender
from nodeagent.agent.delivery.spool import Spool
from nodeagent.v1 import nodeagent_pb2 as pb

# /healthz fails when no tick has completed for this many intervals (and at least this long).
STALE_INTERVALS: Final = 3
STALE_MIN_SECONDS: Final = 10.0


class AgentTelemetry:
    """What the sampling loop hands to /metrics: the latest report and how many were made."""

    def __init__(self, node_id: str, interval_seconds: float) -> None:
        self.node_id = node_id
        self.interval_seconds = interval_seconds
        self.produced_total = 0
        # Never mutated once published: a scrape on another thread reads it as it is.
        self.latest: pb.NodeReport | None = None
        self.last_tick_monotonic = time.monotonic()

    def publish(self, report: pb.NodeReport) -> None:
        self.latest = report
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


class AgentExposition:
    def __init__(self, metrics: AgentMetrics) -> None:
        self.telemetry = metrics.telemetry
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(metrics)
        ProcessCollector(registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

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
