"""The detector on simulated nodes and on odd input: the comparison table of the design, the
alert signal, configuration errors, and reports that are broken in the ways real ones are."""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.core.detector.config import DetectorConfigError, VolumeLimits
from nodeagent.core.detector.node import ALERT_NAME, DetectorConfig, NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb


def reports(scenario: str, seconds: int, *, seed: int = 1, **overrides: Any) -> Iterator[pb.NodeReport]:
    sim = Simulation(scenario, node_id="node-a", seed=seed, **overrides)
    first = sim.step(0.0)
    first.info.CopyFrom(sim.info())
    yield first
    for _ in range(seconds):
        yield sim.step(1.0)


def run(scenario: str, seconds: int = 300, config: DetectorConfig | None = None, **overrides: Any) -> NodeDetector:
    detector = NodeDetector("node-a", config or DetectorConfig())
    for report in reports(scenario, seconds, **overrides):
        detector.observe(report)
    return detector


def test_ordinary_cloud_is_network_starved_as_in_the_comparison_table() -> None:
    detector = run("ordinary-cloud")
    v = detector.verdict
    assert (v.state, v.cause, v.tier) == ("starved", "network", "high")
    assert v.starvation_ratio == pytest.approx(38 / 112, abs=0.01)
    assert v.interconnect_ratio == pytest.approx(14 / 112, abs=0.01)
    assert all(g.state == "starved" and g.cause == "network" for g in v.gpus)
    assert v.evidence["network_link"] == "eth0"
    assert float(v.evidence["network_rx_link_ratio"]) >= 0.9
    # Observed 1.19 GB/s while waiting 34% of the time: 1.8 GB/s would keep the GPUs busy.
    assert v.needed_ingest_bytes_per_second == pytest.approx(1.1875e9 / (1 - 38 / 112), rel=0.03)
    assert v.gpu_seconds_lost > 0


def test_fast_cloud_is_not_flagged() -> None:
    detector = run("fast-cloud", 600)
    v = detector.verdict
    assert v.state == "busy" and not v.starved_gpus
    assert v.starvation_ratio is not None and v.starvation_ratio <= 0.05
    assert not detector.signals()[0].firing


def test_the_alert_signal_names_gpus_jobs_cause_and_tier() -> None:
    detector = run("storage-bound")
    (signal,) = detector.signals()
    assert signal.name == ALERT_NAME == "GPUDataStarved" and signal.key == "" and signal.firing
    assert signal.node_id == "node-a"
    assert signal.severity == "critical"
    # The jobs on its GPUs: the simulated node's own Slurm job.
    job = Simulation("storage-bound", node_id="node-a").params.job_id
    assert dict(signal.labels) == {"cause": "storage", "gpus": "0,1,2,3,4,5,6,7", "jobs": job, "tier": "high"}
    assert float(signal.annotations["starvation_ratio"]) == pytest.approx(0.387, abs=0.01)
    assert "storage_busy_ratio=" in signal.annotations["evidence"]
    assert float(signal.annotations["needed_ingest_bytes_per_second"]) > 1e9


def test_a_mildly_starved_node_is_moderate_and_a_warning() -> None:
    detector = run("storage-bound", 300, volume_iops_cap=118_000.0)
    (signal,) = detector.signals()
    assert signal.firing and signal.severity == "warning" and signal.labels["tier"] == "moderate"


def test_verdicts_have_a_plain_json_view() -> None:
    plain = run("cpu-bound", 120).verdict.to_plain()
    again = json.loads(json.dumps(plain))
    assert again["cause"] == "cpu" and len(again["gpus"]) == 8
    assert again["gpus"][0]["uuid"].startswith("GPU-")
    assert again["gpus"][0]["evidence"]["cpu_pattern"] == "node-saturated"


def test_a_new_job_warms_up_and_an_unassigned_gpu_is_idle() -> None:
    detector = NodeDetector("node-a", DetectorConfig())
    states = []
    for report in reports("job-start", 200):
        states.append(detector.observe(report).gpus[0].state)
    assert states[30] == "idle"
    assert states[100] == "warmup"  # the job appeared at 60 s
    assert states[-1] == "busy"


