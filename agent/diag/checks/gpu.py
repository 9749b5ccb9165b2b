"""GPU checks: NVML and the driver, how many GPUs and which, lost GPUs, memory errors (ECC, row
remapping, page retirement), Xids, temperature and slowdowns, the PCIe link, and readings that
contradict the rest of the GPU.

Without NVML the missing driver is a failure: a node whose GPUs could not be checked is not
healthy for a GPU job. Only where no GPUs are expected (``--no-gpu``, ``--expect-gpus 0``, a
profile with ``[gpu] count = 0``) do the GPU checks pass the driver and skip the rest.
"""

from __future__ import annotations

from nodeagent.agent.diag.checks import gpu_pcie, gpu_readings, xid
from nodeagent.agent.diag.checks.context import DiagContext
from nodeagent.agent.diag.model import (
    NODE,
    CheckResult,
    failed,
    group,
    passed,
    plural,
    skipped,
    summarize,
    warned,
)
from nodeagent.v1 import nodeagent_pb2 as pb

# Every check of this area, including those of the other GPU modules, for skipping them all.
GPU_CHECKS = (
    "gpu.count", "gpu.model", "gpu.lost", "gpu.responsive", "gpu.ecc", "gpu.remapped_rows", "gpu.retired_pages",
    "gpu.xid", "gpu.temperature", "gpu.throttle", "gpu.pcie_link", "gpu.pcie_replay",
    "gpu.readings", "nvlink.links", "nvlink.speed", "nvlink.errors", "fabric.state", "fabric.health", "fabric.clique",
)  # fmt: skip
# Clock-event reasons that mean heat or power is slowing the GPU. sw_power_cap is left out: a
# busy GPU sits at its power cap by design.
SLOWDOWN_REASONS = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_thermal_slowdown")
# NVIDIA's guidance: a GPU with this many retired pages is due for replacement.
RETIRED_PAGES_RMA = 60


def run(ctx: DiagContext) -> list[CheckResult]:
    topology = ctx.observation.info.gpu
    expected = ctx.profile.gpu.count
    if topology.unavailable_reason:
        return _without_nvml(topology.unavailable_reason, expected)
    gpus = _Gpus(ctx)
    results = [_driver(topology), *_count(gpus, expected), *_model(gpus, ctx.profile.gpu.model), *_lost(gpus)]
    results += _responsive(gpus)
    results += xid.check(ctx, gpus.info)  # the kernel log also speaks of GPUs lost since
    if not gpus.alive:
        return results
    results += _ecc(gpus)
    results += _remapped_rows(gpus)
    results += _retired_pages(gpus)
    results += _temperature(gpus, ctx.profile.gpu.max_temperature_celsius)
    results += _throttle(gpus)
    results += gpu_pcie.link(gpus.alive, ctx.observation.gpu_extras)
    results += gpu_pcie.replays(gpus.alive, ctx.observation, ctx.profile.gpu.max_pcie_replays)
    results += gpu_readings.check(gpus.alive, ctx.observation)
    return results


class _Gpus:
    """The GPUs NVML listed, and the last sample of each."""

    __slots__ = ("alive", "extras", "info", "lost", "unresponsive")

    def __init__(self, ctx: DiagContext) -> None:
        self.extras = ctx.observation.gpu_extras
        self.info = {g.index: g for g in ctx.observation.info.gpu.gpus}
        samples = {g.index: g for g in ctx.observation.last.gpus}
        self.lost = [i for i in self.info if i not in samples or samples[i].lost]
        # A GPU past the agent's deadlines: its own failure, and no readings for the other checks.
        self.unresponsive = [samples[i] for i in self.info if i not in self.lost and samples[i].unresponsive]
        gone = {*self.lost, *(g.index for g in self.unresponsive)}
        self.alive = [samples[i] for i in self.info if i not in gone]

    @property
    def label(self) -> str:
        return group([f"gpu:{g.index}" for g in self.alive], "GPU")


def _without_nvml(reason: str, expected: int | None) -> list[CheckResult]:
    if expected == 0:
        return [passed("nvml.driver", NODE, f"none ({reason})", "no GPUs")] + [
            skipped(check, NODE, "no GPUs expected") for check in GPU_CHECKS
        ]
    if expected:
        return [
            failed(
                "nvml.driver", NODE, reason, f"{expected} GPUs",
                "install or load the NVIDIA driver: `nvidia-smi` must list the GPUs",
            )
        ]  # fmt: skip
    return [
        failed(
            "nvml.driver", NODE, reason, "the NVIDIA driver",
            "the GPU checks could not run: install or load the NVIDIA driver; on a node without GPUs "
            "pass --no-gpu (or a profile with [gpu] count = 0)",
        )
    ] + [skipped(check, NODE, f"no GPUs to check: {reason}") for check in GPU_CHECKS]  # fmt: skip


