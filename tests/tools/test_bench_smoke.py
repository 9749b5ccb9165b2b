"""The overhead benchmark keeps working (its figures are read by people, not asserted)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakes.trees import REPO


def test_overhead_benchmark_runs_and_reports_both_sides() -> None:
    import shutil

    require(shutil.which("prometheus-node-exporter") is not None, "needs prometheus-node-exporter (Debian)")
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "agent_overhead.py"), "--cycles", "5", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout)
    assert results[0]["tree"] == "this machine"
    for result in results:
        assert result["agent"]["cpu_seconds_per_cycle"] > 0
        assert result["node_exporter"]["cpu_seconds_per_scrape"] >= 0
        assert result["agent"]["peak_rss_bytes"] > 10e6


def test_diag_speed_benchmark_runs_on_the_fake_8_gpu_nodes(fake_nvml_dir: Path) -> None:
    """``fake_nvml_dir``: the benchmark builds the same fake library; skip (or fail in CI) without it."""
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "diag_speed.py"), "--runs", "1", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    results = json.loads(out.stdout)
    assert {r["node"] for r in results} == {"8xH100-SXM5", "8xA100-SXM4"}
    assert all(r["checks"] > 15 and r["max_seconds"] > 0 for r in results)


def test_agent_metrics_benchmark_measures_both_pages(fake_nvml_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "agent_metrics_scrape.py"), "--seconds", "1", "--repeat-scrapes", "5",
         "--writes", "5", "--scrapes", "20", "--json"],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    printed = json.loads(out.stdout)
    results = printed["pages"]
    assert [r["page"] for r in results] == ["default", "with per-link NVLink", "default, DGX H100 host"]
    assert results[1]["samples"] > results[0]["samples"] > 300  # 8 GPUs x 29 DCGM families and the host
    assert results[2]["samples"] > results[0]["samples"] + 224 * 8  # a DGX's 224 CPUs, 8 modes each
    assert all(r["peak_rss_bytes"] > 10e6 for r in results[:2])  # the live agent runs on this host only
    if shutil.which("prometheus-node-exporter"):
        assert printed["node_exporter"]["samples"] > 100 and printed["node_exporter"]["scrape_cpu_seconds"] >= 0
    assert all(r["page_gzip_cpu_seconds"] > 0 and 0 < r["page_write_cpu_seconds"] < 1 for r in results)
    assert all(0 <= r["fresh_scrape_cpu_seconds"] < 1 and 0 <= r["fresh_scrape_new_connection_cpu_seconds"] < 1
               for r in results)  # fmt: skip
    # The per-link page's samples are counted, not timed (a page is written in about 2 ms of CPU,
    # which a busy machine's noise outweighs): each of the 8 H100s' 18 links adds its own series,
    # receive and transmit at least.
    assert results[1]["samples"] >= results[0]["samples"] + 8 * 18 * 2


def test_daemon_cost_benchmark_measures_the_daemon_as_installed(fake_nvml_dir: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "daemon_cost.py"), "--seconds", "1", "--warmup", "2", "--cases", "a100",
         "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (result,) = json.loads(out.stdout)
    assert result["case"] == "a100" and result["peak_rss_bytes"] > 10e6 and result["threads"] > 8


def _fake_gpu_env(fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Child processes of this test see 8 fake H100s through the real ctypes path."""
    from tests.fakes.nvml.plugin import STATE_ENV
    from tests.fakes.nvml.state import h100_sxm5

    state = tmp_path / "nvml.state"
    h100_sxm5().write(state)
    monkeypatch.setenv("LD_LIBRARY_PATH", str(fake_nvml_dir))
    monkeypatch.setenv(STATE_ENV, str(state))


def test_gpu_verdict_harness_streams_a_live_agent_and_reads_the_verdict(
    fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The real-GPU verdict check runs its collector and live agent here too (the idle phase needs
    no GPU workload), so it works when a GPU machine is at hand."""
    _fake_gpu_env(fake_nvml_dir, tmp_path, monkeypatch)
    raw = tmp_path / "nodes.jsonl"
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_verdict.py"), "--phases", "idle", "--seconds", "4",
         "--raw", str(raw)],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "| idle | 4 | idle | - |" in out.stdout
    node = json.loads(raw.read_text())
    assert (node["node_id"], node["gpu_count"], node["reports_total"]) == ("verdict-idle", 8, 4)
    bad = subprocess.run(
        [sys.executable, str(REPO / "bench" / "gpu_verdict.py"), "--phases", "idle,bogus"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert bad.returncode != 0 and "unknown phase 'bogus'" in bad.stderr


def test_gpu_real_tick_cost_and_nvidia_smi_columns(
    fake_nvml_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _fake_gpu_env(fake_nvml_dir, tmp_path, monkeypatch)
    monkeypatch.syspath_prepend(str(REPO / "bench"))
    import gpu_real

    cost = gpu_real.tick_cost(3)
    assert cost["gpus"] == 8 and cost["cpu_seconds_per_cycle"] > 0
    assert cost["nvml_field_value_calls_per_gpu_per_tick"] == 1.0
    # nvidia-smi's rows beside the agent's: "[N/A]" cells are left out, MiB become GB.
    rows = [["0", "97", "1024"], ["0", "[N/A]", "3072"], ["1", "5", "[N/A]"], ["garbage"]]
    snaps = [{"gpus": [{"index": 0, "utilization_gpu_ratio": 0.9, "memory_used_bytes": 2e9}]}]
    line = gpu_real.summarise("matmul", snaps, rows)[0]
    assert line.startswith("| matmul | GPU 0 | 1 | 90.0% |")
    assert line.endswith("| 97.0% | 2.1 GB |")


def test_remote_write_cost_benchmark_times_every_stage() -> None:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench" / "remote_write_cost.py"), "--nodes", "2", "--reports", "3", "--json"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    result = json.loads(out.stdout)
    assert result["reports"] == 6 and result["samples"] > 6 * 100  # 8 GPUs x the DCGM families and the host
    stages = result["us_per_sample"]
    assert set(stages) == {"series", "write_request", "serialize", "snappy", "total", "page_text"}
    assert stages["total"] > 0 and all(value >= 0 for value in stages.values())
    assert 0 < stages["page_text"] < stages["series"]
    assert 0 < result["snappy_bytes_per_sample"] < result["bytes_per_sample"]
