"""Evidence in words with units: one line per key of a verdict's evidence, for people.

A verdict's evidence is a flat map of names to numbers or words (``busy_ratio_job_median:
0.9229``, ``network_rx_bytes_per_second: 1189022260``), exact for JSON and alerts but raw to
read. ``evidence_lines`` says each one as a person reads it: "job's median busy share 92%",
"network receive 1.19 GB/s". A key is read by its parts: a known name (``WORDS``), a unit from its
suffix (``_ratio`` a share in %, ``_bytes_per_second`` a rate in B/s with its SI prefix, ``_mhz``,
``_seconds``), and the job roll-up's comparisons around it (``_job_median``, ``_score``,
``link_<kind>``). A key none of that knows falls back to its name in words and its value as it is
(a number to 3 significant digits), so nothing is hidden and nothing reads as code.
"""

from __future__ import annotations

import math
from typing import Any, Final

# Names said in words; the unit comes from the key's suffix, so names are given without it.
WORDS: Final = {
    "busy": "busy share",
    "data_wait": "data wait share",
    "throttled": "throttled share",
    "sm_active": "SM active share",
    "straggler_wait": "wait on the straggler",
    "interconnect_wait": "wait in the collective",
    "wait": "wait share",
    "starvation": "data wait share",
    "cpu_busy": "CPU busy",
    "network_rx": "network receive",
    "network_plateau_rx": "network receive at its plateau",
    "network_tx": "network send",
    "network_rx_link": "network receive, of its link's speed",
    "h2d_link": "host-to-device copy, of its PCIe link's speed",
    "storage_read": "storage read",
    "disk_read": "disk read",
    "needed": "needed to keep the GPUs busy",
    "sm_clock": "SM clock",
    "straggler": "straggler",
    "stragglers": "stragglers",
    "stood_out_steps": "steps it stood out",
    "nodes_compared": "nodes compared",
    "starved_instances": "starved MIG instances",
    "job_wait": "the job's measured wait",
    "bad_reading": "bad reading",
}
_PREFIXES: Final = ((1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"))


def evidence_lines(evidence: dict[str, Any]) -> list[dict[str, str]]:
    """Each evidence entry, by key, as ``{"key", "text"}``: the key kept (for scripts and tests),
    its text the words and the value with its unit."""
    return [{"key": key, "text": evidence_text(key, value)} for key, value in sorted(evidence.items())]


def evidence_text(key: str, value: Any) -> str:
    """One evidence entry in words: ``busy_ratio_job_median, 0.9229`` -> "job's median busy share 92%"."""
    if key.startswith("link_"):
        return _link(key.removeprefix("link_"), value)
    if key.endswith("_score") and key != "score":
        return f"{_name_and_value(key.removesuffix('_score'), 0.0)[0]}: modified z-score {_plain(value)}"
    for suffix, say in (("_job_median", "job's median {}"), ("_node_median", "{} (node median)")):
        if key.endswith(suffix) and key != suffix.lstrip("_"):
            words, shown = _name_and_value(key.removesuffix(suffix), value)
            return f"{say.format(words)} {shown}"
    words, shown = _name_and_value(key, value)
    return f"{words} {shown}"


def _name_and_value(key: str, value: Any) -> tuple[str, str]:
    if key in WORDS:
        return WORDS[key], _plain(value)
    if key.startswith("nodes_"):
        return f"nodes {key.removeprefix('nodes_').replace('_', ' ')}", _plain(value)
    for suffix, unit in (("_bytes_per_second", _rate), ("_ratio", _percent), ("_mhz", _mhz), ("_seconds", _secs)):
        if key.endswith(suffix):
            base = key.removesuffix(suffix)
            return WORDS.get(base, base.replace("_", " ")), unit(value)
    return key.replace("_", " "), _plain(value)


# The job roll-up's link findings (``jobs/link.py``) whose measure is a rate; the others count.
_LINK_RATES: Final = frozenset({"nic_speed", "pcie", "fabric_peak"})


def _link(rest: str, value: Any) -> str:
    """The job roll-up's slow-link evidence: ``link_<kind>`` names the link, ``_value`` and
    ``_job_median`` its measure and the job's median."""
    for suffix, say in (("_value", "this node"), ("_job_median", "the job's median")):
        if rest.endswith(suffix):
            kind = rest.removesuffix(suffix)
            shown = _rate(value) if kind in _LINK_RATES else _plain(value)
            return f"link ({kind.replace('_', ' ')}): {say} {shown}"
    return f"link ({rest.replace('_', ' ')}) stands out: {_plain(value)}"


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        try:
            value = float(str(value))
        except ValueError:
            return None
    number = float(value)
    return number if math.isfinite(number) else None


def _plain(value: Any) -> str:
    number = _number(value)
    if number is None:
        return str(value)
    return f"{number:.0f}" if number.is_integer() else f"{number:.3g}"


def _percent(value: Any) -> str:
    number = _number(value)
    return str(value) if number is None else f"{number * 100:.0f}%"


def _rate(value: Any) -> str:
    number = _number(value)
    if number is None:
        return str(value)
    for size, prefix in _PREFIXES:
        if abs(number) >= size:
            return f"{number / size:.3g} {prefix}B/s"
    return f"{number:.0f} B/s"


def _mhz(value: Any) -> str:
    number = _number(value)
    return str(value) if number is None else f"{number:.0f} MHz"


def _secs(value: Any) -> str:
    number = _number(value)
    return str(value) if number is None else f"{number:.3g} s"
