"""A GPU's computing source in words goes on the wire when it says something new, and once a minute."""

from __future__ import annotations

from nodeagent.agent.sampling.source_reasons import SourceReasons
from nodeagent.v1 import nodeagent_pb2 as pb


def _report(t: float, *sources: tuple[str, str]) -> pb.NodeReport:
    report = pb.NodeReport(node_id="n", time_unix_seconds=t)
    for index, (source, reason) in enumerate(sources):
        report.gpus.add(index=index, computing_source=source, computing_source_reason=reason)
    return report


def _reasons(report: pb.NodeReport) -> list[str]:
    return [g.computing_source_reason for g in report.gpus]


def test_a_reason_goes_when_its_source_changes_and_once_a_minute() -> None:
    reasons = SourceReasons()
    instant, mean = ("power_instant", "readings fall in two groups"), ("power_mean", "readings change every 1.00 s")
    first = _report(100.0, instant, instant)
    reasons.thin(first)
    assert _reasons(first) == [instant[1], instant[1]]
    again = _report(101.0, instant, mean)  # GPU 1's source changed: its words go; GPU 0's were heard
    reasons.thin(again)
    assert _reasons(again) == ["", mean[1]]
    assert [g.computing_source for g in again.gpus] == ["power_instant", "power_mean"]  # the source always goes
    later = _report(159.0, instant, mean)
    reasons.thin(later)
    assert _reasons(later) == ["", ""]
    minute = _report(160.0, instant, mean)  # a minute since GPU 0's went: a collector that restarted learns it
    reasons.thin(minute)
    assert _reasons(minute) == [instant[1], ""]


def test_a_clock_that_went_back_sends_the_reason() -> None:
    reasons = SourceReasons()
    reasons.thin(_report(100.0, ("gpm", "GPM SM activity")))
    back = _report(50.0, ("gpm", "GPM SM activity"))
    reasons.thin(back)
    assert _reasons(back) == ["GPM SM activity"]
