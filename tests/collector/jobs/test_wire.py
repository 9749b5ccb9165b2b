"""The job roll-up's messages as they travel between processes (``jobs/wire.py``): a job judged
from messages that went through the wire gets exactly the verdicts of one judged in process, and
bad messages from another process are dropped, counted, never judged."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from nodeagent.collector.jobs.messages import Home, JobLeave
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.collector.jobs.wire import node_messages_from_pb, through_bytes, waits_from_pb
from nodeagent.collector.replay import Replay
from nodeagent.tools.lab_traces import cluster_traces
from nodeagent.v1 import jobrelay_pb2 as jr

DATA = Path(__file__).resolve().parents[2] / "data" / "lab_cluster"
TRACES = {t.name: t for t in cluster_traces(DATA)}


@pytest.mark.parametrize("scenario", ["network", "two-jobs", "fabric", "job-wide"])
def test_a_job_judged_from_the_wire_gets_the_verdicts_of_one_judged_in_process(scenario: str) -> None:
    trace = TRACES[scenario]
    direct = Replay(trace.config, jobs=lambda on_rewait: JobRollup(trace.config, on_rewait=on_rewait))
    wired = Replay(trace.config, jobs=lambda on_rewait: JobRollup(trace.config, on_rewait=on_rewait))
    direct_rollup, wired_rollup = direct.rollup, wired.rollup
    sizes = through_bytes(wired_rollup)
    nodes = sorted({r.node_id for r in trace.reports()})
    told: dict[str, set[tuple[str, str, float]]] = {}  # the waits on no other node, for the ledger
    for report in trace.reports():
        direct.observe(report)
        wired.observe(report)
        shares = {n: direct_rollup.nodes.ledger_shares(n) for n in nodes}
        assert shares == {n: wired_rollup.nodes.ledger_shares(n) for n in nodes}
        for n, mine in shares.items():
            told.setdefault(n, set()).update((job, s.category, s.ratio) for job, s in mine.items())
    assert sizes, "no message was sent"
    assert direct.to_plain()["jobs"] == wired.to_plain()["jobs"]
    assert [n["final_verdict"] for n in direct.to_plain()["nodes"]] == [
        n["final_verdict"] for n in wired.to_plain()["nodes"]
    ]
    # Told to a slow fabric's straggler (in the collective over its link) and every job-wide node.
    assert {n for n, said in told.items() if said} == {"fabric": {"node-1"}, "job-wide": set(nodes)}.get(
        scenario, set()
    )
    for said in told.values():
        for _job, category, ratio in said:
            assert category == ("interconnect" if scenario == "fabric" else "waiting")
            assert 0.4 < ratio < 0.7  # the ranks waited 0.53-0.55 of their time
    # One node's values for one job and step: a small message.
    assert max(sizes) < 2_000 * 4, sizes


def test_bad_messages_from_another_process_are_dropped_and_counted() -> None:
    batch = jr.JobNodeMessages()
    good = batch.messages.add()
    good.leave.job, good.leave.node_id, good.leave.note = "torch/a", "node-1", "left"
    batch.messages.add().leave.node_id = "node-2"  # no job
    nan = batch.messages.add()
    nan.step.job, nan.step.node_id = "torch/a", "node-3"
    nan.step.values.busy_ratio = math.nan
    batch.messages.add()  # neither a step nor a leave
    messages, bad = node_messages_from_pb(batch)
    assert messages == [JobLeave("torch/a", "node-1", 0.0, "left", Home())]
    assert bad == 3
    waits = jr.JobWaitMessages()
    w = waits.waits.add()
    w.job, w.node_id, w.wait_ratio = "torch/a", "node-1", 1.5
    assert waits_from_pb(waits) == ([], 1)