def test_a_remote_store_cap_is_network_only_when_its_capacity_is_known() -> None:
    capped = {"source": "network", "remote_store_bytes_per_second": 1.2e9}
    assert run("healthy", 200, **capped).verdict.cause == "unknown"
    config = DetectorConfig.from_mapping({"link_capacity_bytes_per_second": {"eth0": "10G"}}, source="test")
    assert run("healthy", 200, config=config, **capped).verdict.cause == "network"


def test_provisioned_volume_limits_name_storage() -> None:
    """An RDMA volume at its provisioned throughput: busy stays under 90%, the config says it is capped."""
    config = DetectorConfig(volumes={"nvme1n1": VolumeLimits(throughput_bytes_per_second=1.5e9)})
    verdict = run("storage-bound", 200, config=config, volume_transport="rdma", volume_bytes_per_second_cap=1.5e9,
                  volume_io_bytes=1 << 20, rdma_rate_bytes_per_second=25e9).verdict  # fmt: skip
    assert verdict.cause == "storage"
    assert float(verdict.evidence["storage_provisioned_ratio"]) > 0.95


def test_lost_gpu_and_garbage_values_do_not_break_the_node() -> None:
    detector = NodeDetector("node-a", DetectorConfig())
    for n, report in enumerate(reports("ordinary-cloud", 200)):
        if n > 100:
            report.gpus[3].Clear()
            report.gpus[3].index, report.gpus[3].lost = 3, True
            report.gpus[5].utilization_gpu_ratio = math.nan
            report.gpus[6].utilization_gpu_ratio = 7.5
            report.gpus[7].pcie_rx_bytes_total = 0  # a counter reset
            report.nics[0].rx_bytes_total = 2**64 - 1 if n == 150 else report.nics[0].rx_bytes_total
        detector.observe(report)
    v = detector.verdict
    assert v.gpus[3].state == "lost"
    assert v.gpus[0].state == "starved" and v.cause == "network"
    assert v.gpus[5].state == "starved"  # its window still holds the reports before the garbage
    json.dumps(v.to_plain())


def test_an_unresponsive_gpu_gets_no_starvation_verdict_from_stale_readings() -> None:
    # Every GPU starved; then GPU 3 stops answering (no readings, unresponsive): it is held out at
    # the gate like a lost GPU, not judged on the readings it sent before.
    detector = NodeDetector("node-a", DetectorConfig())
    for n, report in enumerate(reports("ordinary-cloud", 300)):
        if n > 100:
            report.gpus[3].Clear()
            report.gpus[3].index, report.gpus[3].unresponsive = 3, True
            report.gpus[3].unresponsive_call = "nvmlDeviceGetUtilizationRates"
        detector.observe(report)
    v = detector.verdict
    assert v.gpus[3].state == "lost"
    assert 3 not in [g.index for g in v.starved_gpus]
    assert v.gpus[0].state == "starved"


def test_time_going_backwards_and_empty_reports_are_ignored() -> None:
    detector = NodeDetector("node-a", DetectorConfig())
    stream = list(reports("ordinary-cloud", 120))
    for report in stream[:100]:
        detector.observe(report)
    before = detector.verdict
    assert detector.observe(stream[50]) is before
    assert detector.observe(pb.NodeReport(node_id="node-a", time_unix_seconds=math.nan)) is before
    for report in stream[100:]:
        detector.observe(report)
    detector.observe(pb.NodeReport(node_id="node-a", time_unix_seconds=stream[-1].time_unix_seconds + 11))
    assert isinstance(detector.verdict, NodeVerdict)
    empty = NodeDetector("x", DetectorConfig())
    assert empty.observe(pb.NodeReport(node_id="x", time_unix_seconds=1.0)).gpus == ()
    assert not empty.signals()[0].firing


def test_a_long_silence_starts_the_window_again() -> None:
    detector = NodeDetector("node-a", DetectorConfig())
    stream = list(reports("ordinary-cloud", 300))
    for report in stream[:150]:
        detector.observe(report)
    assert detector.verdict.state == "starved"
    for n, report in enumerate(stream[150:]):
        report.time_unix_seconds += 3600
        detector.observe(report)
        if n == 20:
            assert detector.verdict.state == "busy"  # what the window held an hour ago says nothing now
    assert detector.verdict.state == "starved"
    assert detector.verdict.starvation_ratio == pytest.approx(38 / 112, abs=0.01)


