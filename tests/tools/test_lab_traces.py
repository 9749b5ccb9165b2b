"""The lab's traces (tests/data/lab: real counters recorded while a real bottleneck starved a
training loop, bench/lab.py --record) replay to the verdict the loop's own timers call for."""

from __future__ import annotations

import pytest

from nodeagent.core.detector.node import NodeDetector
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.core.wire.trace import read_trace
from nodeagent.tools.accuracy import summarize
from nodeagent.tools.lab_traces import LabTrace, lab_traces, score_lab_trace
from tests.fakes.trees import REPO

LAB = lab_traces(REPO / "tests" / "data" / "lab")
BY_NAME = {lab.name: lab for lab in LAB}
STARVED = {"network": "network", "network-unrated": "network", "storage": "storage",
           "storage-throttled": "storage", "cpu": "cpu", "single-core": "cpu"}  # fmt: skip


def replay(lab: LabTrace) -> list[NodeVerdict]:
    detector = NodeDetector(f"lab-{lab.name}", lab.config)
    with lab.trace.open("rb") as stream:
        return [detector.observe(report) for _, report in read_trace(stream, strict=True)]


def test_every_scenario_has_a_small_labelled_trace() -> None:
    assert {*STARVED, "clean", "page-cache"} <= set(BY_NAME)
    for lab in LAB:
        assert lab.trace.stat().st_size < 2 << 20, lab.name
        assert lab.label["truth_per_second"], lab.name


@pytest.mark.parametrize("name", sorted(STARVED))
def test_a_real_bottleneck_is_named_with_the_loops_wait_share(name: str) -> None:
    lab = BY_NAME[name]
    verdicts = replay(lab)
    final = verdicts[-1]
    assert (final.state, final.cause) == ("starved", STARVED[name]), final.evidence
    window = lab.config.window_seconds
    truth = lab.wait_share(final.time_unix_seconds - window, final.time_unix_seconds)
    assert truth is not None and final.starvation_ratio is not None
    assert abs(final.starvation_ratio - truth) <= 0.05, (final.starvation_ratio, truth)
    first = next(v.time_unix_seconds for v in verdicts if v.state == "starved")
    assert first - verdicts[0].time_unix_seconds <= window + lab.config.evaluate_seconds


def test_the_single_core_loader_shows_one_saturated_core() -> None:
    final = replay(BY_NAME["single-core"])[-1]
    assert final.cause == "cpu"
    assert final.evidence["cpu_pattern"] in ("single-threaded-loader", "loader-cores-saturated", "node-saturated")
    assert float(final.evidence["cpu_max_core_busy_ratio"]) >= 0.95


def test_a_clean_loader_is_never_starved() -> None:
    verdicts = replay(BY_NAME["clean"])
    assert all(v.state != "starved" for v in verdicts)
    assert verdicts[-1].state == "busy"


def test_a_dataset_in_memory_is_storage_bound_on_its_first_pass_only() -> None:
    lab = BY_NAME["page-cache"]
    end = lab.label["first_pass_end_unix_seconds"]
    verdicts = replay(lab)
    during = [v for v in verdicts if v.time_unix_seconds < end]
    assert any(v.state == "starved" and v.cause == "storage" for v in during)
    assert verdicts[-1].state == "busy"


def test_an_unrated_virtual_link_is_named_by_its_plateau() -> None:
    # The veth says 10 Gb/s and carries 80 Mb/s: no share of its speed, but a flat receive rate.
    final = replay(BY_NAME["network-unrated"])[-1]
    assert final.evidence["network_pattern"] == "plateau"
    assert final.evidence["network_plateau_link"] == final.evidence["network_link"]
    assert float(final.evidence["network_rx_link_ratio"]) < 0.05


def test_the_lab_summary_meets_the_suites_targets() -> None:
    s = summarize([score_lab_trace(lab) for lab in LAB])
    assert s.starved_precision >= 0.95 and s.starved_recall >= 0.95
    assert s.cause_accuracy >= 0.90
    assert s.ratio_mean_abs_error <= 0.05
