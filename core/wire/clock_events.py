"""The clock-event reason bits of a GPU (``nvmlClocksEventReason*``) and the names a report carries.

The agent turns NVML's mask into ``GpuSample.clock_event_reason_names``; the collector's detector
and alert config read the names (and their bits) back. Named as nvidia-smi's
``clocks_event_reasons.*``.
"""

from __future__ import annotations

from typing import Final

CLOCK_EVENT_REASONS: Final = (
    (0x001, "gpu_idle"),
    (0x002, "applications_clocks_setting"),
    (0x004, "sw_power_cap"),
    (0x008, "hw_slowdown"),
    (0x010, "sync_boost"),
    (0x020, "sw_thermal_slowdown"),
    (0x040, "hw_thermal_slowdown"),
    (0x080, "hw_power_brake_slowdown"),
    (0x100, "display_clock_setting"),
    (0x200, "board_limit"),
    (0x400, "reliability"),
)
# Reasons that mean the GPU is slowed by heat or power, not by its workload.
THROTTLE_REASONS: Final = frozenset(
    {"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown", "sw_power_cap"}
)


def clock_event_reason_names(mask: int) -> list[str]:
    """clocks_event_reasons.*: the names of the bits set in ``mask``."""
    return [name for bit, name in CLOCK_EVENT_REASONS if mask & bit]
