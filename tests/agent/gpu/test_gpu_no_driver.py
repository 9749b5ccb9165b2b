"""A node without the NVIDIA driver: the GPU source says why, once, and nothing breaks."""

from __future__ import annotations

import ctypes.util
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.gpu.view import render_gpu_table
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml

NO_DRIVER = "no NVIDIA driver (libnvidia-ml.so.1 not found)"


def test_without_libnvidia_ml_the_reason_is_reported_once(
    run_gpu_probe: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has a real libnvidia-ml; LD_LIBRARY_PATH cannot hide it")
    empty = tmp_path / "no-driver"
    empty.mkdir()
    result = run_gpu_probe(empty, None, ticks=3)
    assert result["unavailable_reason"] == NO_DRIVER
    assert result["info"]["gpu"]["unavailable_reason"] == NO_DRIVER
    events = [e for report in result["reports"] for e in report.get("events", [])]
    assert [(e["kind"], e["message"]) for e in events] == [("gpu_unavailable", NO_DRIVER)]
    assert "events" in result["reports"][0]
    assert not any(report.get("gpus") for report in result["reports"])
    assert result["calls"] == {}  # no NVML call was attempted beyond the failed load
    assert "Traceback" not in result["stderr"]


def test_table_says_why_there_are_no_gpus() -> None:
    assert render_gpu_table([], NO_DRIVER) == f"GPUs: {NO_DRIVER}"


def test_unscripted_fake_plays_a_machine_without_a_driver(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]
) -> None:
    """Loaded into the test process but given no state, the fake must look like no driver at all,
    so tests that never asked for GPUs see what they would see on a GPU-less CI machine."""
    gpu_source = make_gpu_source()
    info = pb.NodeInfo()
    gpu_source.scan(info)
    assert info.gpu.unavailable_reason == NO_DRIVER
    report = pb.NodeReport(time_unix_seconds=1.0)
    gpu_source.collect(report)
    assert [e.kind for e in report.events] == ["gpu_unavailable"]
    assert not report.gpus