def _driver(topology: pb.GpuTopology) -> CheckResult:
    value = f"driver {topology.driver_version or '?'}"
    if topology.HasField("cuda_driver_version"):
        cuda = topology.cuda_driver_version
        value += f", CUDA {cuda // 1000}.{cuda % 1000 // 10}"
    return passed("nvml.driver", NODE, value)


def _count(gpus: _Gpus, expected: int | None) -> list[CheckResult]:
    usable = len(gpus.alive)
    value = plural(usable, "GPU") + (f" (+{len(gpus.lost)} lost)" if gpus.lost else "")
    value += f" (+{len(gpus.unresponsive)} unresponsive)" if gpus.unresponsive else ""
    if expected is None:
        if not gpus.info:
            return [
                warned("gpu.count", NODE, "0 GPUs", "", "the driver is loaded but lists no GPU: check `nvidia-smi`")
            ]
        return [skipped("gpu.count", NODE, "no expected count (--expect-gpus or a profile)", value)]
    if usable < expected:
        hint = (
            "fewer GPUs than rented: check `nvidia-smi`, `lspci | grep -i nvidia` and the kernel log "
            "(Xid 79: fallen off the bus); drain the node"
        )
        return [failed("gpu.count", NODE, value, str(expected), hint)]
    if usable > expected:
        return [
            warned("gpu.count", NODE, value, str(expected), "more GPUs than the profile says: is it the right one?")
        ]
    return [passed("gpu.count", NODE, value, str(expected))]


def _responsive(gpus: _Gpus) -> list[CheckResult]:
    """Each GPU answered NVML within the agent's deadlines ([gpu_deadlines]: a call, a tick)."""
    hint = (
        "the GPU or its driver is failing (calls that take seconds or never return): check the kernel "
        "log for Xid 79 and GSP errors, drain the node, then reset or replace the GPU"
    )
    problems = [
        failed("gpu.responsive", f"gpu:{g.index}", f"did not answer {g.unresponsive_call}", "answers NVML", hint)
        for g in gpus.unresponsive
    ]
    answering = plural(len(gpus.alive), "GPU")
    return summarize("gpu.responsive", answering, problems, f"{answering} answer", "answers NVML")


def _model(gpus: _Gpus, model: str | None) -> list[CheckResult]:
    names = sorted({g.name for g in gpus.info.values() if g.name})
    shown = ", ".join(names) or "unknown"
    if model is None:
        return [skipped("gpu.model", NODE, "no expected model (a profile's [gpu] model)", shown)]
    problems = [
        failed("gpu.model", f"gpu:{g.index}", g.name or "unknown", f"*{model}*", "not the GPU model rented")
        for g in gpus.info.values()
        if model.lower() not in g.name.lower()
    ]
    return summarize("gpu.model", plural(len(gpus.info), "GPU"), problems, shown, f"*{model}*")


def _lost(gpus: _Gpus) -> list[CheckResult]:
    hint = (
        "the GPU fell off the bus: look for Xid 79 in the kernel log, reset it (`nvidia-smi -r`) "
        "or reboot; drain the node meanwhile"
    )
    problems = [failed("gpu.lost", f"gpu:{i}", "lost (NVML: GPU is lost)", "reachable", hint) for i in gpus.lost]
    return summarize("gpu.lost", plural(len(gpus.info), "GPU"), problems, "all reachable")


def _ecc(gpus: _Gpus) -> list[CheckResult]:
    problems: list[CheckResult] = []
    unknown = 0
    for g in gpus.alive:
        volatile = g.ecc_uncorrected_volatile_total if g.HasField("ecc_uncorrected_volatile_total") else None
        lifetime = g.ecc_uncorrected_aggregate_total if g.HasField("ecc_uncorrected_aggregate_total") else None
        if volatile is None and lifetime is None:
            unknown += 1
        elif volatile:
            value = f"{volatile} uncorrectable since boot ({lifetime or volatile} in its lifetime)"
            hint = "uncorrectable memory errors: drain, reset the GPU so rows get remapped; replace it if they return"
            problems.append(failed("gpu.ecc", f"gpu:{g.index}", value, "0", hint))
        elif lifetime:
            value = f"{lifetime} uncorrectable in its lifetime, 0 since boot"
            hint = "past uncorrectable errors (handled by row remapping or page retirement): watch for new ones"
            problems.append(warned("gpu.ecc", f"gpu:{g.index}", value, "0", hint))
    if unknown == len(gpus.alive):
        return [skipped("gpu.ecc", gpus.label, "ECC counters not available (ECC off or not supported)")]
    return summarize("gpu.ecc", gpus.label, problems, "no uncorrectable errors", "0")


