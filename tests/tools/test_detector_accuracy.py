"""The detector meets its accuracy targets on the fast subset of the labelled suite (the whole
suite and the cost figures: ``bench/detector_accuracy.py``). These are accuracy targets, not
timings, so they are asserted here."""

from __future__ import annotations

import pytest

from nodeagent.tools.accuracy import Summary, TraceResult, score_trace, summarize
from nodeagent.tools.simulator.suite import SUITE, suite

# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("detector_accuracy")


@pytest.fixture(scope="module")
def results() -> list[TraceResult]:
    return [score_trace(trace) for trace in suite(fast=True)]


@pytest.fixture(scope="module")
def summary(results: list[TraceResult]) -> Summary:
    return summarize(results)


def test_the_suite_is_large_and_varied() -> None:
    assert len(SUITE) >= 30
    assert len({t.name for t in SUITE}) == len(SUITE)
    assert len({t.scenario for t in SUITE}) >= 13
    assert sum(1 for t in SUITE if t.onset_seconds is not None) >= 5
    assert len({tuple(sorted(t.overrides.items())) for t in SUITE}) >= 25


def test_starved_or_not(summary: Summary) -> None:
    assert summary.starved_precision >= 0.95
    assert summary.starved_recall >= 0.95


def test_causes(summary: Summary) -> None:
    assert summary.cause_accuracy >= 0.90
    for cause in ("network", "storage", "cpu", "h2d", "interconnect", "unknown"):
        precision, recall, support = summary.per_cause[cause]
        assert support > 0, cause
        assert precision >= 0.95 and recall >= 0.95, cause


def test_starvation_ratio_error(summary: Summary) -> None:
    assert summary.ratio_mean_abs_error <= 0.03
    assert summary.ratio_worst_trace_error <= 0.03


def test_latency_and_stability(summary: Summary) -> None:
    assert summary.missed_onsets == 0
    assert summary.onset_latency_max_seconds is not None and summary.onset_latency_max_seconds <= 60
    assert summary.flips_per_gpu_hour_max <= 1.0


def test_no_false_alarm_on_pauses_and_the_fast_cloud(results: list[TraceResult]) -> None:
    quiet = {"healthy-a800", "fast-cloud", "thermal-70", "checkpoints", "epochs"}
    for r in results:
        if r.name in quiet:
            assert not any(verdict for _, verdict, _, _ in r.samples), r.name


def test_the_benchmark_runs_and_reports_the_figures() -> None:
    import json
    import subprocess
    import sys

    from tests.fakes.trees import REPO

    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "detector_accuracy.py"), "--fast", "--json", "--cost-reports", "200"],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    figures = json.loads(done.stdout)
    assert all(figures["targets_met"].values())
    assert figures["cost"]["observe_microseconds_per_report"] > 0
    assert {t["name"] for t in figures["traces"]} == {t.name for t in suite(fast=True)}
