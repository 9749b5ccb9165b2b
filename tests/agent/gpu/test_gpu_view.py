"""GPU rows and the GPU table, from reports built by hand."""

from __future__ import annotations

import json

import pytest

from nodeagent.agent.gpu.view import gpu_rows, render_gpu_table
from nodeagent.v1 import nodeagent_pb2 as pb

GIB = 1024**3


def _info(links: int = 4) -> pb.NodeInfo:
    info = pb.NodeInfo()
    for i in range(2):
        info.gpu.gpus.add(index=i, name="NVIDIA A100-SXM4-80GB", memory_total_bytes=80 * GIB, nvlink_count=links)
    return info


def _report(t: float, pcie_rx: int, link_rx: list[int], **extra: object) -> pb.NodeReport:
    report = pb.NodeReport(time_unix_seconds=t)
    for i in range(2):
        g = report.gpus.add(index=i, uuid=f"GPU-{i}", utilization_gpu_ratio=0.5, memory_used_bytes=8 * GIB)
        g.memory_total_bytes = 80 * GIB
        g.pcie_rx_bytes_total, g.pcie_tx_bytes_total = pcie_rx, pcie_rx // 2
        for link, rx in enumerate(link_rx):
            g.nvlinks.add(link=link, active=True, rx_bytes_total=rx, tx_bytes_total=rx)
        for key, value in extra.items():
            setattr(g, key, value)
    return report


def test_rates_need_two_reports_and_skip_a_reset() -> None:
    info = _info()
    first = _report(100.0, 10_000, [1000, 1000, 1000, 1000])
    second = _report(102.0, 30_000, [3000, 5000, 1000, 1000])
    reset = _report(104.0, 500, [100, 100, 100, 100])

    (row, _) = gpu_rows(None, first, info)
    assert row["pcie_rx_bytes_per_second"] is None and row["pcie_rate_source"] is None
    assert row["nvlink_rx_bytes_per_second"] is None

    (row, _) = gpu_rows(first, second, info)
    assert row["pcie_rx_bytes_per_second"] == 10_000
    assert row["pcie_tx_bytes_per_second"] == 5_000
    assert [link["rx_bytes_per_second"] for link in row["nvlinks"]] == [1000, 2000, 0, 0]
    assert row["nvlink_rx_bytes_per_second"] == 3000
    assert (row["nvlinks_up"], row["nvlinks_expected"]) == (4, 4)

    (row, _) = gpu_rows(second, reset, info)
    assert row["pcie_rx_bytes_per_second"] is None
    assert row["nvlink_rx_bytes_per_second"] is None
    json.dumps(row)  # JSON-friendly all the way down


def test_gpm_fills_in_where_there_are_no_counters() -> None:
    info = _info(links=0)
    report = pb.NodeReport(time_unix_seconds=1.0)
    g = report.gpus.add(index=0, sm_active_ratio=0.42)
    g.gpm_pcie_rx_bytes_per_second, g.gpm_nvlink_tx_bytes_per_second = 5e9, 7e9
    g.pcie_tx_bytes_per_second = 1e6  # sampled throughput, the last resort
    (row,) = gpu_rows(None, report, info)
    assert (row["sm_active_ratio"], row["pcie_rx_bytes_per_second"], row["pcie_rate_source"]) == (0.42, 5e9, "gpm")
    assert row["pcie_tx_bytes_per_second"] == 1e6
    assert (row["nvlink_tx_bytes_per_second"], row["nvlink_rate_source"]) == (7e9, "gpm")
    assert row["nvlinks_expected"] == 0 and row["nvlinks"] == []


@pytest.mark.parametrize(
    ("setup", "health"),
    [
        ({}, "ok"),
        ({"lost": True}, "lost"),
        ({"ecc_uncorrected_volatile_total": 2}, "ecc"),
        ({"remapped_rows_pending": True}, "row_remap_pending"),
        ({"pcie_link_width": 8, "pcie_max_link_width": 16}, "pcie_degraded"),
        ({"pcie_link_generation": 1, "pcie_max_link_generation": 4}, "ok"),  # idle GPUs drop to Gen1
        ({"clock_event_reason_names": ["hw_thermal_slowdown"]}, "throttled"),
        ({"clock_event_reason_names": ["gpu_idle"]}, "ok"),
    ],
)
def test_health(setup: dict[str, object], health: str) -> None:
    report = pb.NodeReport(time_unix_seconds=1.0)
    g = report.gpus.add(index=0)
    for key, value in setup.items():
        if isinstance(value, list):
            getattr(g, key).extend(value)
        else:
            setattr(g, key, value)
    (row,) = gpu_rows(None, report, _info(links=0))
    assert row["health"] == health


def test_xid_in_the_report_marks_its_gpu() -> None:
    report = _report(1.0, 0, [0, 0, 0, 0])
    report.events.add(kind="xid", subject="gpu:1", attributes={"xid": "79"})
    rows = gpu_rows(None, report, _info())
    assert [(r["health"], r["xids"]) for r in rows] == [("ok", []), ("xid", [79])]


def test_table_is_aligned_and_shows_links_and_health() -> None:
    info = _info()
    first = _report(100.0, 0, [0, 0, 0, 0])
    second = _report(101.0, 2 * 10**9, [25 * 10**9, 25 * 10**9, 25 * 10**9, 0])
    second.gpus[1].nvlinks[3].active = False
    second.gpus[0].clock_event_reason_names.extend(["gpu_idle", "sw_power_cap"])
    table = render_gpu_table(gpu_rows(first, second, info), "").splitlines()
    assert table[0].split()[:3] == ["GPU", "UTIL", "SM"]
    assert len(table) == 3
    starts = [table[0].index(h) for h in ("UTIL", "MEMORY", "HEALTH")]
    for line in table[1:]:
        assert [line[s - 1] for s in starts] == [" ", " ", " "]  # columns line up under their headers
    assert "600.00 Gb/s" in table[1] and "16.00 Gb/s" in table[1] and "8.0/80 GiB" in table[1]
    assert "sw_power_cap" in table[1] and "gpu_idle" not in table[1]
    assert table[1].rstrip().endswith("throttled")
    assert "3/4" in table[2] and table[2].rstrip().endswith("nvlink_down")


def test_lost_gpu_row() -> None:
    report = pb.NodeReport(time_unix_seconds=1.0)
    report.gpus.add(index=3, lost=True)
    table = render_gpu_table(gpu_rows(None, report, _info()), "")
    assert table.splitlines()[1].split() == ["3", "-", "-", "-", "-", "-", "-", "-", "lost"]
