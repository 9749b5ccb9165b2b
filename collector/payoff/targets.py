"""``[payoff]`` of ``collector.toml``: the highways a prediction is also made at.

    [payoff]
    targets = ["50G", "nvlink", "rdma 8GB/s", "50G + nvlink"]
    link_near_rating_ratio = 0.8

A target is one highway or several joined by ``+``:

- a network link: a rate in bits as NICs are sold (``50G``, ``25Gb/s``, ``network 100G``);
- a storage volume: ``rdma``, ``storage`` or ``nvme`` and a rate (``rdma 8GB/s``: bytes, a capital
  B; ``rdma 64G``: bits);
- the GPU interconnect: ``nvlink`` (A800's 400 GB/s both ways: 200 GB/s a direction), or with a
  rate (``nvlink 300GB/s``: one direction), or ``pcie5`` / ``pcie4`` (x16).

Each target is checked at start; a bad one stops it with one line naming it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.core.quantities.units import pcie_bytes_per_second
from nodeagent.core.settings.readers import link_rate
from nodeagent.core.settings.tables import check_table

# NVLink of an A800 (8 links x 25 GB/s a direction): DESIGN.md's "A800 400 GB/s per GPU".
NVLINK_BYTES_PER_SECOND = 200e9
HIGHWAYS = ("network", "storage", "interconnect")

PAYOFF_KEYS: dict[str, tuple[type, object]] = {
    "targets": (object, []),
    "link_near_rating_ratio": (float, 0.8),
}

_BYTES = re.compile(r"^\s*([0-9]+(?:\.[0-9]+)?)\s*([kKmMgGtT]?)B(?:/s|ps)?\s*$")
_SCALE = {"": 1.0, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
_STORAGE_WORDS = ("rdma", "storage", "nvme")


class PayoffConfigError(ValueError):
    """One line naming the file, the key and the target."""


class _NotARate(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Target:
    """A named highway: its text as written, and the rate of each highway it sets (bytes/s)."""

    name: str
    network_bytes_per_second: float | None = None
    storage_bytes_per_second: float | None = None
    interconnect_bytes_per_second: float | None = None

    def rate(self, highway: str) -> float | None:
        return {
            "network": self.network_bytes_per_second,
            "storage": self.storage_bytes_per_second,
            "interconnect": self.interconnect_bytes_per_second,
        }.get(highway)


@dataclass(frozen=True, slots=True)
class PayoffConfig:
    targets: tuple[Target, ...] = ()
    # A link at this share of its rating or more is "near its rating": only a bigger one lifts it.
    link_near_rating_ratio: float = 0.8

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str) -> PayoffConfig:
        values = check_table(raw, PAYOFF_KEYS, source=source, table="payoff", error=PayoffConfigError)
        near = values["link_near_rating_ratio"]
        if not 0 < near <= 1:
            raise PayoffConfigError(
                f"{source}: payoff.link_near_rating_ratio: expected a share in (0, 1], got {near!r}"
            )
        listed = values["targets"]
        if not isinstance(listed, list):
            raise PayoffConfigError(
                f'{source}: payoff.targets: expected a list such as ["50G", "nvlink"], got {listed!r}'
            )
        targets = []
        for index, text in enumerate(listed):
            try:
                targets.append(parse_target(text))
            except ValueError as err:
                raise PayoffConfigError(f"{source}: payoff.targets[{index}]: {err}") from err
        return cls(tuple(targets), near)

    def to_plain(self) -> dict[str, Any]:
        return {"targets": [t.name for t in self.targets], "link_near_rating_ratio": self.link_near_rating_ratio}


def parse_target(text: object) -> Target:
    """``50G``, ``nvlink``, ``rdma 8GB/s``, ``50G + nvlink`` -> a ``Target``; ``ValueError`` in one
    line otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"expected a highway such as 50G, nvlink or rdma 8GB/s, got {text!r}")
    rates: dict[str, float] = {}
    for part in text.split("+"):
        highway, rate = _highway(part.strip(), text)
        if highway in rates:
            raise ValueError(f"{text!r} names the {highway} twice")
        rates[highway] = rate
    return Target(" ".join(text.split()), rates.get("network"), rates.get("storage"), rates.get("interconnect"))


def _highway(part: str, whole: str) -> tuple[str, float]:
    word, _, rest = part.partition(" ")
    lowered = word.lower()
    if lowered.startswith("nvlink"):
        rest = (rest or part[len("nvlink") :]).strip()
        return "interconnect", _rate(rest, whole) if rest else NVLINK_BYTES_PER_SECOND
    if re.fullmatch(r"pcie[1-6]", lowered) and not rest:
        rate = pcie_bytes_per_second(int(lowered[-1]), 16)
        assert rate is not None
        return "interconnect", rate
    if lowered in _STORAGE_WORDS:
        if not rest:
            raise ValueError(f"{whole!r}: {word} needs a rate, e.g. {word} 8GB/s")
        return "storage", _rate(rest, whole)
    if lowered in ("network", "nic"):
        if not rest:
            raise ValueError(f"{whole!r}: {word} needs a rate, e.g. {word} 50G")
        part = rest
    return "network", _rate(part, whole)


def _rate(text: str, whole: str) -> float:
    match = _BYTES.match(text)
    if match is not None:
        value = float(match.group(1)) * _SCALE[match.group(2).lower()]
    else:
        try:
            value = link_rate(text, whole, _NotARate)
        except _NotARate:
            raise ValueError(
                f"{whole!r}: not a highway: expected a link rate (50G), nvlink, pcie5, or rdma/storage with a rate "
                "(rdma 8GB/s)"
            ) from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{whole!r}: a rate must be above 0")
    return value
