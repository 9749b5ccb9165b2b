"""What diag looks at: two samples of every source a short window apart (so counters that grow
while it watches show), plus the few GPU facts only a health check needs.

The samples come from the agent's own ``Sampler`` and sources, so diag sees exactly what
``nodeagent sample`` and the daemon see; the extra GPU facts are read through ``agent/gpu/nvml_gpu.py``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from nodeagent.agent.config import GpuDeadlines
from nodeagent.agent.gpu import fields as gpu_fields
from nodeagent.agent.gpu.deadlines import GpuReaders, Overrun
from nodeagent.agent.gpu.nvml_gpu import Gpu
from nodeagent.agent.kernel.files import raise_open_file_limit
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots, enabled_names
from nodeagent.v1 import nodeagent_pb2 as pb


@dataclass(frozen=True, slots=True)
class GpuExtras:
    """Per GPU, what the sampler does not read every tick (``nvidia-smi --query-gpu=`` names)."""

    index: int
    gpu_max_pcie_generation: int | None  # pcie.link.gen.gpumax
    retired_single_bit_total: int | None  # retired_pages.single_bit_ecc.count
    retired_double_bit_total: int | None  # retired_pages.double_bit.count
    retired_pending: bool | None  # retired_pages.pending
    remapped_correctable_total: int | None  # remapped_rows.correctable
    remapped_uncorrectable_total: int | None  # remapped_rows.uncorrectable
    nvlink_speeds_bytes_per_second: tuple[float | None, ...]  # per link, one direction; 0 when down


@dataclass(frozen=True, slots=True)
class Observation:
    info: pb.NodeInfo
    first: pb.NodeReport
    last: pb.NodeReport
    window_seconds: float
    gpu_extras: dict[int, GpuExtras]

    @property
    def events(self) -> list[pb.Event]:
        return [*self.first.events, *self.last.events]

    def first_gpu(self, index: int) -> pb.GpuSample | None:
        return next((g for g in self.first.gpus if g.index == index), None)


def observe(
    roots: Roots,
    window_seconds: float,
    meanwhile: Callable[[], None] = lambda: None,
    node_id: str | None = None,
) -> Observation:
    """Two ticks of every default source, ``window_seconds`` apart; ``meanwhile`` runs in
    between (its time counts towards the window)."""
    raise_open_file_limit()
    sampler = Sampler(enabled_names({}), roots=roots, node_id=node_id)
    try:
        first = sampler.tick()
        started = time.monotonic()
        extras = _gpu_extras(sampler.info.gpu, first, sampler.ctx.config.gpu_deadlines)
        meanwhile()
        time.sleep(max(0.0, window_seconds - (time.monotonic() - started)))
        last = sampler.tick()
        window = last.time_unix_seconds - first.time_unix_seconds
        return Observation(info=sampler.info, first=first, last=last, window_seconds=window, gpu_extras=extras)
    finally:
        sampler.close()


_EXTRA_FIELDS = (
    gpu_fields.FI_RETIRED_SBE,
    gpu_fields.FI_RETIRED_DBE,
    gpu_fields.FI_RETIRED_PENDING,
    gpu_fields.FI_REMAPPED_COR,
    gpu_fields.FI_REMAPPED_UNC,
)


def _gpu_extras(topology: pb.GpuTopology, first: pb.NodeReport, deadlines: GpuDeadlines) -> dict[int, GpuExtras]:
    """One field-value call and one PCIe query per GPU, each GPU on its own thread within the tick's
    bound; nothing of a GPU that did not answer the first tick or does not now, nor without NVML."""
    if topology.unavailable_reason:
        return {}
    answered = {g.index for g in first.gpus if not g.unresponsive and not g.lost}
    readers = GpuReaders(deadlines)
    try:
        work = {info.index: partial(_extras_of, info) for info in topology.gpus if info.index in answered}
        got = readers.read(work, deadlines.tick_seconds, count=False)
    finally:
        readers.close()
    return {index: extras for index, extras in got.items() if extras is not None and not isinstance(extras, Overrun)}


def _extras_of(info: pb.GpuInfo) -> GpuExtras | None:
    gpu = Gpu.open(info.index)
    if gpu is None or gpu.lost:
        return None
    links = info.nvlink_count
    requests = [(f, 0) for f in _EXTRA_FIELDS] + gpu_fields.link_speed_requests(links)
    values = gpu.field_values(requests)

    def get(field: int, scope: int = 0, values: dict[tuple[int, int], int | float] = values) -> int | None:
        value = values.get((field, scope))
        return None if value is None else int(value)

    pending = get(gpu_fields.FI_RETIRED_PENDING)
    speeds = tuple(get(gpu_fields.FI_NVLINK_GET_SPEED, link) for link in range(links))
    return GpuExtras(
        index=info.index,
        gpu_max_pcie_generation=gpu.gpu_max_pcie_generation(),
        retired_single_bit_total=get(gpu_fields.FI_RETIRED_SBE),
        retired_double_bit_total=get(gpu_fields.FI_RETIRED_DBE),
        retired_pending=None if pending is None else bool(pending),
        remapped_correctable_total=get(gpu_fields.FI_REMAPPED_COR),
        remapped_uncorrectable_total=get(gpu_fields.FI_REMAPPED_UNC),
        nvlink_speeds_bytes_per_second=tuple(None if s is None else s * 1e6 for s in speeds),
    )
