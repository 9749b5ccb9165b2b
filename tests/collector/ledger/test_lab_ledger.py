"""The ledger of the recorded lab cluster runs (``tests/data/lab_cluster``, ``docs/dataset.md``)
beside the ranks' own timers: each trace's reports fed to a collector with the lab's detector
settings, as the agents sent them, and each job's ledger read through ``Query.Ledger``'s path.

What holds: the parts add up to the held time; a straggler's lost time is its label's cause, the
nodes that wait on it lose ``waiting`` put on it; the ledger never counts more lost than the
ranks waited (within 0.05 of held time); a clean job loses nothing; and a slowed job's lost share
is within 0.05 of its ranks' wait share over the seconds the ledger holds the job, less the
collective's transfers its steps would make on a clean fabric (the clean job's per step, times the
job's steps a second: docs/ledger.md, "The lab runs beside the ranks' timers"). A job-wide
slowdown counts each node's own data wait and, from the job roll-up's GPM share, its wait behind
the others; a slow fabric the ranks' whole wait in the collective, its clean part too."""

from __future__ import annotations

import asyncio
import functools
from dataclasses import replace
from pathlib import Path

import pytest

from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.tools.lab_traces import ClusterJob, ClusterTrace, cluster_traces
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.trees import REPO

TRACES = {t.name: t for t in cluster_traces(REPO / "tests" / "data" / "lab_cluster")}
# A slow fabric link: its GPUs wait in the collective over it (the roll-up measures it, GPM).
CAUSE_CATEGORY = {"network": "network", "storage": "storage", "link": "interconnect"}
TOLERANCE = 0.05
# The collective's own transfers in a clean job of the lab (its label's ``transfer_share``), per
# training step: each step's work, under the detector's thresholds, so not lost (docs/ledger.md).
# A slowed job makes fewer steps a second, so fewer of these seconds are its work.
_CLEAN = TRACES["clean"].jobs[0]
CLEAN_TRANSFER_SECONDS_PER_STEP = _CLEAN.transfer_share / _CLEAN.steps_per_second


def clean_transfers(job: ClusterJob) -> float:
    """The share of the job's time its steps would spend in the collective on a clean fabric."""
    return CLEAN_TRANSFER_SECONDS_PER_STEP * job.steps_per_second


HELD: dict[tuple[str, str], list[float]] = {}


@functools.cache
def lab_ledger(name: str, db_dir: Path) -> dict[str, pb.LedgerResponse]:
    """The trace fed to a collector (no clock bounds: the reports are of their day), its ledger by job and node."""
    trace = TRACES[name]

    async def scenario() -> dict[str, pb.LedgerResponse]:
        settings = replace(CollectorConfig(), detector=trace.config)
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=db_dir / f"{name}.db", settings=settings, clock_bounds=None)
        )
        await server.start()
        try:
            streams: dict[str, StreamHandle] = {}
            times = []
            for report in trace.reports():
                for j in report.jobs:  # the span the ledger holds each job: the reports naming it
                    span = HELD.setdefault((name, j.job), [report.time_unix_seconds - 1, report.time_unix_seconds])
                    span[1] = report.time_unix_seconds
                stream = streams.get(report.node_id)
                if stream is None:
                    stream = streams[report.node_id] = StreamHandle(report.node_id, "lab")
                    server.ingest.attach(stream, report.info)
                server.ingest.accept(stream, report, report.SerializeToString())
                times.append(report.time_unix_seconds)
            await server.ingest.flusher.flush(final=True)
            span = {"since_unix_seconds": min(times) - 120, "until_unix_seconds": max(times) + 120}
            return {
                by: await asyncio.to_thread(server.ask_ledger, pb.LedgerRequest(by=by, **span))
                for by in ("job", "node")
            }
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def _jobs(trace: ClusterTrace, ledger: dict[str, pb.LedgerResponse]) -> list[tuple[ClusterJob, pb.LedgerRow]]:
    rows = {r.key: r for r in ledger["job"].rows}
    return [(job, rows[job.job]) for job in trace.jobs]


def _lost_share(row: pb.LedgerRow) -> float:
    return sum(row.gpu_hours_lost.values()) / row.gpu_hours_held


@pytest.fixture(scope="module")
def db_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("lab-ledger")


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_lab_runs_ledger_adds_up_names_its_straggler_and_never_overcounts(name: str, db_dir: Path) -> None:
    trace = TRACES[name]
    ledger = lab_ledger(name, db_dir)
    nodes = {r.key: r for r in ledger["node"].rows}
    for job, row in _jobs(trace, ledger):
        assert sorted(row.nodes) == sorted(job.nodes)
        parts = row.gpu_hours_computing + sum(row.gpu_hours_lost.values())
        assert parts == pytest.approx(row.gpu_hours_held, rel=1e-9)
        # Never more lost than the ranks' timers say they waited.
        assert _lost_share(row) <= job.wait_share + TOLERANCE
        straggler, cause = job.straggler, job.cause
        if job.job_wide:  # every node: its own data wait, and its wait behind the others
            for node in job.nodes:
                lost = nodes[node].gpu_hours_lost
                assert min(lost.get(CAUSE_CATEGORY.get(cause or "", "unknown"), 0.0), lost.get("waiting", 0.0)) > 0
            continue
        if straggler is None:
            continue
        if cause in CAUSE_CATEGORY:  # starved of data: its own cause (throttled: the GPU computes, slowly)
            own = nodes[straggler]
            assert max(own.gpu_hours_lost, key=lambda c: own.gpu_hours_lost[c]) == CAUSE_CATEGORY[cause]
        # The others wait on it, and the job's ledger says so.
        assert row.gpu_hours_lost.get("waiting", 0.0) > 0
        assert [s.node_id for s in row.stragglers] == [straggler]


def ranks_wait_over_the_ledgers_span(name: str, job: ClusterJob) -> float:
    """The ranks' wait share over the seconds the ledger holds the job (its reports naming it)."""
    lo, hi = HELD[(name, job.job)]
    share = job.wait_share_over(lo, hi)
    assert share is not None
    return share


@pytest.mark.parametrize("name", sorted(TRACES))
def test_a_lab_jobs_lost_share_is_within_005_of_its_ranks_wait_share(name: str, db_dir: Path) -> None:
    ledger = lab_ledger(name, db_dir)
    for job, row in _jobs(TRACES[name], ledger):
        if job.state == "busy":  # a clean job: its ranks' waits are the collective's own transfers
            assert _lost_share(row) == 0.0
        truth = ranks_wait_over_the_ledgers_span(name, job) - clean_transfers(job)
        assert _lost_share(row) == pytest.approx(truth, abs=TOLERANCE)


def test_a_slowed_job_makes_fewer_steps_so_fewer_clean_transfers_are_its_work() -> None:
    """The baseline the rule takes off scales with the job's steps: a job at half the clean
    one's steps a second spends half the clean share in the collective's clean transfers (the
    lab's own measure of each slowed run's transfers agrees, but for the slow fabric's, which
    are slow)."""
    for trace in TRACES.values():
        for job in trace.jobs:
            if trace.name != "fabric":
                assert clean_transfers(job) == pytest.approx(job.transfer_share, abs=0.005)
    [fabric] = TRACES["fabric"].jobs
    assert clean_transfers(fabric) < 0.6 * _CLEAN.transfer_share < fabric.transfer_share
