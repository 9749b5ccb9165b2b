"""The lab's A100 `job-wide` run replayed (tests/data/lab_cluster_a100, 2026-12-07): every node's
data link capped, no GPM. Node-0's rank ran ahead: it waited 0.06 for data and 0.49 in the
collective, which NVML reads as busy, so its own verdict is `busy`; its link at capacity and its
power say the shared bottleneck holds it too. The job is job-wide `network` (it read `slowed
(unknown)` to the end before busy nodes could join the shared cause), its wait share that of the
ranks' timers."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from nodeagent.collector.replay import Replay
from nodeagent.core.detector.config import DetectorConfig
from nodeagent.core.wire.trace import read_trace

DATA = Path(__file__).resolve().parents[2] / "data" / "lab_cluster_a100"


def test_the_a100_job_wide_run_is_job_wide_though_one_node_reads_busy() -> None:
    label = json.loads((DATA / "job-wide.label.json").read_text())
    replay = Replay(DetectorConfig(**label["detector"]))
    with gzip.open(DATA / "job-wide.jsonl.gz", "rb") as stream:
        for _, report in read_trace(stream, strict=True):
            replay.observe(report)
    (job,) = label["jobs"]
    v = replay.rollup.verdict(job["job"])
    assert v is not None
    assert replay.nodes["node-0"].detector.verdict.state == "busy"
    assert all(replay.nodes[n].detector.verdict.cause == "network" for n in ("node-1", "node-2", "node-3"))
    assert (v.state, v.straggler_nodes, v.cause, v.job_wide) == ("slowed", (), "network", True)
    assert v.evidence["nodes_network_by_evidence"] == 1
    assert v.wait_ratio == pytest.approx(job["wait_share"], abs=0.05)