def test_config_from_mapping_checks_keys_and_types() -> None:
    config = DetectorConfig.from_mapping(
        {"moderate_ratio": 0.1, "window_seconds": 120, "throttle_reasons": ["hw_slowdown"],
         "link_capacity_bytes_per_second": {"eth0": "25G", "mlx5_0/1": 1e9}, "volumes": {"nvme1n1": {"iops": 120000}}},
        source="collector.toml [detector]",
    )  # fmt: skip
    assert config.moderate_ratio == 0.1 and config.window_steps == 12 and config.enter_steps == 8
    assert config.link_capacity_bytes_per_second == {"eth0": 25e9 / 8, "mlx5_0/1": 1e9}
    assert config.volumes["nvme1n1"] == VolumeLimits(iops=120000.0)
    plateau = DetectorConfig.from_mapping(
        {"network_plateau_steps": 4, "network_plateau_floor_bytes_per_second": 5e6}, source="x"
    )
    assert plateau.network_plateau_steps == 4 and isinstance(plateau.network_plateau_steps, int)
    bad = [
        ({"moderate_ratoi": 0.1}, "unknown key 'moderate_ratoi'"),
        ({"moderate_ratio": "high"}, "moderate_ratio: expected a number"),
        ({"moderate_ratio": True}, "moderate_ratio: expected a number"),
        ({"high_ratio": 1.5}, "high_ratio: a ratio must be within 0..1"),
        ({"link_capacity_bytes_per_second": {"eth0": "fast"}}, "link_capacity_bytes_per_second.eth0: not a link rate"),
        ({"volumes": {"sda": {"iops": 1, "latency": 2}}}, "volumes.sda: unknown key 'latency'"),
        ({"window_seconds": 5}, "window_seconds must be at least evaluate_seconds"),
        ({"network_plateau_steps": 2.5}, "network_plateau_steps: expected a whole number of steps >= 2"),
        ({"network_plateau_steps": 1}, "network_plateau_steps: expected a whole number of steps >= 2"),
    ]
    for mapping, message in bad:
        with pytest.raises(DetectorConfigError, match=r"^collector\.toml \[detector\]: ") as err:
            DetectorConfig.from_mapping(mapping, source="collector.toml [detector]")
        assert message in str(err.value) and "\n" not in str(err.value)


def test_every_threshold_is_documented_with_a_default() -> None:
    import dataclasses
    import inspect

    import nodeagent.core.detector.config as module

    source = inspect.getsource(module.DetectorConfig)
    for f in dataclasses.fields(DetectorConfig):
        line = next(i for i, text in enumerate(source.splitlines()) if text.strip().startswith(f"{f.name}:"))
        comment = source.splitlines()[line - 1].strip()
        assert comment.startswith("#") or source.splitlines()[line - 2].strip().startswith("#"), f.name
        assert f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING


def test_sampled_throughput_stands_in_for_missing_pcie_counters() -> None:
    """Drivers without PCIe byte counters report the sampled throughput: h2d is found all the same."""
    stream = list(reports("h2d-bound", 200))
    for before, report in itertools.pairwise(stream):
        for g, old in zip(report.gpus, before.gpus, strict=True):
            g.pcie_rx_bytes_per_second = float(g.pcie_rx_bytes_total - old.pcie_rx_bytes_total)
            g.pcie_tx_bytes_per_second = float(g.pcie_tx_bytes_total - old.pcie_tx_bytes_total)
    detector = NodeDetector("node-a", DetectorConfig())
    for report in stream:
        for g in report.gpus:
            g.ClearField("pcie_rx_bytes_total")
            g.ClearField("pcie_tx_bytes_total")
        detector.observe(report)
    assert detector.verdict.cause == "h2d"
    assert float(detector.verdict.gpus[0].evidence["h2d_link_ratio"]) > 0.7
