"""The pipeline model of a training node, in steady state.

A sample is fetched (network or storage), pre-processed on CPU cores, copied to a GPU and
consumed there; after its compute, each GPU exchanges gradients with the others. The input
pipeline runs ahead of the GPUs, so a GPU waits for data only when the pipeline delivers fewer
samples per second than the GPUs could consume: per second of a GPU,

    compute share  c = (X / N) / R            X: samples per second the node trains on
    sync share     s = (X / N) * g / B        R: samples per second one GPU computes
    data wait      d = 1 - c - s              g: collective bytes per sample, B: link bandwidth

with X the smaller of the GPUs' own pace N / (1/R + g/B) and the slowest input stage. The
collective does not overlap compute in this model, so ``s`` is all waiting, as in DESIGN.md's
table (14 of 112 minutes of sync on the ordinary cloud).
"""

from __future__ import annotations

from dataclasses import dataclass

from nodeagent.tools.simulator.profiles import PROFILES, GpuProfile
from nodeagent.tools.simulator.scenarios import Params

# A GPU waits for data "meaningfully" from this share on (DESIGN.md's moderate tier).
STARVED_RATIO = 0.05


@dataclass(frozen=True, slots=True)
class Flow:
    """What the node does per second when the input cost per sample is ``load_ratio`` x nominal."""

    samples_per_second: float
    compute_ratio: float
    sync_ratio: float
    data_wait_ratio: float
    # The input stage that limits the node ("network", "storage", "cpu", "h2d", "unknown"), or
    # None when the GPUs set the pace.
    limit: str | None
    fetch_bytes_per_sample: float
    decoded_bytes_per_sample: float
    core_seconds_per_sample: float


def gpu_profile(params: Params) -> GpuProfile:
    return PROFILES[params.gpu_profile]


def collective_bytes_per_second_capacity(params: Params) -> float:
    """Per GPU and direction, what the all-reduce achieves on the node's interconnect."""
    profile = gpu_profile(params)
    link = profile.nvlink_bytes_per_second if params.interconnect == "nvlink" else profile.pcie_bytes_per_second
    return link * params.collective_efficiency_ratio


def h2d_bytes_per_second_capacity(params: Params) -> float:
    return gpu_profile(params).pcie_bytes_per_second * params.h2d_efficiency_ratio


def fetch_bytes_per_second_capacity(params: Params) -> float:
    if params.source == "network":
        link = params.nic_speed_bytes_per_second * params.nic_efficiency_ratio
        remote = params.remote_store_bytes_per_second
        return link if remote is None else min(link, remote)
    if params.source == "storage":
        return min(params.volume_bytes_per_second_cap, params.volume_iops_cap * params.volume_io_bytes)
    return float("inf")


def flow(params: Params, gpus: int, load_ratio: float = 1.0) -> Flow:
    gpu_rate = params.gpu_samples_per_second * gpu_profile(params).relative_speed * params.clock_ratio
    collective_seconds_per_sample = params.collective_bytes_per_sample / collective_bytes_per_second_capacity(params)
    gpu_pace = gpus / (1.0 / gpu_rate + collective_seconds_per_sample)

    fetch_bytes = params.sample_bytes * (1.0 - params.page_cache_hit_ratio) * load_ratio
    decoded_bytes = params.decoded_sample_bytes * load_ratio
    core_seconds = load_ratio / params.samples_per_core_second
    loader_cores = params.loader_cores if params.loader_cores > 0 else gpus  # one main thread per rank
    stages: list[tuple[float, str]] = [
        (loader_cores / core_seconds, "cpu"),
        (gpus * h2d_bytes_per_second_capacity(params) / decoded_bytes, "h2d"),
    ]
    if params.source != "memory" and fetch_bytes > 0:
        stages.append((fetch_bytes_per_second_capacity(params) / fetch_bytes, params.source))
    if params.loader_cap_samples_per_second is not None:
        stages.append((params.loader_cap_samples_per_second / load_ratio, "unknown"))
    slowest, limit = min(stages)
    if slowest >= gpu_pace:
        rate, cause = gpu_pace, None
    else:
        rate, cause = slowest, limit
    compute = rate / gpus / gpu_rate
    sync = rate / gpus * collective_seconds_per_sample
    wait = max(0.0, 1.0 - compute - sync)
    return Flow(rate, compute, sync, wait, cause, fetch_bytes, decoded_bytes, core_seconds)


def truth_label(f: Flow) -> tuple[str, str | None]:
    """(state, cause) of an assigned, unthrottled GPU in steady state."""
    if f.data_wait_ratio >= STARVED_RATIO and f.limit is not None:
        return "starved", f.limit
    if f.sync_ratio >= STARVED_RATIO:
        return "starved", "interconnect"
    return "busy", None
