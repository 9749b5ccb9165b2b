"""GPUFabricUnhealthy: reports of a GB200 tray from the agent over the fake NVML; one GPU of eight
leaving the fabric (not registered, degraded, unhealthy) fires for that GPU alone, a worse reason
is sent again, and it resolves when the GPU is back."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from nodeagent.agent.gpu import slow_readings
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.report_rules import FABRIC_UNHEALTHY, NodeRules
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FABRIC_COMPLETED, FABRIC_IN_PROGRESS, fabric_health_mask, gb200, h100_sxm5

EVERY_REPORT = AlertConfig(check_seconds=1.0, nvlink_check_seconds=1.0)


@pytest.fixture(autouse=True)
def _fabric_asked_every_tick(monkeypatch: pytest.MonkeyPatch) -> None:
    """The agent asks the fabric every 30 s (``slow_readings``); here every tick, so each tick's
    change reaches the rules at once."""
    monkeypatch.setattr(slow_readings, "SLOW_SECONDS", 0.0)


def _fabric_signals(rules: NodeRules, gpu_source: GpuSource, t: float) -> list[AlertSignal]:
    report = pb.NodeReport(node_id="tray-1", time_unix_seconds=t)
    gpu_source.collect(report)
    return [s for s in rules.observe(report) if s.name == FABRIC_UNHEALTHY]


@pytest.mark.parametrize(
    ("fault", "reason"), [("not_registered", "not_registered"), ("degraded", "degraded_bandwidth"),
                          ("unhealthy", "route_unhealthy")],
)  # fmt: skip
def test_one_gpu_leaving_the_fabric_fires_for_it_and_resolves(
    fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource], fault: str, reason: str
) -> None:
    state = fake_nvml.load(gb200(8))
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    rules = NodeRules("tray-1", EVERY_REPORT)
    # Healthy: the verdict known, "not firing" said once per GPU (it resolves what a restarted
    # collector loaded as firing), then nothing.
    first = _fabric_signals(rules, gpu_source, 1000.0)
    assert sorted(s.key for s in first) == [f"gpu:{i}" for i in range(8)] and not any(s.firing for s in first)
    bad = state.gpus[7]
    if fault == "not_registered":
        bad.fabric_state = FABRIC_IN_PROGRESS
    elif fault == "degraded":
        bad.fabric_health = fabric_health_mask(degraded_bandwidth=True)
    else:
        bad.fabric_health = fabric_health_mask(route_unhealthy=True)
    fake_nvml.write()
    (fired,) = _fabric_signals(rules, gpu_source, 1001.0)
    assert (fired.key, fired.firing, fired.severity, fired.labels) == ("gpu:7", True, "critical", {"gpu": "7"})
    assert fired.annotations["problems"].split(",")[0] == reason
    assert fired.annotations["summary"].startswith("GPU 7 NVLink fabric: ")
    assert _fabric_signals(rules, gpu_source, 1002.0) == []  # still firing: sent once
    bad.fabric_state, bad.fabric_health = FABRIC_COMPLETED, fabric_health_mask()
    fake_nvml.write()
    (resolved,) = _fabric_signals(rules, gpu_source, 1003.0)
    assert (resolved.key, resolved.firing) == ("gpu:7", False)


def test_a_worse_reason_is_sent_again(fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]) -> None:
    state = fake_nvml.load(gb200(4))
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    rules = NodeRules("tray-1", EVERY_REPORT)
    state.gpus[1].fabric_health = fabric_health_mask(degraded_bandwidth=True)
    fake_nvml.write()
    (first,) = [s for s in _fabric_signals(rules, gpu_source, 1000.0) if s.firing]
    state.gpus[1].fabric_health = fabric_health_mask(degraded_bandwidth=True, route_unhealthy=True)
    fake_nvml.write()
    (second,) = _fabric_signals(rules, gpu_source, 1001.0)
    assert first.annotations["problems"] == "degraded_bandwidth"
    assert second.annotations["problems"] == "route_unhealthy,degraded_bandwidth"


def test_gpus_without_a_fabric_never_fire(fake_nvml: FakeNvml, make_gpu_source: Callable[..., GpuSource]) -> None:
    fake_nvml.load(h100_sxm5())
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    rules = NodeRules("node-a", EVERY_REPORT)
    assert [s for t in range(3) for s in _fabric_signals(rules, gpu_source, 1000.0 + t)] == []  # no verdict at all
