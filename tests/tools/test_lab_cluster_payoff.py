"""The payoff on the multi-node lab's recorded runs (tests/data/lab_cluster: a 4-node synchronous
job over real shaped links, one node made slow): each slowed job's prediction, made from its
slowed run through the collector's roll-up (``collector/replay.py``), against the ranks' own
timers: the clean run's steps per second over the slowed job's (the same step: compute,
batch and gradient bytes), within 15%."""

from __future__ import annotations

import pytest

from nodeagent.collector.replay import Replay
from nodeagent.tools.lab_traces import ClusterJob, cluster_traces
from tests.fakes.trees import REPO

TRACES = {t.name: t for t in cluster_traces(REPO / "tests" / "data" / "lab_cluster")}
SLOWED = ("network", "storage", "throttled", "fabric", "job-wide", "two-jobs")


def _slowed_job(name: str) -> ClusterJob:
    (job,) = [j for j in TRACES[name].jobs if j.state == "slowed"]
    return job


@pytest.mark.parametrize("name", SLOWED)
def test_the_prediction_from_the_slowed_run_is_within_15_percent_of_the_clean_runs_steps(name: str) -> None:
    trace = TRACES[name]
    assert trace.label["step"] == TRACES["clean"].label["step"]  # the same training step
    replayed = Replay(trace.config)
    for report in trace.reports():
        replayed.observe(report)
    job = _slowed_job(name)
    verdict = next(v for v in replayed.rollup.verdicts() if v.job == job.job)
    assert verdict.state == "slowed" and verdict.if_fixed is not None and verdict.if_fixed.speedup is not None
    (clean,) = TRACES["clean"].jobs
    measured = clean.steps_per_second / job.steps_per_second
    assert measured > 1.5  # the slowed job ran at about half the clean job's steps
    assert verdict.if_fixed.speedup == pytest.approx(measured, rel=0.15)
