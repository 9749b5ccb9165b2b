"""The job's wait share: of all its GPU time over the window, the share its GPUs spend waiting.

In lockstep every rank waits, each step, for the slowest: what the straggler loses, every other
GPU of the job waits in the collective. So:

- the straggler's own GPUs: their own idle share (its detector's window);
- the straggler's *wait share*, what it makes the others wait: for a data cause (and
  ``unknown``) its data-wait share; for ``throttled`` its slowdown, 1 - its SM clock / the other
  nodes' median clock (a GPU at 70% clocks makes each step 1/0.7 as long: the others wait 30%);
  for ``link`` unknown;
- every other GPU: the straggler's wait share (the lockstep estimate), or where that is unknown
  its own idle share (GPM SM activity shows a waiting GPU idle; NVML utilization alone cannot).
  Its own GPM idle share is not preferred where the lockstep estimate exists: the detector
  counts SM activity at or above ``gpm_full_sm_active_ratio`` as fully busy, so a GPU that
  computes half the time at full SM activity reads busy, and would undercount the wait.

Without a straggler (job-wide, or busy) each GPU's own idle share counts. The job's share is the
mean over its judged GPUs (each node weighted by its GPUs).

Where every judged GPU has GPM, a slowed job's share is instead ``counted_wait(BY_GPM)``: the
mean of 1 - each GPU's raw SM activity over the window (a GPU computes only while its SMs are
active; in the collective or waiting for data they idle), which also counts the waits the
lockstep estimate misses (a degraded link, the collective's own transfers, a job-wide wait).
Where GPM is missing but power tells on every judged GPU (core/detector/power_share.py),
``counted_wait(BY_POWER)`` is the same from the computing share its power shows: the waits NVML
utilization reads as busy. The judge chooses (docs/jobs.md). One weighted mean serves both.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping
from typing import Final

from nodeagent.collector.jobs.node_values import NodeValues


def straggler_wait(
    values: Mapping[str, NodeValues], stragglers: tuple[str, ...], cause: str, data_floor: float = 0.05
) -> float | None:
    """What the stragglers make the other nodes wait (the largest of theirs); None when unknown.

    A ``link`` straggler (its NIC differs) whose GPUs wait for data more than the others' median
    by ``data_floor`` (the detector's moderate tier) makes them wait its data wait: its slow data
    link, named before its own verdict enters `starved`. Otherwise (a slow fabric: it waits in the
    collective like the others) the share is unknown, and each waiting GPU counts its own."""
    if cause == "link":
        own = [v.window_data_wait_ratio for n, v in values.items() if n in stragglers]
        rest = [v.window_data_wait_ratio for n, v in values.items() if n not in stragglers]
        known = [r for r in own if r is not None]
        median = statistics.median([r for r in rest if r is not None] or [0.0])
        return round(max(known), 4) if known and max(known) >= median + data_floor else None
    others = [v.clock_mhz for node, v in values.items() if node not in stragglers and v.clock_mhz]
    reference = statistics.median(others) if others else None
    shares = []
    for node in stragglers:
        v = values[node]
        if cause == "throttled":
            if reference and v.clock_mhz and v.clock_mhz < reference:
                shares.append(1.0 - v.clock_mhz / reference)
        elif v.window_data_wait_ratio is not None:
            shares.append(v.window_data_wait_ratio)
    return round(max(shares), 4) if shares else None


def job_wait(values: Mapping[str, NodeValues], stragglers: tuple[str, ...], share: float | None) -> float | None:
    """The job's wait share over its judged GPUs."""
    total = weight = 0.0
    for node, v in values.items():
        if not v.assigned:
            continue
        wait = v.idle_ratio if node in stragglers or share is None else share
        if wait is None:
            continue
        total += wait * v.assigned
        weight += v.assigned
    return round(total / weight, 4) if weight else None


# What each GPU counter says of the share of time a node's judged GPUs compute over the window.
Active = Callable[[NodeValues], float | None]


def _gpm_active(v: NodeValues) -> float | None:
    return v.window_sm_active_ratio


def _power_active(v: NodeValues) -> float | None:
    return v.window_computing_ratio


# Raw GPM SM activity; the computing share power shows (GPUs with GPM never count here: GPM is their source).
BY_GPM: Final[Active] = _gpm_active
BY_POWER: Final[Active] = _power_active


def counted_wait(values: Mapping[str, NodeValues], active: Active) -> float | None:
    """The job's wait share as one counter measures it: the mean over its judged GPUs (each node
    weighted by its GPUs) of 1 - the share ``active`` says they compute, within [0, 1]; None
    unless it tells on every judged node."""
    total = weight = 0.0
    for v in values.values():
        if not v.assigned:
            continue
        share = active(v)
        if share is None:
            return None
        total += (1.0 - share) * v.assigned
        weight += v.assigned
    return round(min(1.0, max(0.0, total / weight)), 4) if weight else None


def measured_wait(v: NodeValues) -> float | None:
    """One node's wait share as its GPUs' counters measure it: 1 - raw GPM SM activity over the
    window, else 1 - the computing share its power shows; None where neither tells (then only
    its detector's own verdict speaks for it)."""
    active = v.window_sm_active_ratio if v.window_sm_active_ratio is not None else v.window_computing_ratio
    return None if active is None or not v.assigned else round(min(1.0, max(0.0, 1.0 - active)), 4)


def gpm_or_power_wait(values: Mapping[str, NodeValues], leave_out: tuple[str, ...]) -> float | None:
    """The waiting nodes' wait share as measured (GPM, else power), the nodes ``leave_out`` left out."""
    rest = {node: v for node, v in values.items() if node not in leave_out}
    measured = counted_wait(rest, BY_GPM)
    return measured if measured is not None else counted_wait(rest, BY_POWER)
