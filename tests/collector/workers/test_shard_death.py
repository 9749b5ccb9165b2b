"""A shard dies, nothing is lost (issue 26; docs/delivery.md, "Across shards").

Real processes: three collectors (each its own SQLite, remote write into a real Prometheus,
alerts to a real Alertmanager) and six simulated agents given all three addresses, two jobs of
two nodes and two nodes without a job; one node of a job has a GPU raising Xids. The collector
that holds that job is SIGKILLed under load, and restarted on the same port and database later.

What must hold: the dead shard's nodes reach another collector within 10 s; every report the
agents had acknowledged is in some shard's ``history_reports``, and a report is in two shards
only if the dead one committed it without acknowledging it (bounded by what the agents resent,
``nodeagent_agent_reports_resent_total``, and by one flush's worth per node); Prometheus holds
each report's sample once; the XIDError stays one alert in Alertmanager whichever shard sends
it; the other nodes stay where their node ids put them, jobs or not; the job's verdict resumes
on the shard its node moved to, naming it; and the restarted shard gets its nodes back within
about two probe periods, losing nothing.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import grpc
import pytest

from nodeagent.core.transport.rendezvous import rendezvous_order
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.conftest import require
from tests.fakes.alertmanager import alerts as am_alerts
from tests.fakes.alertmanager import wait as _wait
from tests.fakes.fleet import Agent, Collector, free_port, processes
from tests.fakes.tsdb import Prometheus

INTERVAL = 0.2  # seconds per report: 5 reports/s per node
REPORTS = 200  # at most 40 s of reports per agent: they are stopped once the shard is back
FLUSH = 0.05  # the collectors' --flush-seconds
XID_NODE = "a0"
NODES = {  # node id -> (job key, node rank); "" for none
    "a0": ("torch/job-a", 0), "a1": ("torch/job-a", 1),
    "b0": ("torch/job-b", 0), "b1": ("torch/job-b", 1),
    "s0": ("", 0), "s1": ("", 0),
}  # fmt: skip
MOVE_SECONDS = 10.0  # the bound on a dead shard's nodes reaching another
PROBE_SECONDS = 5.0  # the agent's PREFERRED_PROBE_SECONDS
# Short detector windows, so the job roll-up judges within seconds of the nodes' first reports.
COLLECTOR_TOML = """\
[detector]
window_seconds = 10.0
evaluate_seconds = 2.0
gap_seconds = 5.0
warmup_seconds = 4.0
"""
# Resent reports are older than what the dead shard already wrote: Prometheus must take them out
# of order (a duplicate of a sample it holds is then dropped, not refused with its whole request).
OUT_OF_ORDER_WINDOW = "30m"


@pytest.mark.alone  # asserts a latency bound: run alone, not beside the rest of the suite
def test_a_shard_dies_under_load_and_nothing_is_lost(tmp_path: Path, alertmanager: str) -> None:
    require(shutil.which("prometheus") is not None, "needs prometheus (Debian package; `make system-deps`)")
    (tmp_path / "prom").mkdir()
    prometheus = Prometheus(tmp_path / "prom", out_of_order_window=OUT_OF_ORDER_WINDOW).start()
    (tmp_path / "collector.toml").write_text(COLLECTOR_TOML)
    shared = ["--flush-seconds", str(FLUSH), "--config", str(tmp_path / "collector.toml"),
              "--remote-write-url", prometheus.write_url, "--remote-write-resolution-seconds", "0",
              "--alertmanager-url", alertmanager]  # fmt: skip
    # One process each: the test reads every shard's database (a front spreads its nodes over its
    # workers' databases; the front itself: tests/collector/workers/).
    shards = [Collector(db=tmp_path / f"shard{i}.db", port=free_port(), args=shared, workers=1) for i in range(3)]
    addresses = [f"--collector={shard.address}" for shard in shards]
    fleet = {node: _agent(node, job, rank, addresses, tmp_path) for node, (job, rank) in NODES.items()}
    run = Run()
    try:
        with processes() as started:
            for shard in shards:
                started.append(shard.start())
            for node, agent in fleet.items():
                started.append(agent.start(tmp_path / f"{node}.log"))
            watch = Watch(alertmanager)
            with watch.running():
                _shard_dies(run, shards, watch)
                # The shard is back with its nodes: the agents stop (SIGTERM: a drain, then the
                # run's summary) rather than stream out the rest of their reports.
                for agent in fleet.values():
                    assert agent.proc is not None
                    agent.proc.send_signal(signal.SIGTERM)
                outcomes = {node: agent.wait(REPORTS * INTERVAL + 60) for node, agent in fleet.items()}
            for node, (code, summary) in outcomes.items():
                assert code == 0 and summary["acked_seq"] == summary["produced"] > 0, (
                    node, summary, fleet[node].tail(),
                )  # fmt: skip
            _nothing_lost(run, shards, outcomes, watch, prometheus)
    finally:
        prometheus.stop()
        print(json.dumps(run.figures, sort_keys=True))  # the figures, with -s


# ---- the run ---------------------------------------------------------------------------------


@dataclass
class Run:
    figures: dict[str, Any] = field(default_factory=dict)
    victim: int = -1
    killed_at: float = 0.0


def _agent(node: str, job: str, rank: int, addresses: list[str], tmp: Path) -> Agent:
    scenario = "xid-errors" if node == XID_NODE else "healthy"
    params = ["--set", "xid_every_seconds=1.0"] if node == XID_NODE else []
    if job:
        params += ["--set", f"job_key={job}", "--set", "job_nodes=2", "--set", f"job_node_rank={rank}"]
    args = [*addresses, "--node-id", node, "--simulate", scenario, *params, "--interval", str(INTERVAL),
            "--max-reports", str(REPORTS), "--deadline", str(REPORTS * INTERVAL + 45),
            "--spool-dir", str(tmp / f"spool-{node}")]  # fmt: skip
    return Agent(args)


def _shard_dies(run: Run, shards: list[Collector], watch: Watch) -> None:
    def homes() -> dict[str, int]:
        return _homes(shards, time.time() - 1.0)

    # Each node streams to the first choice for its node id, whatever job it runs, and stays.
    targets = [shard.address for shard in shards]
    expected = {node: targets.index(rendezvous_order(node, targets)[0]) for node in NODES}
    _wait(lambda: homes() == expected, 20, f"every node on its first choice {expected}")
    placed = expected
    run.figures["placed"] = placed
    time.sleep(2.0)  # under load: every node streaming to its shard
    _wait(lambda: watch.xid_alerts() == 1, 20, f"XIDError of {XID_NODE} in Alertmanager")
    run.victim = victim = placed[XID_NODE]
    moving = sorted(node for node, shard in placed.items() if shard == victim)

    run.killed_at = killed = time.time()
    shards[victim].kill()
    arrived: dict[str, float] = {}

    def moved() -> bool:
        now = time.time()
        for node, shard in _homes(shards, killed).items():
            if node in moving and shard != victim:
                arrived.setdefault(node, now - killed)
        return len(arrived) == len(moving)

    _wait(moved, MOVE_SECONDS, f"the dead shard's nodes {moving} on another shard (arrived: {arrived})")
    run.figures["moved_seconds"] = {node: round(s, 2) for node, s in arrived.items()}
    now = _homes(shards, killed)
    survivor = now[XID_NODE]
    # Only the dead shard's nodes moved: every other node heard from since is where its node id put it.
    stayed = {node: shard for node, shard in now.items() if node not in moving}
    assert stayed == {node: placed[node] for node in stayed}, now

    # The job's verdict resumes on the shard its node moved to, naming it.
    def job_listed() -> bool:
        verdicts = _list_jobs(shards[survivor].address)
        return any(v.job == "torch/job-a" and XID_NODE in v.nodes for v in verdicts)

    started = time.time()
    _wait(job_listed, 20, f"StreamJobs on the survivor names torch/job-a with {XID_NODE}")
    run.figures["job_resumed_seconds"] = round(time.time() - killed, 2)
    run.figures["job_listed_after_move_seconds"] = round(time.time() - started, 2)
    # The survivor raised the XIDError itself (its own alert table), and Alertmanager has one.
    _wait(lambda: _firing(shards[survivor].db, "XIDError", XID_NODE), 20, "the survivor fires XIDError")
    assert watch.xid_alerts() == 1

    # The shard returns on its port and database; its nodes come back within about two probes.
    time.sleep(max(0.0, killed + 6.0 - time.time()))
    back_at = time.time()
    shards[victim].start()
    returned: dict[str, float] = {}

    def came_back() -> bool:
        now = time.time()
        for node, shard in _homes(shards, back_at).items():
            if node in moving and shard == victim:
                returned.setdefault(node, now - back_at)
        return len(returned) == len(moving)

    _wait(came_back, 2 * PROBE_SECONDS + 5, f"{moving} back on the restarted shard (back: {returned})")
    run.figures["returned_seconds"] = {node: round(s, 2) for node, s in returned.items()}


def _nothing_lost(
    run: Run,
    shards: list[Collector],
    outcomes: dict[str, tuple[int, dict[str, Any]]],
    watch: Watch,
    prometheus: Prometheus,
) -> None:
    stored = [_stored(shard.db) for shard in shards]
    union: set[tuple[str, int, int]] = set().union(*stored)
    for node, (_code, summary) in outcomes.items():
        wanted = {(node, summary["epoch"], seq) for seq in range(1, summary["produced"] + 1)}
        missing = sorted(seq for _n, _e, seq in wanted - union)
        assert not missing, f"{node}: acknowledged reports in no shard: {missing[:20]}"
    # A report in two shards: only one the dead shard committed and never acknowledged.
    doubled: dict[str, list[int]] = {}
    for key in union:
        holders = [i for i, rows in enumerate(stored) if key in rows]
        if len(holders) > 1:
            assert len(holders) == 2 and run.victim in holders, (key, holders)
            doubled.setdefault(key[0], []).append(key[2])
    resent = {node: summary["reports_resent_total"] for node, (_code, summary) in outcomes.items()}
    run.figures["doubled"] = {node: sorted(seqs) for node, seqs in doubled.items()}
    run.figures["doubled_total"] = sum(len(s) for s in doubled.values())
    run.figures["resent"] = resent
    for node, seqs in doubled.items():
        assert len(seqs) <= resent.get(node, 0), f"{node}: {len(seqs)} doubled, {resent.get(node)} resent"
        # One flush's worth of reports, plus the one in flight when the shard died.
        assert len(seqs) <= math.ceil(FLUSH / INTERVAL) + 1, (node, seqs)
        assert max(seqs) - min(seqs) < len(seqs) + 1, f"{node}: doubled seqs not one run: {seqs}"
        killed_seq = (run.killed_at - _first_report_time(shards, node)) / INTERVAL
        assert all(abs(seq - killed_seq) < 15 for seq in seqs), (node, seqs, killed_seq)
    # Prometheus: one sample of a per-report series per report, whichever shards wrote it.
    # Each count as last read goes into the figures, printed whether or not this holds.
    _wait(lambda: _tsdb_counts(prometheus, outcomes, run.figures), 30, "Prometheus holds every report's sample")
    assert watch.max_xid_alerts == 1, f"XIDError seen {watch.max_xid_alerts} times at once in Alertmanager"
    assert watch.xid_alerts() == 1


# ---- what the shards, Prometheus, Alertmanager and the agents say -----------------------------


def _homes(shards: list[Collector], since: float) -> dict[str, int]:
    """Each node's shard: the one that stored a report of it last, if after ``since``."""
    latest: dict[str, tuple[float, int]] = {}
    for index, shard in enumerate(shards):
        for node, seen in _query(shard.db, "SELECT node_id, last_seen FROM nodes"):
            if seen > since and seen > latest.get(node, (0.0, -1))[0]:
                latest[node] = (seen, index)
    return {node: index for node, (_seen, index) in latest.items()}


