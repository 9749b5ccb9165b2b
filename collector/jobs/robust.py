"""Robust comparison of one node with the other nodes of its job: median and median absolute
deviation (MAD), the modified z-score.

Each node is compared with the *other* nodes: their median, and their MAD scaled by 1.4826 (so it
estimates a standard deviation for normal noise), never below the signal's floor. Leaving the
node out matters for small jobs: with two nodes the pair's own MAD is half their gap, so neither
could ever stand out; compared with the other one alone (MAD 0, the floor), a node stands out by
its gap over the floor. With three nodes the other two's spread is the scale. Up to ``exact``
nodes this is computed exactly (O(n^2) on at most ``exact`` values); above, the whole job's median
and MAD stand in for the others' (one node moves them by at most one rank), O(n log n).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

MAD_SCALE = 1.4826


def scores(values: Sequence[float], floor: float, exact: int) -> list[tuple[float, float]]:
    """Per value: (the others' median, its score = (value - median) / (1.4826 x max(MAD, floor)))."""
    n = len(values)
    if n < 2:
        return [(v, 0.0) for v in values]
    if n > exact:
        median = statistics.median(values)
        scale = MAD_SCALE * max(statistics.median([abs(v - median) for v in values]), floor)
        return [(median, (v - median) / scale) for v in values]
    out = []
    for i, v in enumerate(values):
        others = [*values[:i], *values[i + 1 :]]
        median = statistics.median(others)
        scale = MAD_SCALE * max(statistics.median([abs(o - median) for o in others]), floor)
        out.append((median, (v - median) / scale))
    return out


def medians_of_others(values: Sequence[float], exact: int) -> list[float]:
    """Per value, the others' median (the whole job's above ``exact`` values)."""
    n = len(values)
    if n < 2:
        return list(values)
    if n > exact:
        return [statistics.median(values)] * n
    return [statistics.median([*values[:i], *values[i + 1 :]]) for i in range(n)]
