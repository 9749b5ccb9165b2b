"""NVLink counters that run 1024 times too fast (a driver counting bytes where NVML's header says
KiB): `sample`, `top` and the agent's /metrics agree on the GPU's NVLink rate, and the counters'
impossible rate is flagged as a bad reading, as the detector already takes it, never shown as
194 Tb/s of traffic. The collector's /metrics says the same of the detector's window."""

from __future__ import annotations

import io
import re

from rich.console import Console

from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.exposition.page import AgentExposition, AgentMetrics, AgentTelemetry
from nodeagent.agent.gpu.view import gpu_rows, render_gpu_table
from nodeagent.agent.views.snapshots import snapshot
from nodeagent.agent.views.top_frame import ViewState, frame
from nodeagent.v1 import nodeagent_pb2 as pb

LINKS = 18
LINK_SPEED = 25e9  # bytes per second one way, per NVLink4 link (FI_NVLINK_GET_SPEED)
TRUE_RX = 23.9e9  # what the GPU received over its links, per second (GPM says so)
KIB = 1024


def _info() -> pb.NodeInfo:
    info = pb.NodeInfo(node_id="h100-1")
    info.gpu.gpus.add(
        index=0,
        uuid="GPU-0",
        name="NVIDIA H100 80GB HBM3",
        nvlink_count=LINKS,
        nvlink_speed_bytes_per_second=LINK_SPEED,
    )
    return info


def _report(t: float, gpm: bool) -> pb.NodeReport:
    """The report an agent makes of such a GPU: its per-link counters taken as KiB (x 1024) while
    they count bytes, so they grow 1024 times faster than the traffic."""
    report = pb.NodeReport(node_id="h100-1", time_unix_seconds=t, epoch=1, seq=int(t))
    report.collectors.add(name="gpu")
    g = report.gpus.add(index=0, uuid="GPU-0", utilization_gpu_ratio=0.9)
    per_link = int(t * TRUE_RX / LINKS) * KIB
    for link in range(LINKS):
        g.nvlinks.add(link=link, active=True, rx_bytes_total=per_link, tx_bytes_total=per_link)
    g.nvlink_rx_bytes_total = g.nvlink_tx_bytes_total = per_link * LINKS
    if gpm:
        g.gpm_nvlink_rx_bytes_per_second = g.gpm_nvlink_tx_bytes_per_second = TRUE_RX
    return report


def _agent_metrics(previous: pb.NodeReport, current: pb.NodeReport) -> str:
    telemetry = AgentTelemetry("h100-1", 1.0)
    first = pb.NodeReport()
    first.CopyFrom(previous)
    first.info.CopyFrom(_info())
    telemetry.publish(first)
    telemetry.publish(current)

    class _NoSender:
        connected_to = None
        reconnects_total = 0
        reports_resent_total = 0

    spool = Spool(max_bytes=1 << 20, max_age_seconds=60)
    metrics = AgentMetrics(telemetry, spool, sender=_NoSender(), targets=())  # type: ignore[arg-type]
    page = AgentExposition(metrics, ("gpu", "nvlink", "node", "agent")).render()
    return page if isinstance(page, str) else bytes(page).decode()


def _top(previous: pb.NodeReport, current: pb.NodeReport) -> str:
    out = io.StringIO()
    Console(file=out, width=160).print(frame(snapshot(previous, current, _info()), None, ViewState(), 160))
    return out.getvalue()


def test_sample_top_and_metrics_agree_and_the_counters_are_a_bad_reading() -> None:
    previous, current = _report(100.0, gpm=True), _report(101.0, gpm=True)
    [row] = gpu_rows(previous, current, _info())
    assert row["nvlink_rx_bytes_per_second"] == TRUE_RX and row["nvlink_rate_source"] == "gpm"
    assert row["bad_readings"] == ["nvlink"]
    assert "nvlink_bad_reading" in row["health_reasons"]
    # /metrics of the same report: dcgm-exporter's NVLink gauge is the figure sample shows.
    page = _agent_metrics(previous, current)
    gauge = re.search(r"^DCGM_FI_PROF_NVLINK_RX_BYTES\{[^}]*\} (\S+)$", page, re.MULTILINE)
    assert gauge is not None and float(gauge[1]) == row["nvlink_rx_bytes_per_second"]
    table = render_gpu_table([row], "")
    assert "191.20 Gb/s / 191.20 Gb/s*" in table and "Tb/s" not in table, table
    screen = _top(previous, current)
    assert "NVL Gb/s" in screen and "191.2/191.2*" in screen, screen


def test_without_gpm_the_rate_is_unknown_and_said_to_be_a_bad_reading() -> None:
    previous, current = _report(100.0, gpm=False), _report(101.0, gpm=False)
    [row] = gpu_rows(previous, current, _info())
    assert row["nvlink_rx_bytes_per_second"] is None and row["bad_readings"] == ["nvlink"]
    assert "bad reading" in render_gpu_table([row], "")
    assert re.search(r"│?\s*bad\s", _top(previous, current))


def test_traffic_the_links_carry_is_shown_as_it_is() -> None:
    previous, current = _report(100.0, gpm=False), _report(101.0, gpm=False)
    for report in (previous, current):
        for link in report.gpus[0].nvlinks:
            link.rx_bytes_total //= KIB
            link.tx_bytes_total //= KIB
    [row] = gpu_rows(previous, current, _info())
    assert row["bad_readings"] == [] and row["nvlink_rate_source"] == "counter"
    assert abs(row["nvlink_rx_bytes_per_second"] - TRUE_RX) < TRUE_RX * 0.01
