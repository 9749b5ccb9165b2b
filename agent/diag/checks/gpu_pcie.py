"""The GPUs' PCIe links: trained width and generation against what the GPU and slot support, and
the replay counter (link-level retransmissions).

GPUs drop their link generation when idle to save power (Gen1 at idle is normal), so a low
current generation alone never fails; a narrow link does, since the width does not change with
load: a GPU at x8 moves host-to-device data at half speed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from nodeagent.agent.diag.model import CheckResult, failed, plural, skipped, summarize, warned
from nodeagent.agent.diag.observe import GpuExtras, Observation
from nodeagent.core.quantities.rates import delta
from nodeagent.v1 import nodeagent_pb2 as pb

# Above this a GPU is busy, and its link should be at full generation.
BUSY_RATIO = 0.5


def link(gpus: Sequence[pb.GpuSample], extras: Mapping[int, GpuExtras]) -> list[CheckResult]:
    group = plural(len(gpus), "GPU")
    problems: list[CheckResult] = []
    shapes: set[str] = set()
    known = 0
    for g in gpus:
        if not (g.HasField("pcie_link_width") and g.HasField("pcie_max_link_width")):
            continue
        known += 1
        subject = f"gpu:{g.index}"
        gen, width = g.pcie_link_generation, g.pcie_link_width
        max_gen, max_width = g.pcie_max_link_generation, g.pcie_max_link_width
        gpu_gen = getattr(extras.get(g.index), "gpu_max_pcie_generation", None)
        current = f"Gen{gen} x{width}"
        shapes.add(f"Gen{max_gen} x{max_width}")
        if width < max_width:
            hint = (
                "the link trained narrower than the GPU: reseat the GPU or its riser, check the slot; "
                "host-to-device copies run at a fraction of their speed"
            )
            problems.append(failed("gpu.pcie_link", subject, current, f"x{max_width}", hint))
        elif gpu_gen is not None and max_gen < gpu_gen:
            hint = (
                "the slot or the BIOS caps the PCIe generation below the GPU's: check the BIOS PCIe setting and riser"
            )
            value = f"slot allows Gen{max_gen}"
            problems.append(warned("gpu.pcie_link", subject, value, f"Gen{gpu_gen} (the GPU's)", hint))
        elif gen < max_gen and g.utilization_gpu_ratio >= BUSY_RATIO:
            hint = "a busy GPU below its link generation: check `nvidia-smi -q -d PCIE` under load, the riser, the slot"
            value = f"{current} while {g.utilization_gpu_ratio:.0%} busy"
            problems.append(warned("gpu.pcie_link", subject, value, f"Gen{max_gen}", hint))
    if not known:
        return [skipped("gpu.pcie_link", group, "PCIe link not reported")]
    shape = ", ".join(sorted(shapes))
    return summarize(
        "gpu.pcie_link", group, problems, f"{shape} (the generation drops at idle)", f"x{_max_width(gpus)}"
    )


def replays(gpus: Sequence[pb.GpuSample], observation: Observation, limit: int) -> list[CheckResult]:
    group = plural(len(gpus), "GPU")
    problems: list[CheckResult] = []
    totals = []
    for g in gpus:
        if not g.HasField("pcie_replay_total"):
            continue
        totals.append(g.pcie_replay_total)
        before = observation.first_gpu(g.index)
        earlier = before.pcie_replay_total if before and before.HasField("pcie_replay_total") else None
        grown = delta(earlier, g.pcie_replay_total) or 0
        subject = f"gpu:{g.index}"
        hint = (
            "PCIe retransmissions: a marginal link (riser, slot, signal); reseat or move the GPU if they keep growing"
        )
        if grown > 0:
            value = f"+{grown} during the {observation.window_seconds:.1f} s check ({g.pcie_replay_total} since boot)"
            problems.append(warned("gpu.pcie_replay", subject, value, "no growth", hint))
        elif g.pcie_replay_total > limit:
            problems.append(warned("gpu.pcie_replay", subject, f"{g.pcie_replay_total} since boot", f"≤ {limit}", hint))
    if not totals:
        return [skipped("gpu.pcie_replay", group, "PCIe replay counter not reported")]
    return summarize("gpu.pcie_replay", group, problems, f"at most {max(totals)} since boot", f"≤ {limit}")


def _max_width(gpus: Sequence[pb.GpuSample]) -> int:
    return max((g.pcie_max_link_width for g in gpus), default=0)
