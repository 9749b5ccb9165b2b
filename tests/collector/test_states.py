"""The state words of jobs said alike: the ``jobs`` command lists live jobs in the fleet page's
order, and a slowed job whose cause is not known is ``unknown`` on the page, in ``JobStraggler``
and in replay (collector/states/)."""

from __future__ import annotations

import random

import pytest

from nodeagent.collector.cli.jobs import job_rows
from nodeagent.collector.cli.replay import _held
from nodeagent.collector.jobs.membership import Job
from nodeagent.collector.jobs.signals import job_signals
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.states.words import DOWN, JOB_STATE_ORDER, job_sentence, job_shown_state, job_worst_first
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.v1 import nodeagent_pb2 as pb


def _verdict(job: str, state: str, lost: float, cause: str | None = None) -> JobVerdict:
    return JobVerdict(
        job=job, source="torch", state=state, time_unix_seconds=1.0, nodes=("a", "b"), gpus=16, world_size=16,
        ranks_reported=16, straggler_nodes=("b",) if state == "slowed" else (), cause=cause, wait_ratio=0.4,
        gpu_seconds_lost=lost,
    )  # fmt: skip


@pytest.mark.parametrize("seed", range(5))
def test_the_jobs_command_lists_live_jobs_in_the_pages_order(seed: int) -> None:
    rnd = random.Random(seed)
    states = [s for s in JOB_STATE_ORDER if s != DOWN]  # the live verdicts' words (down is the page's)
    live = [_verdict(f"j{i}", rnd.choice(states), rnd.choice([0.0, 3600.0, 7200.0])) for i in range(12)]
    listed = [row["job"] for row in job_rows(live, pb.JobsResponse())]
    page = [row["job"] for row in sorted((v.to_plain() for v in live), key=job_worst_first)]
    assert listed == page


def test_a_job_none_of_whose_nodes_is_fresh_is_down_and_said_so() -> None:
    assert job_shown_state("slowed", ("a", "b"), fresh={"c"}) == DOWN
    assert job_shown_state("slowed", ("a", "b"), fresh={"b"}) == "slowed"
    plain = {**_verdict("j", "busy", 0.0).to_plain(), "state": DOWN}
    assert "no node of the job has reported" in job_sentence(plain)


def test_a_slowed_job_without_a_known_cause_is_unknown_in_every_view() -> None:
    verdict = _verdict("j", "slowed", 3600.0, cause=None)
    (signal,) = job_signals(Job(key="j", source="torch"), verdict, set(), DetectorConfig())
    assert "(unknown)" in signal.annotations["summary"]
    assert "cause unknown" in job_sentence(verdict.to_plain())
    assert _held(verdict.to_plain()) == "straggler b (unknown)"
