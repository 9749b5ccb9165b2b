"""The report source owns the sequence: the live sampler and the simulator stamp reports alike,
carrying on from where ``nodeagent run`` says the spool left off."""

from __future__ import annotations

import pytest

from nodeagent.agent.sampling.report_source import ReportSequence, ReportSource
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.tools.simulator.source import SimulatedSampler


def _sources(sequence_of: dict[str, ReportSequence]) -> list[ReportSource]:
    # No sources: the sampler's own stamping, without reading a tree.
    return [
        Sampler([], node_id="n1", sequence=sequence_of["live"], clock=lambda: 1_800_000_000.0),
        SimulatedSampler("ordinary-cloud", node_id="n1", sequence=sequence_of["sim"], clock=lambda: 1_800_000_000.0),
    ]


def test_both_sources_continue_the_sequence_they_are_given() -> None:
    sequences = {"live": ReportSequence(epoch=7, next_seq=41), "sim": ReportSequence(epoch=7, next_seq=41)}
    for source in _sources(sequences):
        reports = [source.tick() for _ in range(3)]
        source.close()
        assert [(r.epoch, r.seq) for r in reports] == [(7, 41), (7, 42), (7, 43)], type(source).__name__
        assert source.sequence.last_seq == 43


def test_a_fresh_source_starts_at_seq_one_of_epoch_one() -> None:
    report = Sampler([], node_id="n1").tick()
    assert (report.epoch, report.seq) == (1, 1)


@pytest.mark.parametrize(("epoch", "next_seq"), [(0, 1), (1, 0)])
def test_a_sequence_starts_at_one_or_later(epoch: int, next_seq: int) -> None:
    with pytest.raises(ValueError, match="must be at least 1"):
        ReportSequence(epoch, next_seq)
