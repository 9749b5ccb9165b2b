"""One tie rule for a cause's majority, whether the votes are a GPU's window steps or a node's GPUs."""

from __future__ import annotations

from nodeagent.core.detector.verdict import CAUSES, GpuVerdict, majority_cause, starved_causes


def _gpu(index: int, state: str, cause: str | None) -> GpuVerdict:
    return GpuVerdict(
        index=index, uuid=f"GPU-{index}", state=state, cause=cause, tier=None, starvation_ratio=None,
        interconnect_ratio=None, idle_ratio=None, gpu_seconds_lost=0.0, jobs=(), evidence={},
    )  # fmt: skip


def test_most_votes_win_and_no_votes_give_none() -> None:
    assert majority_cause({"storage": 3, "network": 1}) == "storage"
    assert majority_cause({}) is None
    assert majority_cause({"cpu": 0}) is None


def test_a_tie_goes_to_the_latest_cause_then_to_the_order_of_causes() -> None:
    assert CAUSES.index("network") < CAUSES.index("cpu")
    assert majority_cause({"cpu": 2, "network": 2}) == "network"
    assert majority_cause({"cpu": 2, "network": 2}, latest="cpu") == "cpu"
    # The latest cause counts only when it is among the tied.
    assert majority_cause({"cpu": 2, "network": 2, "h2d": 1}, latest="h2d") == "network"


def test_a_node_counts_only_its_starved_gpus() -> None:
    gpus = (
        _gpu(0, "starved", "cpu"), _gpu(1, "starved", "storage"), _gpu(2, "busy", None),
        _gpu(3, "throttled", None), _gpu(4, "starved", "cpu"),
    )  # fmt: skip
    assert starved_causes(gpus) == {"cpu": 2, "storage": 1}
    assert majority_cause(starved_causes(gpus)) == "cpu"
