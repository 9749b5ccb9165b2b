"""The labelled suite: simulated traces with known truth, to score the detector against.

Generated here, deterministically (scenario, parameters, seed), rather than stored: each entry
makes its ``Simulation`` on demand. The entries vary the bottleneck, its severity, the GPU
generation and the noise; ``fast=True`` marks the subset the test suite runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Final

from nodeagent.tools.simulator.simulation import Simulation

_QUIET: Final = MappingProxyType({"util_noise_ratio": 0.005, "step_noise_ratio": 0.005, "rate_noise_ratio": 0.01})
_NOISY: Final = MappingProxyType({"util_noise_ratio": 0.02, "step_noise_ratio": 0.015, "rate_noise_ratio": 0.04})


@dataclass(frozen=True, slots=True)
class LabelledTrace:
    name: str
    scenario: str
    seed: int
    duration_seconds: float = 900.0
    overrides: Mapping[str, Any] = field(default_factory=dict)
    # Detector settings an operator of such a node would give (a capped link's capacity).
    detector_config: Mapping[str, Any] = field(default_factory=dict)
    # In the subset the tests run.
    fast: bool = False

    @property
    def onset_seconds(self) -> float | None:
        value = self.overrides.get("onset_seconds")
        return None if value is None else float(value)

    @property
    def recovery_seconds(self) -> float | None:
        value = self.overrides.get("recovery_seconds")
        return None if value is None else float(value)

    @property
    def steady(self) -> bool:
        """One job whose label should not change over the trace (pauses included)."""
        return (
            self.onset_seconds is None
            and self.overrides.get("job_start_seconds") is None
            and (self.scenario != "job-start")
        )

    def simulation(self) -> Simulation:
        return Simulation(self.scenario, node_id=f"suite-{self.name}", seed=self.seed, **self.overrides)


def _t(name: str, scenario: str, seed: int, **kw: Any) -> LabelledTrace:
    fast = bool(kw.pop("fast", False))
    duration = float(kw.pop("duration", 900.0))
    config = kw.pop("config", {})
    noise = kw.pop("noise", {})
    return LabelledTrace(name, scenario, seed, duration, {**noise, **kw}, config, fast)


_ONSET: Final = {"onset_seconds": 240.0, "recovery_seconds": 600.0, "duration": 900.0}

SUITE: Final[tuple[LabelledTrace, ...]] = (
    # compute-bound nodes: never starved
    _t("healthy-a800", "healthy", 1, fast=True),
    # H100s compute twice as fast: a model twice as heavy keeps the input demand of the A800 runs
    _t("healthy-h100-noisy", "healthy", 2, gpu_profile="h100-sxm5", gpu_samples_per_second=1736.1, noise=_NOISY),
    _t("healthy-a100-quiet", "healthy", 3, gpu_profile="a100-sxm4", noise=_QUIET),
    # DESIGN.md's comparison table
    _t("fast-cloud", "fast-cloud", 4, fast=True),
    _t("fast-cloud-noisy", "fast-cloud", 5, noise=_NOISY),
    _t("ordinary-cloud", "ordinary-cloud", 6, fast=True),
    _t("ordinary-cloud-5g", "ordinary-cloud", 7, nic_speed_bytes_per_second=5e9 / 8, noise=_NOISY),
    # a 25 Gbps link feeds the GPUs; the PCIe all-reduce is what remains (interconnect 0.19)
    _t("ordinary-cloud-25g", "ordinary-cloud", 8, nic_speed_bytes_per_second=25e9 / 8),
    # storage
    _t("storage-iops-80k", "storage-bound", 9, fast=True),
    _t("storage-iops-100k", "storage-bound", 10, volume_iops_cap=100_000.0, noise=_QUIET),
    _t("storage-h100", "storage-bound", 11, gpu_profile="h100-sxm5", noise=_NOISY),
    # mildly starved (moderate tier, data 0.10)
    _t("storage-mild", "storage-bound", 39, volume_iops_cap=118_000.0, noise=_NOISY),
    _t(
        "storage-rdma-throughput",
        "storage-bound",
        12,
        volume_transport="rdma",
        volume_bytes_per_second_cap=1.5e9,
        volume_io_bytes=131_072.0,
        rdma_rate_bytes_per_second=25e9,
    ),
    # cpu
    _t("cpu-24-cores", "cpu-bound", 13, fast=True),
    _t("cpu-28-cores", "cpu-bound", 14, cpu_count=36, loader_cores=28, noise=_NOISY),
    # the loader is CPU-bound while the NIC runs at 79% of its 12.5 Gbps link: close to the network tier
    _t("cpu-bound-busy-link", "cpu-bound", 40, source="network", nic_speed_bytes_per_second=12.5e9 / 8),
    _t("cpu-h100-workers", "cpu-bound", 15, gpu_profile="h100-sxm5", cpu_count=64, loader_cores=48),
    _t("single-threaded", "single-threaded-loader", 16, fast=True),
    # so starved that every report looks like an idle gap
    _t("single-threaded-h100", "single-threaded-loader", 17, gpu_profile="h100-sxm5", noise=_QUIET),
    # host-to-device
    _t("h2d-video", "h2d-bound", 18, fast=True),
    _t("h2d-larger-clips", "h2d-bound", 19, decoded_sample_bytes=12e6, noise=_NOISY),
    # interconnect
    _t("interconnect-pcie", "interconnect-bound", 20, fast=True),
    # PCIe peer-to-peer reaching 75% of the link where the detector assumes 80%
    _t("interconnect-slower-p2p", "interconnect-bound", 41, collective_efficiency_ratio=0.75),
    _t("interconnect-pcie-smaller", "interconnect-bound", 21, collective_bytes_per_sample=2.5e6, noise=_NOISY),
    # not data
    _t("thermal-70", "thermal-throttled", 22, fast=True),
    _t(
        "thermal-80-h100",
        "thermal-throttled",
        23,
        clock_ratio=0.8,
        gpu_profile="h100-sxm5",
        gpu_samples_per_second=1736.1,
    ),
    _t("idle-node", "idle", 24, fast=True),
    _t("job-start", "job-start", 25),
    _t("job-start-network", "job-start", 26, source="network", nic_speed_bytes_per_second=10e9 / 8),
    # pauses that are not starvation
    _t("checkpoints", "checkpoint-bursts", 27, fast=True),
    _t(
        "checkpoints-h100",
        "checkpoint-bursts",
        28,
        gpu_profile="h100-sxm5",
        gpu_samples_per_second=1736.1,
        checkpoint_every_seconds=240.0,
        checkpoint_seconds=25.0,
        noise=_NOISY,
    ),
    _t("epochs", "epoch-boundaries", 29, fast=True),
    _t("epochs-storage-bound", "storage-bound", 30, epoch_every_seconds=300.0),
    # starved with nothing saturated
    _t("software-18k", "software-bound", 31, fast=True),
    _t("software-22k", "software-bound", 32, loader_cap_samples_per_second=22_000.0, noise=_NOISY),
    # a remote store capped below the link; the operator configured its capacity
    _t(
        "remote-store-cap",
        "healthy",
        33,
        source="network",
        remote_store_bytes_per_second=1.2e9,
        config={"link_capacity_bytes_per_second": {"eth0": 1.25e9}},
    ),
    # the same link on a cloud VM whose virtio NIC reports no speed: without configuration the
    # detector cannot tell a full link (it says unknown); with it, it can
    _t("network-speed-unknown", "ordinary-cloud", 42, nic_speed_reported=False),
    _t(
        "network-speed-configured",
        "ordinary-cloud",
        43,
        nic_speed_reported=False,
        config={"link_capacity_bytes_per_second": {"eth0": "10G"}},
    ),
    # a bottleneck appears mid-job and goes away: latency onset -> alert
    _t("onset-network", "healthy", 34, source="network", nic_speed_bytes_per_second=10e9 / 8, fast=True, **_ONSET),
    _t("onset-storage", "storage-bound", 35, **_ONSET),
    _t("onset-cpu", "cpu-bound", 36, noise=_NOISY, **_ONSET),
    _t("onset-h2d", "h2d-bound", 37, **_ONSET),
    _t("onset-software", "software-bound", 38, **_ONSET),
)


def suite(*, fast: bool = False) -> tuple[LabelledTrace, ...]:
    """The whole suite, or the subset the tests run (at most 10 minutes each)."""
    if not fast:
        return SUITE
    out = []
    for trace in SUITE:
        if trace.fast:
            cut = trace.onset_seconds is None
            out.append(trace if not cut else LabelledTrace(trace.name, trace.scenario, trace.seed,
                       min(trace.duration_seconds, 600.0), trace.overrides, trace.detector_config, True))  # fmt: skip
    return tuple(out)