def _remapped_rows(gpus: _Gpus) -> list[CheckResult]:
    problems: list[CheckResult] = []
    known = 0
    for g in gpus.alive:
        if not g.HasField("remapped_rows_pending") and not g.HasField("remapped_rows_failure"):
            continue
        known += 1
        subject = f"gpu:{g.index}"
        if g.remapped_rows_failure:
            hint = "the GPU has no spare rows left for failing memory: replace it"
            problems.append(failed("gpu.remapped_rows", subject, "remapping failed", "no failure", hint))
        elif g.remapped_rows_pending:
            hint = "a row waits to be remapped: reset the GPU (`nvidia-smi -r`) or reboot to apply it"
            problems.append(warned("gpu.remapped_rows", subject, "remapping pending", "none pending", hint))
    if not known:
        return [
            skipped(
                "gpu.remapped_rows",
                gpus.label,
                "not supported on these GPUs (row remapping: data-center GPUs since Ampere)",
            )
        ]
    return summarize("gpu.remapped_rows", gpus.label, problems, "none pending or failed")


def _retired_pages(gpus: _Gpus) -> list[CheckResult]:
    problems: list[CheckResult] = []
    known = 0
    for g in gpus.alive:
        extra = gpus.extras.get(g.index)
        if extra is None or (extra.retired_single_bit_total is None and extra.retired_double_bit_total is None):
            continue
        known += 1
        total = (extra.retired_single_bit_total or 0) + (extra.retired_double_bit_total or 0)
        value = f"{total} retired ({extra.retired_double_bit_total or 0} after double-bit errors)"
        if total >= RETIRED_PAGES_RMA:
            hint = f"{RETIRED_PAGES_RMA} or more retired pages: the GPU is due for replacement"
            problems.append(failed("gpu.retired_pages", f"gpu:{g.index}", value, f"< {RETIRED_PAGES_RMA}", hint))
        elif extra.retired_pending:
            hint = "pages wait to be retired: reboot (or reset the GPU) to retire them"
            problems.append(warned("gpu.retired_pages", f"gpu:{g.index}", value + ", pending", "none pending", hint))
    if not known:
        return [
            skipped(
                "gpu.retired_pages",
                gpus.label,
                "not supported on these GPUs (page retirement: data-center GPUs before Ampere)",
            )
        ]
    return summarize("gpu.retired_pages", gpus.label, problems, "none pending", f"< {RETIRED_PAGES_RMA}")


def _temperature(gpus: _Gpus, limit: float) -> list[CheckResult]:
    readings = [(g.index, g.temperature_celsius) for g in gpus.alive if g.HasField("temperature_celsius")]
    if not readings:
        return [skipped("gpu.temperature", gpus.label, "temperature not available")]
    hint = "the GPU runs hot and will slow down: check airflow, fans and the room"
    problems = [
        warned("gpu.temperature", f"gpu:{i}", f"{t:.0f} °C", f"≤ {limit:.0f} °C", hint)
        for i, t in readings
        if t > limit
    ]
    hottest = max(readings, key=lambda r: r[1])
    return summarize(
        "gpu.temperature", gpus.label, problems, f"hottest {hottest[1]:.0f} °C (gpu:{hottest[0]})", f"≤ {limit:.0f} °C"
    )


def _throttle(gpus: _Gpus) -> list[CheckResult]:
    hint = "heat or power is slowing the GPU (clocks cut): check cooling, power supplies and power capping"
    problems = []
    for g in gpus.alive:
        active = [r for r in g.clock_event_reason_names if r in SLOWDOWN_REASONS]
        if active:
            problems.append(warned("gpu.throttle", f"gpu:{g.index}", ", ".join(active), "none", hint))
    return summarize("gpu.throttle", gpus.label, problems, "no thermal or power slowdown", "none")
