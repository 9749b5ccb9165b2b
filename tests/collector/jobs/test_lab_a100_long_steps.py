"""The lab's A100 runs with 2-s steps and power read as a 1-s mean, replayed
(tests/data/lab_cluster_a100_mean1s_2s, 2026-12-08). Both were wrong live before these rules:

- ``network``: node-1 starves for data a whole report or more in each step; those idle reports
  were dropped as pauses, so its own verdict read `busy` and the job's cause `link` (its capped
  NIC). A gap that comes back within ``gap_seconds`` is the job's step and counts.
- ``fabric``: the waiting nodes compute about 1.7 s of each 4-s step, too short for two reports in
  a row to read the computing draw: the moving-mean estimator read their wait as a number far off
  the ranks' timers, and the waiting nodes' busy share, read per 5-s step, stood out in turn and
  wiped node-1's stand-outs (the job `busy`, wait 0.0 against 0.58). Now their wait share is
  unknown (`short_phases`) and node-1's link, ten times busier than the others' on the same bytes,
  names it.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from nodeagent.collector.replay import Replay
from nodeagent.core.detector.computing_source import SHORT_PHASES
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.wire.trace import read_trace

DATA = Path(__file__).resolve().parents[2] / "data" / "lab_cluster_a100_mean1s_2s"
ENERGY = Path(__file__).resolve().parents[2] / "data" / "lab_cluster_a100_energy_2s"


def _replay(scenario: str) -> tuple[Replay, dict[str, Any], list[tuple[float, Any]]]:
    label = json.loads((DATA / f"{scenario}.label.json").read_text())
    replay = Replay(DetectorConfig(**label["detector"]))
    (job,) = label["jobs"]
    timeline = []
    with gzip.open(DATA / f"{scenario}.jsonl.gz", "rb") as stream:
        for _, report in read_trace(stream, strict=True):
            replay.observe(report)
            v = replay.rollup.verdict(job["job"])
            if v is not None:
                timeline.append((report.time_unix_seconds - label["onset_unix_seconds"], v))
    return replay, job, timeline


def test_a_straggler_idle_whole_reports_each_long_step_is_starved_for_data() -> None:
    replay, job, timeline = _replay("network")
    node = replay.nodes["node-1"].detector.verdict
    assert (node.state, node.cause) == ("starved", "network")
    assert node.gpus[0].idle_ratio is not None and node.gpus[0].idle_ratio > 0.4  # it read 0.16
    v = timeline[-1][1]
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio == pytest.approx(job["wait_share"], abs=0.06)


def test_phases_too_short_for_a_moving_mean_give_no_number_and_the_busy_link_names_the_straggler() -> None:
    replay, _, timeline = _replay("fabric")
    for n in ("node-0", "node-2", "node-3"):
        source, estimate = replay.nodes[n].detector.window_estimate(0)
        assert source == "power_mean" and estimate.computing_ratio is None and estimate.unknown == SHORT_PHASES
    # Never a number: a slowed verdict's wait share is unknown with its reason.
    named = [(t, v) for t, v in timeline if v.state == "slowed"]
    assert named and all(v.wait_ratio is None for _, v in named)
    v = timeline[-1][1]
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "link")
    assert v.evidence["wait_unknown_reason"] == SHORT_PHASES
    assert v.evidence["link_fabric_busy"] == "nic:fab0"
    # Named within the lab's bound, while the 45-s job still ran.
    assert min(t for t, v in named if v.straggler_nodes == ("node-1",)) < 30.0


def test_report_draws_per_step_are_no_straggler_signal() -> None:
    """The energy counter only, 2-s steps (tests/data/lab_cluster_a100_energy_2s): node-0's
    window told a share while node-2's and node-3's did not, so its busy share came from one
    5-s step's report draws (0.47-0.76, where the phases fell) against their NVML utilization
    (1.0): it stood out beside node-1 at four steps in a row and nobody was named. The busy share
    of a GPU read by report draws is its utilization, as where its source cannot tell."""
    label = json.loads((ENERGY / "network.label.json").read_text())
    replay = Replay(DetectorConfig.from_mapping(label["detector"], source="label"))
    (job,) = label["jobs"]
    with gzip.open(ENERGY / "network.jsonl.gz", "rb") as stream:
        for _, report in read_trace(stream, strict=True):
            replay.observe(report)
    v = replay.rollup.verdict(job["job"])
    assert v is not None
    assert (v.state, v.straggler_nodes, v.cause) == ("slowed", ("node-1",), "network")
    assert v.wait_ratio is None and v.evidence["wait_unknown_reason"] == SHORT_PHASES
