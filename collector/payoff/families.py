"""What a fix is worth as ``nodeagent_fix_worth_*`` families (``/metrics``), one series per starved
node (label ``node``) and per slowed job with a straggler or a job-wide cause (label ``job_name``,
as the job families name it), each with its ``bottleneck``. An unknown speed-up has no series:
no value is not a value of 0. Money only where ``[prices]`` sets a price, with its ``currency``."""

from __future__ import annotations

from typing import Final

from nodeagent.collector.payoff.model import IfFixed
from nodeagent.core.exposition.text import TextFamily, label

# name -> (type, help). Order is the order on /metrics.
FIX_WORTH_FAMILIES: Final = {
    "nodeagent_fix_worth_speedup": (
        "gauge", "The step-rate ratio if the bottleneck stopped holding the GPUs back, bounded by the next limit.",
    ),
    "nodeagent_fix_worth_target_speedup": (
        "gauge", "The step-rate ratio at the [payoff] target named by the target label.",
    ),
    "nodeagent_fix_worth_gpu_seconds_per_second": (
        "gauge", "GPU-seconds a second the job (the node), at its size, would stop losing (x24: GPU-hours a day).",
    ),
    "nodeagent_fix_worth_money_per_day": (
        "gauge", "What those GPU-hours cost a day at [prices], in the currency label's currency.",
    ),
}  # fmt: skip


def worth_families() -> dict[str, TextFamily]:
    return {name: TextFamily(name, kind, help_text) for name, (kind, help_text) in FIX_WORTH_FAMILIES.items()}


def add_worth(families: dict[str, TextFamily], subject: str, fixed: IfFixed) -> None:
    """``subject``: the series' own label (``node="n"`` or ``job_name="j"``), rendered."""
    if fixed.speedup is None:
        return
    labels = f"{subject},{label('bottleneck', fixed.bottleneck)}"
    families["nodeagent_fix_worth_speedup"].add(labels, fixed.speedup)
    if fixed.target and fixed.target_speedup is not None:
        families["nodeagent_fix_worth_target_speedup"].add(
            f"{labels},{label('target', fixed.target)}", fixed.target_speedup
        )
    if fixed.gpu_hours_per_day is not None:
        families["nodeagent_fix_worth_gpu_seconds_per_second"].add(labels, fixed.gpu_hours_per_day / 24)
    if fixed.money_per_day is not None:
        families["nodeagent_fix_worth_money_per_day"].add(
            f"{labels},{label('currency', fixed.currency)}", fixed.money_per_day
        )
