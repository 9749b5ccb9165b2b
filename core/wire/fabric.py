"""The NVLink fabric as NVML states it (``nvmlGpuFabricInfo``): state names, the health mask's
parts, and what makes a GPU's fabric unusable. One reading for the agent (its report, health
events, diag) and the collector (its alert), as ``clock_events.py`` is for clock-event reasons.

A GPU on an NVSwitch system (HGX H100/B200, GB200/GB300 NVL72) registers with the fabric manager
at boot; until its state is ``completed`` with status 0 it cannot reach its peers over NVLink.
The health mask packs 2-bit parts (0 not supported, 1 true, 2 false) and a 4-bit configuration
reason; nvml.h's ``NVML_GPU_FABRIC_HEALTH_MASK_*``.
"""

from __future__ import annotations

from typing import Final

from nodeagent.v1 import nodeagent_pb2 as pb

STATES: Final = {1: "not_started", 2: "in_progress", 3: "completed"}
COMPLETED: Final = "completed"
SUMMARIES: Final = {1: "healthy", 2: "unhealthy", 3: "limited_capacity"}
# (GpuFabric field, the part's shift in the mask): 2-bit parts, 1 true, 2 false.
HEALTH_PARTS: Final = (
    ("degraded_bandwidth", 0),
    ("route_recovery", 2),
    ("route_unhealthy", 4),
    ("access_timeout_recovery", 6),
)
_CONFIGURATION_SHIFT: Final = 8  # 4 bits: 0 not supported, 1 none (correct), 2.. the reason
CONFIGURATION_REASONS: Final = {
    2: "incorrect_sysguid",
    3: "incorrect_chassis_serial",
    4: "no_partition",
    5: "insufficient_nvlinks",
    6: "incompatible_gpu_firmware",
    7: "invalid_location",
    8: "gpu_state_invalid",
}
# What the GPU's fabric failing means, worst first: a GPU with any of these cannot be trusted
# to reach its peers at the bandwidth rented (diag fails, the collector alerts).
PROBLEMS: Final = (
    "not_registered", "registration_failed", "route_unhealthy", "unhealthy", "incorrect_configuration",
    "degraded_bandwidth", "limited_capacity",
)  # fmt: skip
# Passing states: the fabric manager is repairing a route or an access timeout.
TRANSIENT: Final = ("route_recovery", "access_timeout_recovery")


def fabric_message(
    state: int, status: int, cluster_uuid: str, clique_id: int, health_mask: int | None, summary: int | None
) -> pb.GpuFabric:
    """The report's GpuFabric from nvmlGpuFabricInfo's fields."""
    out = pb.GpuFabric(
        state=STATES.get(state, str(state)), status=status, cluster_uuid=cluster_uuid, clique_id=clique_id
    )
    if health_mask is not None:
        out.health_mask = health_mask
        for name, shift in HEALTH_PARTS:
            part = (health_mask >> shift) & 0x3
            if part in (1, 2):
                setattr(out, name, part == 1)
        reason = (health_mask >> _CONFIGURATION_SHIFT) & 0xF
        if reason >= 2:
            out.incorrect_configuration = CONFIGURATION_REASONS.get(reason, str(reason))
    if summary:
        out.health_summary = SUMMARIES.get(summary, str(summary))
    return out


def fabric_problems(fabric: pb.GpuFabric) -> list[str]:
    """What is wrong with the GPU's place in the fabric, worst first; [] when it is usable."""
    if fabric.state != COMPLETED:
        return ["not_registered"]
    out = []
    if fabric.status:
        out.append("registration_failed")
    if fabric.route_unhealthy:
        out.append("route_unhealthy")
    if fabric.health_summary == "unhealthy":
        out.append("unhealthy")
    if fabric.incorrect_configuration:
        out.append("incorrect_configuration")
    if fabric.degraded_bandwidth:
        out.append("degraded_bandwidth")
    if fabric.health_summary == "limited_capacity":
        out.append("limited_capacity")
    return out


def fabric_transients(fabric: pb.GpuFabric) -> list[str]:
    """Repairs the fabric manager has under way for the GPU (route or access-timeout recovery)."""
    return [name for name in TRANSIENT if getattr(fabric, name)]


def describe(fabric: pb.GpuFabric) -> str:
    """One line a person reads: ``completed, clique 32766 of cluster 7c9e...``, or the problems."""
    where = f"clique {fabric.clique_id}" + (f" of cluster {fabric.cluster_uuid}" if fabric.cluster_uuid else "")
    problems = fabric_problems(fabric)
    if not problems:
        return f"{fabric.state}, {where}"
    if problems == ["not_registered"]:
        return f"not registered with the fabric manager (state {fabric.state or 'unknown'})"
    detail = ", ".join(problems)
    if "registration_failed" in problems:
        detail += f" (NVML status {fabric.status})"
    if "incorrect_configuration" in problems:
        detail += f" ({fabric.incorrect_configuration})"
    return f"{detail}; {where}"
