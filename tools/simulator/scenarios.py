"""Scenario parameters: what the simulated node is and what its training job does.

Every scenario is the default ``Params`` (a healthy node with eight A800-SXM4 GPUs training a
CLIP-like model) with a few values changed; any value can be overridden by name, which is how
the labelled suite varies them. The workload is calibrated on DESIGN.md's comparison table:
100M image-text pairs of about 80 kB take 60 minutes of pure compute on 8 GPUs.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Final

from nodeagent.tools.simulator.profiles import PROFILES


class ScenarioError(ValueError):
    """A scenario or parameter the simulator does not know, or a value it cannot use."""


class UnknownScenarioError(ScenarioError):
    def __init__(self, name: str) -> None:
        super().__init__(f"unknown scenario {name!r} (known: {', '.join(SCENARIOS)})")
        self.name = name


@dataclass(frozen=True, slots=True)
class Params:
    # -- the node --
    gpu_profile: str = "a800-sxm4"
    # "nvlink" or "pcie": where the all-reduce goes ("nvlink" needs a profile with NVLinks).
    interconnect: str = "nvlink"
    cpu_count: int = 64
    memory_total_bytes: int = 1 << 40
    nic_speed_bytes_per_second: float = 50e9 / 8
    # False: the NIC reports no link speed (virtio in a cloud VM); only configuration can tell.
    nic_speed_reported: bool = True
    # Share of the link a bulk download achieves.
    nic_efficiency_ratio: float = 0.95
    # Where the training data lives: "network" (object store over the NIC), "storage" (the data
    # volume) or "memory" (fully cached; no input I/O).
    source: str = "storage"
    # Data volume (disk nvme1n1): "rdma" (NVMe over RDMA, with a storage RDMA port), "tcp", "pcie".
    volume_transport: str = "rdma"
    volume_iops_cap: float = 120_000.0
    volume_bytes_per_second_cap: float = 8e9
    volume_io_bytes: float = 131_072.0
    volume_latency_seconds: float = 0.0002
    rdma_rate_bytes_per_second: float = 200e9 / 8
    # A remote store that serves less than the link carries (a flat plateau below link speed).
    remote_store_bytes_per_second: float | None = None
    # -- the job --
    job: bool = True
    # The Slurm job id on the GPU processes; "": the node's own (``simulation.own_job_id``), so
    # unrelated simulated nodes never share one, or with a job key the job's.
    job_id: str = ""
    # A job that spans nodes: its key (``JobRef.job_key``, the same on every node of the job, e.g.
    # "torch/run-1"; "" for none), its nodes and this node's rank among them. With a key, each GPU
    # process carries it with its global rank (node rank x GPUs + local rank) and the report one
    # ``JobSample``, as a real node's agent sends them (``agent/gpu/job_samples.py``).
    job_key: str = ""
    job_nodes: int = 1
    job_node_rank: int = 0
    # The Slurm account the job's processes are charged to (``JobRef.account``, as the agent reads
    # ``SLURM_JOB_ACCOUNT``); "": with a job key, the key's name up to its first "-"
    # (``simulation.own_account``: torch/clip-4node is charged to "clip"), without one none.
    job_account: str = ""
    # Training samples one GPU consumes per second when nothing else limits it (A800 speed;
    # scaled by the profile's relative speed).
    gpu_samples_per_second: float = 3472.2
    sample_bytes: float = 79_800.0
    # Bytes per sample copied host -> device (a decoded 224x224 RGB image).
    decoded_sample_bytes: float = 150_528.0
    # Collective traffic per sample, per GPU and direction (ring all-reduce of the gradients).
    collective_bytes_per_sample: float = 1.6937e6
    # Share of the link bandwidth a collective / a host-to-device copy achieves.
    collective_efficiency_ratio: float = 0.8
    h2d_efficiency_ratio: float = 0.8
    page_cache_hit_ratio: float = 0.0
    # Cores running loader workers; 0: the loader runs in each rank's main thread.
    loader_cores: int = 48
    samples_per_core_second: float = 641.03
    # A limit of the input pipeline itself (a lock, a slow library): nothing saturates.
    loader_cap_samples_per_second: float | None = None
    model_memory_bytes: float = 62e9
    # Below 1: clocks held down (thermal or power slowdown) to this share.
    clock_ratio: float = 1.0
    # -- time --
    # None: the job was already running when the simulation started (no warmup); else the GPUs
    # are unassigned until then and the job loads its model for ``warmup_seconds``.
    job_start_seconds: float | None = None
    warmup_seconds: float = 90.0
    # Input cost per sample before ``onset_seconds`` and from ``recovery_seconds`` on, as a share
    # of the scenario's (page cache hits, smaller samples): how a bottleneck appears mid-job.
    onset_seconds: float | None = None
    recovery_seconds: float | None = None
    pre_onset_load_ratio: float = 0.3
    checkpoint_every_seconds: float | None = None
    checkpoint_seconds: float = 20.0
    checkpoint_bytes: float = 30e9
    epoch_every_seconds: float | None = None
    epoch_gap_seconds: float = 25.0
    # A faulty GPU: ``xid_gpu`` raises Xid ``xid_code`` every ``xid_every_seconds`` of the run (the
    # first one that far in), each an ``xid`` event in the report as the agent's event thread sends
    # it, with ``xid_severity`` ("critical" for the Xids in the agent's CRITICAL_XIDS, such as 79).
    xid_every_seconds: float | None = None
    xid_code: int = 13
    xid_gpu: int = 0
    xid_severity: str = "warning"
    # -- noise (standard deviations) --
    util_noise_ratio: float = 0.01
    step_noise_ratio: float = 0.01
    rate_noise_ratio: float = 0.02
    # Per-core CPU times go out this often (they are most of a report's bytes).
    core_times_every_seconds: float = 30.0

    def replace(self, overrides: Mapping[str, Any]) -> Params:
        known = {f.name: f for f in dataclasses.fields(self)}
        for key, value in overrides.items():
            if key not in known:
                raise ScenarioError(f"unknown simulator parameter {key!r} (known: {', '.join(known)})")
            current = getattr(self, key)
            if current is not None and value is not None and not _same_kind(current, value):
                raise ScenarioError(f"simulator parameter {key}: expected {type(current).__name__}, got {value!r}")
        out = dataclasses.replace(self, **overrides)
        out.check()
        return out

    def check(self) -> None:
        if self.gpu_profile not in PROFILES:
            raise ScenarioError(f"gpu_profile {self.gpu_profile!r} (known: {', '.join(PROFILES)})")
        if self.interconnect not in ("nvlink", "pcie"):
            raise ScenarioError(f"interconnect must be nvlink or pcie, got {self.interconnect!r}")
        if self.interconnect == "nvlink" and not PROFILES[self.gpu_profile].nvlink_count:
            raise ScenarioError(f"interconnect nvlink: {self.gpu_profile} has no NVLink")
        if self.source not in ("network", "storage", "memory"):
            raise ScenarioError(f"source must be network, storage or memory, got {self.source!r}")
        if self.volume_transport not in ("rdma", "tcp", "pcie"):
            raise ScenarioError(f"volume_transport must be rdma, tcp or pcie, got {self.volume_transport!r}")
        if self.cpu_count < 1 or self.loader_cores < 0 or self.loader_cores > self.cpu_count:
            raise ScenarioError(f"need 0 <= loader_cores ({self.loader_cores}) <= cpu_count ({self.cpu_count})")
        if not 0 < self.clock_ratio <= 1 or not 0 <= self.page_cache_hit_ratio < 1:
            raise ScenarioError("clock_ratio must be in (0, 1], page_cache_hit_ratio in [0, 1)")
        _check_job_names(self)
        if not 0 <= self.job_node_rank < self.job_nodes:
            raise ScenarioError(f"need 0 <= job_node_rank ({self.job_node_rank}) < job_nodes ({self.job_nodes})")
        if self.xid_every_seconds is not None and not self.xid_every_seconds > 0:
            raise ScenarioError(f"xid_every_seconds must be above 0, got {self.xid_every_seconds!r}")
        if self.xid_code < 0 or self.xid_gpu < 0:
            raise ScenarioError("xid_code and xid_gpu must not be negative")
        if self.xid_severity not in ("warning", "critical"):
            raise ScenarioError(f"xid_severity must be warning or critical, got {self.xid_severity!r}")


def _check_job_names(params: Params) -> None:
    # The wire's bound on a job key; the agent's on a name it reads from the environment.
    for name, most in (("job_key", 256), ("job_id", 256), ("job_account", 200)):
        value = getattr(params, name)
        if len(value) > most or not value.isprintable():
            raise ScenarioError(f"{name} must be printable and at most {most} characters, got {value!r}")


def _same_kind(current: object, value: object) -> bool:
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(current, bool) and isinstance(value, bool)
    if isinstance(current, float):
        return isinstance(value, int | float)
    return isinstance(value, type(current))


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    description: str
    params: Params


_HEALTHY = Params()


def _scenario(name: str, description: str, **changes: Any) -> tuple[str, Scenario]:
    return name, Scenario(name, description, _HEALTHY.replace(changes))


SCENARIOS: Final[Mapping[str, Scenario]] = MappingProxyType(
    dict(
        [
            _scenario("healthy", "8x A800-SXM4, NVLink, RDMA volume, enough loader cores: compute-bound"),
            _scenario(
                "ordinary-cloud",
                "10 Gbps public link, all-reduce over PCIe 4.0: network-starved 38/112, sync waiting 14/112",
                gpu_profile="a800-pcie",
                interconnect="pcie",
                source="network",
                nic_speed_bytes_per_second=10e9 / 8,
                volume_transport="pcie",
                rdma_rate_bytes_per_second=0.0,
                loader_cores=40,
            ),
            _scenario(
                "fast-cloud",
                "50 Gbps, NVLink, RDMA volume at 8 GB/s and 120k IOPS: 3/65 waiting for data, 2/65 for sync",
                loader_cores=40,
                collective_efficiency_ratio=0.882,
            ),
            _scenario(
                "storage-bound",
                "data volume at its IOPS cap with small files (NVMe/TCP cloud disk, 80k IOPS, 16 KiB reads)",
                volume_transport="tcp",
                volume_iops_cap=80_000.0,
                volume_bytes_per_second_cap=2e9,
                volume_io_bytes=16_384.0,
                volume_latency_seconds=0.0005,
                rdma_rate_bytes_per_second=0.0,
            ),
            _scenario(
                "cpu-bound",
                "too few cores per GPU: 32 cores, 24 of them decoding, all busy",
                cpu_count=32,
                loader_cores=24,
            ),
            _scenario(
                "single-threaded-loader",
                "the loader runs in each rank's main thread (num_workers=0): 8 cores saturated, the rest idle",
                loader_cores=0,
            ),
            _scenario(
                "h2d-bound",
                "large decoded samples (video clips): host-to-device copies fill the PCIe links",
                decoded_sample_bytes=10.4e6,
            ),
            _scenario(
                "interconnect-bound",
                "all-reduce of a large model over PCIe 4.0 while data arrives in time",
                gpu_profile="a800-pcie",
                interconnect="pcie",
                collective_bytes_per_sample=3.11e6,
            ),
            _scenario(
                "thermal-throttled",
                "clocks held at 70% by thermal slowdown (hot inlet air): busy but slow",
                clock_ratio=0.7,
            ),
            _scenario("idle", "no job: GPUs unassigned, links quiet", job=False),
            _scenario(
                "job-start",
                "idle for a minute, then a job loads its model for 90 s and trains",
                job_start_seconds=60.0,
            ),
            _scenario(
                "checkpoint-bursts",
                "healthy job writing a 30 GB checkpoint every 5 minutes (GPUs idle for 20 s)",
                checkpoint_every_seconds=300.0,
            ),
            _scenario(
                "epoch-boundaries",
                "healthy job with a 25 s pause at each epoch boundary, every 7 minutes",
                epoch_every_seconds=420.0,
            ),
            _scenario(
                "xid-errors",
                "healthy job, but GPU 0 raises Xid 13 (graphics engine exception) every 10 s: XIDError fires",
                xid_every_seconds=10.0,
            ),
            _scenario(
                "software-bound",
                "the input pipeline is slow by itself (a lock in the loader): starved with nothing saturated",
                loader_cap_samples_per_second=18_000.0,
            ),
        ]
    )
)


def parse_overrides(texts: Iterable[str]) -> dict[str, Any]:
    """``NAME=VALUE`` texts (``--set``) as overrides: a value as JSON when it reads as JSON
    (numbers, true, null), else as text. The names and kinds are checked by ``Params.replace``."""
    out: dict[str, Any] = {}
    for text in texts:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise ScenarioError(f"{text!r}: expected NAME=VALUE")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def find_scenario(name: str) -> Scenario:
    try:
        return SCENARIOS[name]
    except KeyError:
        raise UnknownScenarioError(name) from None
