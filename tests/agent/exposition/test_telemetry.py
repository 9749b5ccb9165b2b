"""What each tick hands to /metrics (agent/exposition/telemetry.py), kept apart from the page."""

from __future__ import annotations

from nodeagent.agent.exposition.telemetry import XID_COUNT_WINDOW_SECONDS, AgentTelemetry
from nodeagent.core.exposition import gpu_health
from nodeagent.core.exposition.dcgm import gpu_labels
from nodeagent.v1 import nodeagent_pb2 as pb


def test_the_xid_window_is_the_pages() -> None:
    assert XID_COUNT_WINDOW_SECONDS == gpu_health.XID_COUNT_WINDOW_SECONDS


def _report(seq: int, name: str | None) -> pb.NodeReport:
    report = pb.NodeReport(node_id="n1", seq=seq, time_unix_seconds=1000.0 + seq)
    if name is not None:
        report.info.hostname = "host"
        report.info.gpu.gpus.add(index=0, uuid="GPU-0", name=name, pci_bus_id="00000000:07:00.0")
    return report


def test_gpu_labels_follow_the_last_info_seen() -> None:
    telemetry = AgentTelemetry("n1", 1.0)
    assert telemetry.gpu_labels == {}
    first = _report(1, "NVIDIA A100-SXM4-80GB")
    telemetry.publish(first)
    assert telemetry.gpu_labels == gpu_labels(first.info, "n1")
    assert telemetry.gpu_labels[0]["modelName"] == "NVIDIA A100-SXM4-80GB"
    telemetry.publish(_report(2, None))  # no topology: the labels stay
    assert telemetry.gpu_labels[0]["modelName"] == "NVIDIA A100-SXM4-80GB"
    telemetry.publish(_report(3, "NVIDIA H100 80GB HBM3"))
    assert telemetry.gpu_labels[0]["modelName"] == "NVIDIA H100 80GB HBM3"