def _stored(db: Path) -> set[tuple[str, int, int]]:
    return {(n, e, s) for n, e, s in _query(db, "SELECT node_id, epoch, seq FROM history_reports")}


def _firing(db: Path, name: str, node: str) -> bool:
    sql = f"SELECT count(*) FROM alerts WHERE name='{name}' AND node_id='{node}' AND ends_at IS NULL"
    rows = _query(db, sql)
    return bool(rows and rows[0][0])


def _first_report_time(shards: list[Collector], node: str) -> float:
    sql = f"SELECT min(time) FROM history_reports WHERE node_id='{node}'"
    return min(float(row[0]) for shard in shards for row in _query(shard.db, sql) if row[0] is not None)


def _query(db: Path, sql: str) -> list[tuple[Any, ...]]:
    if not db.exists():
        return []
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=5) as conn:
            return list(conn.execute(sql))
    except sqlite3.OperationalError:  # a table not created yet
        return []


def _list_jobs(address: str) -> list[pb.JobVerdict]:
    try:
        with grpc.insecure_channel(address) as channel:
            pages = pb_grpc.QueryStub(channel).StreamJobs(pb.ListJobsRequest(), timeout=5)
            return [job for page in pages for job in page.jobs]
    except grpc.RpcError:
        return []


def _tsdb_counts(
    prometheus: Prometheus, outcomes: dict[str, tuple[int, dict[str, Any]]], figures: dict[str, Any]
) -> dict[str, int] | None:
    """Samples of each node's ``node_context_switches_total`` (one per report), once every node has
    one per report; None until then. The counts go into ``figures["tsdb_samples"]`` as read."""
    counts: dict[str, int] = figures.setdefault("tsdb_samples", {})
    for node in outcomes:
        series = prometheus.query(f'node_context_switches_total{{node="{node}"}}[30m]', time.time())
        assert len(series) == 1, series
        counts[node] = len(series[0]["values"])
        produced = outcomes[node][1]["produced"]
        assert counts[node] <= produced, f"{node}: {counts[node]} samples of {produced} reports: some twice"
    return counts if all(count == outcomes[node][1]["produced"] for node, count in counts.items()) else None


class Watch:
    """Alertmanager's XIDError alerts, sampled in a thread: the most seen at once."""

    def __init__(self, alertmanager: str) -> None:
        self.alertmanager = alertmanager
        self.max_xid_alerts = 0
        self._stop = threading.Event()

    def xid_alerts(self) -> int:
        now = time.time()
        found = [
            a for a in am_alerts(self.alertmanager)
            if a["labels"].get("alertname") == "XIDError" and a["labels"].get("node") == XID_NODE
            and a["status"]["state"] == "active" and _rfc3339(a["endsAt"]) > now
        ]  # fmt: skip
        self.max_xid_alerts = max(self.max_xid_alerts, len(found))
        return len(found)

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        thread = threading.Thread(target=self._loop, daemon=True)
        thread.start()
        try:
            yield
        finally:
            self._stop.set()
            thread.join(10)

    def _loop(self) -> None:
        while not self._stop.wait(0.25):
            with contextlib.suppress(OSError):
                self.xid_alerts()


def _rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
