"""The host around the GPUs: CPU cores per GPU (data loading, decoding and augmentation run on
them, several per GPU) and memory (pinned staging buffers, the page cache that holds the
dataset, checkpoints loaded before they reach the GPUs)."""

from __future__ import annotations

from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import NODE, CheckResult, failed, passed, skipped, warned

_GIB = 1024**3


def run(ctx: DiagContext) -> list[CheckResult]:
    return [_cores_per_gpu(ctx), _memory(ctx)]


def _usable_gpus(ctx: DiagContext) -> int:
    return sum(1 for g in ctx.observation.last.gpus if not g.lost)


def _cores_per_gpu(ctx: DiagContext) -> CheckResult:
    cores = ctx.observation.info.cpu_count
    gpus = _usable_gpus(ctx)
    floor = ctx.profile.host.min_cpu_cores_per_gpu
    if not gpus:
        return skipped("host.cpu_per_gpu", NODE, "no GPUs", f"{cores} cores")
    if not cores:
        return skipped("host.cpu_per_gpu", NODE, "CPU count not readable")
    ratio = cores / gpus
    value = f"{ratio:.1f} cores per GPU ({cores} cores, {gpus} GPUs)"
    want = f"≥ {floor:g}"
    if ratio < floor:
        hint = "too few cores to pre-process data for every GPU: input pipelines will starve them"
        return warned("host.cpu_per_gpu", NODE, value, want, hint)
    return passed("host.cpu_per_gpu", NODE, value, want)


def _memory(ctx: DiagContext) -> CheckResult:
    total = ctx.observation.info.memory_total_bytes
    if not total:
        return skipped("host.memory", NODE, "memory size not readable")
    value = f"{total / _GIB:.0f} GiB"
    minimum = ctx.profile.host.min_memory_bytes
    if minimum is not None:
        want = f"≥ {minimum / _GIB:.0f} GiB"
        if total < minimum:
            hint = "less memory than rented: check `free -g`, the DIMMs (`dmidecode -t memory`), the rental"
            return failed("host.memory", NODE, value, want, hint)
        return passed("host.memory", NODE, value, want)
    gpu_memory = sum(g.memory_total_bytes for g in ctx.observation.info.gpu.gpus)
    if not gpu_memory:
        profile = ctx.profile.name
        missing = (
            f"profile {profile} sets no [host] min_memory_gib" if profile else "no profile with [host] min_memory_gib"
        )
        return skipped("host.memory", NODE, f"no expected size: {missing}", value)
    want = f"≥ {gpu_memory / _GIB:.0f} GiB (the GPUs' memory)"
    if total < gpu_memory:
        hint = "less host memory than GPU memory: checkpoint loading and pinned buffers will swap or fail"
        return warned("host.memory", NODE, value, want, hint)
    return passed("host.memory", NODE, value, want)
