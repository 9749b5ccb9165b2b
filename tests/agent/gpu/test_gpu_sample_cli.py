"""``nodeagent sample`` end to end with GPUs: a real process finding the fake
``libnvidia-ml.so.1`` on LD_LIBRARY_PATH, as a deployment finds the driver's."""

from __future__ import annotations

import ctypes.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.nvml.state import h100_sxm5
from tests.fakes.trees import REPO

HOST_OFF = ["--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband"]


def _sample(lib_dir: Path, state_path: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "FAKE_NVML_STATE"}
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    if state_path is not None:
        env["FAKE_NVML_STATE"] = str(state_path)
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "sample", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_sample_json_and_table_show_eight_h100s(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = h100_sxm5()
    for index, gpu in enumerate(state.gpus):
        gpu.util_gpu = 10 * index
        gpu.mem_used = (index + 1) * 2**30
    state.gpus[3].links[5].state = 0  # one NVLink down on GPU 3
    state_path = tmp_path / "nvml.state"
    state.write(state_path)

    result = _sample(fake_nvml_dir, state_path, "--json", "--count", "2", "--interval", "0.1", *HOST_OFF)
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert len(first["info"]["gpu"]["gpus"]) == 8
    assert first["info"]["gpu"]["gpus"][0]["nvlink_count"] == 18
    assert second["gpu_unavailable_reason"] is None
    rows = {row["index"]: row for row in second["gpus"]}
    assert [rows[i]["utilization_gpu_ratio"] for i in range(8)] == [i / 10 for i in range(8)]
    assert rows[2]["memory_used_bytes"] == 3 * 2**30
    assert (rows[3]["nvlinks_up"], rows[3]["nvlinks_expected"]) == (17, 18)
    assert (rows[0]["nvlinks_up"], rows[0]["nvlinks_expected"]) == (18, 18)

    table = _sample(fake_nvml_dir, state_path, "--count", "2", "--interval", "0.1", *HOST_OFF)
    assert table.returncode == 0, table.stderr
    assert "NVLink RX/TX" in table.stdout
    assert "17/18" in table.stdout and "18/18" in table.stdout


def test_sample_without_driver_says_so_and_reports_the_host(tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real NVIDIA driver library")
    empty = tmp_path / "no-driver"
    empty.mkdir()
    result = _sample(empty, None, "--count", "2", "--interval", "0.1")
    assert result.returncode == 0, result.stderr
    assert "GPUs: no NVIDIA driver" in result.stdout
    assert "CPU" in result.stdout and "MEM" in result.stdout
    assert "Traceback" not in result.stderr
