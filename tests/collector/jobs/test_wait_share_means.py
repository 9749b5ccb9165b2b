"""The job's wait share as its GPUs' counters measure it (``wait_share.counted_wait``): one weighted
mean over GPM SM activity or over the computing share power shows, pinned on hand-made jobs to the
figures the two separate means (``gpm_wait`` and ``power_wait``, before issue 46) gave."""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from nodeagent.collector.jobs.node_values import LinkValues, NodeValues
from nodeagent.collector.jobs.wait_share import BY_GPM, BY_POWER, counted_wait, gpm_or_power_wait


def node(assigned: int, sm: float | None = None, computing: float | None = None) -> NodeValues:
    return NodeValues(
        gpus=8, assigned=assigned, warmup=0, busy_ratio=None, sm_active_ratio=None, throttled_ratio=None,
        data_wait_ratio=None, window_data_wait_ratio=None, idle_ratio=None, interconnect_ratio=None,
        own_cause=None, evidence={}, evidence_cause=None, needed_bytes_per_second=None, clock_mhz=None,
        link=LinkValues(), window_sm_active_ratio=sm, window_computing_ratio=computing,
    )  # fmt: skip


JOBS: dict[str, Mapping[str, NodeValues]] = {
    "weighted by GPUs": {"a": node(8, 0.9, 0.8), "b": node(4, 0.3, 0.5)},
    "a node judging none is left out": {"a": node(8, 0.6, 0.7), "b": node(0)},
    "one node without the counter": {"a": node(8, 0.6), "b": node(8, None, 0.4)},
    "clamped: a share above 1": {"a": node(2, -0.2, 1.3)},
    "no judged GPU": {"a": node(0, 0.5, 0.5)},
    "rounded to 4 places": {"a": node(3, 0.12345, 0.98765), "b": node(5, 0.55555, 0.11111)},
}
# (by GPM, by power), as gpm_wait and power_wait gave them.
PINNED = {
    "weighted by GPUs": (0.3, 0.3),
    "a node judging none is left out": (0.4, 0.3),
    "one node without the counter": (None, None),
    "clamped: a share above 1": (1.0, 0.0),
    "no judged GPU": (None, None),
    "rounded to 4 places": (0.6065, 0.5602),
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_the_one_weighted_mean_gives_what_the_two_gave(name: str) -> None:
    values = JOBS[name]
    assert (counted_wait(values, BY_GPM), counted_wait(values, BY_POWER)) == PINNED[name]


def test_gpm_else_power_leaving_a_node_out() -> None:
    job = {"a": node(8, None, 0.75), "b": node(4, 0.1), "c": node(4, None, 0.25)}
    assert counted_wait(job, BY_GPM) is None
    assert gpm_or_power_wait(job, ("b",)) == 0.4167  # power, over a and c
    assert gpm_or_power_wait(job, ("a", "c")) == 0.9  # GPM, over b alone
