"""Parsing link rates as operators and the kernel write them."""

from __future__ import annotations

import re

_BITS_PER_SECOND = {
    "": 1.0,
    "k": 1e3,
    "m": 1e6,
    "g": 1e9,
    "t": 1e12,
}
_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kmgt]?)\s*(?:b|bit|bits|bps|b/s|bit/s|bits/s|gbe)?\s*$", re.I)
# sysfs infiniband `rate`: "40 Gb/sec (4X QDR)", "25 Gb/sec (1X EDR)", "2.5 Gb/sec (1X SDR)"
_IB_RATE = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([KMGT]?)b/sec", re.I)


class RateError(ValueError):
    """A link rate that cannot be understood."""


def parse_link_rate(text: str) -> float:
    """A link rate such as ``50G``, ``25Gb/s``, ``10000M`` or ``400G`` in bytes per second.

    A bare number is bits per second, like every NIC datasheet writes link speeds.
    """
    match = _RATE.match(text)
    if match is None:
        raise RateError(f"not a link rate: {text!r} (expected e.g. 50G, 25Gb/s, 10000M)")
    value = float(match.group(1)) * _BITS_PER_SECOND[match.group(2).lower()]
    if value <= 0:
        raise RateError(f"link rate must be positive: {text!r}")
    return value / 8.0


def parse_ib_rate(text: str) -> float | None:
    """Bytes per second of an RDMA port's sysfs ``rate``; None when it says nothing usable."""
    match = _IB_RATE.match(text)
    if match is None:
        return None
    return float(match.group(1)) * _BITS_PER_SECOND[match.group(2).lower()] / 8.0


def nic_speed_bytes(mbit: int | None) -> float | None:
    """sysfs ``speed`` is in Mb/s; -1 or 0 means unknown (virtual or link down)."""
    if mbit is None or mbit <= 0:
        return None
    return mbit * 125_000.0


def format_bits(bytes_per_second: float | None) -> str:
    """Bytes per second as a human bit rate: ``12.5 Gb/s``."""
    if bytes_per_second is None:
        return "-"
    bits = bytes_per_second * 8
    for unit, scale in (("Tb/s", 1e12), ("Gb/s", 1e9), ("Mb/s", 1e6), ("kb/s", 1e3)):
        if bits >= scale:
            return f"{bits / scale:.2f} {unit}"
    return f"{bits:.0f} b/s"


# PCIe bandwidth per lane and direction after line encoding (8b/10b for gen 1-2, 128b/130b from
# gen 3, gen 6 counted as gen 5 doubled), in bytes per second.
PCIE_LANE_BYTES_PER_SECOND = {1: 0.25e9, 2: 0.5e9, 3: 0.985e9, 4: 1.969e9, 5: 3.938e9, 6: 7.877e9}


def pcie_bytes_per_second(generation: int, width: int) -> float | None:
    """One direction of a PCIe link; None for a generation or width nobody makes."""
    lane = PCIE_LANE_BYTES_PER_SECOND.get(generation)
    if lane is None or width <= 0:
        return None
    return lane * width


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def parse_duration_seconds(text: str) -> float:
    """``90``, ``30s``, ``5m``, ``2h``, ``14d`` -> seconds; ``ValueError`` naming the text otherwise."""
    value = text.strip().lower()
    scale = _DURATION_UNITS.get(value[-1:]) if value else None
    number = value[:-1] if scale is not None else value
    try:
        seconds = float(number) * (scale or 1.0)
    except ValueError:
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 5m, 2h, 14d)") from None
    if not seconds >= 0 or seconds == float("inf"):
        raise ValueError(f"{text!r} is not a duration (e.g. 90s, 5m, 2h, 14d)")
    return seconds
