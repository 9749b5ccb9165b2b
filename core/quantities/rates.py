"""Counters to rates: the one place that knows about resets and saturation.

A cumulative counter that goes down between two samples was reset (driver reload, device
replaced, 32-bit wrap): that interval has no rate. Never a negative rate, never one of
2^64 bytes. A fixed-width counter pinned at its maximum is saturated (InfiniBand PMA
counters stop instead of wrapping); its deltas mean nothing until it is cleared.

Counters read together for one figure (a node's NICs summed, a CPU's time by mode): one reset
among them and that interval has no figure. A count known to start again from zero (the
detector's GPU-seconds lost, when a new detector replaces the old) is the exception: across its
reset, the increase is its whole new value.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

K = TypeVar("K")

MAX_U32 = (1 << 32) - 1

# Widths of the InfiniBand PortCounters attributes that do not have 64-bit forms
# (IBA spec, PortCounters). Everything else under counters/ is 32 or 64 bits.
IB_COUNTER_BITS: dict[str, int] = {
    "symbol_error": 16,
    "link_error_recovery": 8,
    "link_downed": 8,
    "port_rcv_errors": 16,
    "port_rcv_remote_physical_errors": 16,
    "port_rcv_switch_relay_errors": 16,
    "port_xmit_discards": 16,
    "port_xmit_constraint_errors": 8,
    "port_rcv_constraint_errors": 8,
    "local_link_integrity_errors": 4,
    "excessive_buffer_overrun_errors": 4,
    "VL15_dropped": 16,
}


# A rate more than this many times its link's capacity is a bad reading (a counter in other
# units, a wrapped or reset counter, a wrong speed): the detector decides nothing by it, and the
# views show it flagged rather than as traffic (the detector's ``link_overrun_factor`` default).
LINK_OVERRUN_FACTOR = 1.2


def within_capacity(bytes_per_second: float, capacity: float | None, factor: float = LINK_OVERRUN_FACTOR) -> bool:
    """Whether a link's rate is one the link can carry; True when its capacity is not known."""
    return not capacity or bytes_per_second <= capacity * factor


def delta(previous: int | None, current: int | None) -> int | None:
    """Increase of a cumulative counter; None when either is unknown or it was reset."""
    if previous is None or current is None or current < previous:
        return None
    return current - previous


def rate(previous: int | float | None, current: int | float | None, seconds: float) -> float | None:
    """Per-second increase; None over a reset, an unknown value or an empty interval."""
    if previous is None or current is None or seconds <= 0 or current < previous:
        return None
    return (current - previous) / seconds


def sum_rate(pairs: Iterable[tuple[float, float]], seconds: float) -> float | None:
    """Per-second increase of several counters summed, from (previous, current) pairs; None when
    any of them was reset or the interval is empty (no pairs: 0.0)."""
    if seconds <= 0:
        return None
    total = 0.0
    for previous, current in pairs:
        if current < previous:
            return None
        total += current - previous
    return total / seconds


def increases(previous: Mapping[K, float], current: Mapping[K, float]) -> dict[K, float] | None:
    """Each counter's increase, by ``current``'s keys (all in ``previous``); None when any of
    them went down."""
    out = {key: value - previous[key] for key, value in current.items()}
    return None if any(increase < 0 for increase in out.values()) else out


def increase_across_reset(previous: float, current: float) -> float:
    """Increase of a count that starts again from zero when reset: across a reset, its whole new value."""
    return current - previous if current >= previous else current


def share_of_increase(part: tuple[float, float], whole: tuple[float, float]) -> float | None:
    """How much of the increase of ``whole`` (before, now) the increase of ``part`` is, at most 1:
    a CPU's busy time over all its time. None when ``whole`` did not grow or ``part`` went down."""
    grown = whole[1] - whole[0]
    if grown <= 0 or part[1] < part[0]:
        return None
    return min(1.0, (part[1] - part[0]) / grown)


CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")


def cpu_time_shares(old: Mapping[str, float], new: Mapping[str, float]) -> dict[str, float]:
    """``busy`` and ``iowait`` shares of a CPU's time between two readings of its seconds by mode
    (``CPU_MODES``); {} over a reset. idle and iowait may go backwards a little (the kernel
    documents iowait as unreliable, NO_HZ idle accounting too): that is no reset. Busy time going
    backwards is one (a CPU hot-unplugged and back)."""
    deltas = {mode: new[mode] - old[mode] for mode in CPU_MODES}
    if any(deltas[mode] < 0 for mode in CPU_MODES if mode not in ("idle", "iowait")):
        return {}
    deltas["idle"] = max(0.0, deltas["idle"])
    deltas["iowait"] = max(0.0, deltas["iowait"])
    total = sum(deltas.values())
    if total <= 0:
        return {}
    return {"busy": 1.0 - (deltas["idle"] + deltas["iowait"]) / total, "iowait": deltas["iowait"] / total}


def ratio(part: float | None, whole: float | None) -> float | None:
    """part / whole, None when either is unknown or whole is not positive."""
    if part is None or whole is None or whole <= 0:
        return None
    return part / whole


def disk_busy_ratio(previous_ms: int | None, current_ms: int | None, seconds: float) -> float | None:
    """Share of the interval a disk was busy (iostat's %util), from its milliseconds-doing-I/O
    counter (/proc/diskstats' io_ticks, ``io_time_milliseconds_total``); None over a reset, an
    unknown value or an empty interval. At most 1: the counter moves in whole jiffies and the
    interval is the reports' times, so a saturated disk can show a hair more than the interval."""
    busy_ms = delta(previous_ms, current_ms)
    if busy_ms is None or seconds <= 0:
        return None
    return min(1.0, busy_ms / 1000 / seconds)


def is_saturated(name: str, value: int) -> bool:
    """True for a fixed-width counter stuck at its maximum value."""
    bits = IB_COUNTER_BITS.get(name)
    if bits is not None and value == (1 << bits) - 1:
        return True
    return value == MAX_U32
