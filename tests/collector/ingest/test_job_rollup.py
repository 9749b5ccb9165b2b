"""The job roll-up inside the collector's ingest: a 4-node job with a network-starved node through
a real ``Ingest``. The straggler named in ``Ingest.jobs``, a ``JobStraggler`` alert in the book
beside the straggler's own ``GPUDataStarved`` (and none for the waiting nodes), the loss in the
history on every GPU of the job, and a retired node forgotten by the roll-up."""

from __future__ import annotations

import asyncio
from pathlib import Path

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.history.minutes import NODE_ROW
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from tests.fakes.job_reports import START, FakeNode, JobPart, job_nodes

ONSET = 60


def test_a_straggler_through_the_ingest_alerts_counts_every_gpu_and_is_forgotten_on_retirement(
    tmp_path: Path,
) -> None:
    asyncio.run(_straggler(tmp_path))


async def _straggler(tmp_path: Path) -> None:
    now = [START]
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: now[0])
    nodes = job_nodes("1234", 4)
    alone = FakeNode("alone", [])  # no job key: today's verdicts, untouched
    streams = {}
    for node in [*nodes, alone]:
        streams[node.node_id] = stream = StreamHandle(node.node_id, "test")
        ingest.attach(stream, node.info())

    async def seconds(count: int, *, skip: str = "") -> None:
        for _ in range(count):
            for node in [*nodes, alone]:
                if node.node_id == skip:
                    continue
                report = node.report(now[0])
                ingest.accept(streams[node.node_id], report, report.SerializeToString())
            now[0] += 1.0
            await ingest.flusher.flush()

    await seconds(ONSET)
    nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.5, 1.2e9
    await seconds(150)

    verdict = ingest.jobs.verdict("1234")
    assert verdict is not None
    assert (verdict.state, verdict.straggler_nodes, verdict.cause) == ("slowed", ("node-1",), "network")
    waiting = {n: ingest.nodes[n].detector.verdict for n in ("node-0", "node-2", "node-3")}  # type: ignore[union-attr]
    assert all(v.state == "waiting" and v.waiting_on == ("node-1",) for v in waiting.values())
    assert ingest.nodes["alone"].detector.verdict.state == "busy"  # type: ignore[union-attr]
    firing = {(a.name, a.node_id, a.key) for a in writer.call_sync(alerting.recent, False)}
    assert ("JobStraggler", "node-1", "1234") in firing
    assert ("GPUDataStarved", "node-1", "") in firing
    assert not {("GPUDataStarved", n, "") for n in waiting} & firing
    (straggler,) = [a for a in writer.call_sync(alerting.recent, False) if a.name == "JobStraggler"]
    assert straggler.labels["cause"] == "network" and straggler.labels["job"] == "1234"
    # The history counts the loss on every GPU of the job, the waiting nodes' too.
    for node in ("node-0", "node-1", "node-2", "node-3"):
        rows = writer.call_sync(writer.store.history.minutes, node, None, 0.0, None)
        lost = {r.gpu: sum(x.values.get("gpu_seconds_lost", 0.0) for x in rows if x.gpu == r.gpu) for r in rows}
        assert all(lost[g] > 30 for g in range(4)), (node, lost)
        assert lost[NODE_ROW] > 120
    assert {r.state for r in writer.call_sync(writer.store.history.minutes, "node-0", NODE_ROW, 0.0, None)} >= {
        "busy", "waiting",
    }  # fmt: skip
    points = ingest.nodes["node-0"].timeline.points
    assert points and points[-1].state == "waiting"

    # The straggler goes away for good: retired, out of the job; the others stop waiting.
    ingest.detach(streams["node-1"])
    forgotten = asyncio.create_task(ingest.forget("node-1"))
    await asyncio.sleep(0)
    await ingest.flusher.flush()
    await forgotten
    await seconds(30, skip="node-1")
    verdict = ingest.jobs.verdict("1234")
    assert verdict is not None and verdict.nodes == ("node-0", "node-2", "node-3")
    assert verdict.straggler_nodes == ()
    assert all(ingest.nodes[n].detector.verdict.state == "busy" for n in waiting)  # type: ignore[union-attr]
    firing = {(a.name, a.node_id) for a in writer.call_sync(alerting.recent, False)}
    assert ("JobStraggler", "node-1") not in firing
    writer.call_sync(alerting.close)
    writer.close()


def test_job_keys_of_nodes_in_two_jobs_keep_their_own_alerts_apart(tmp_path: Path) -> None:
    """A job key is the alert's key: two jobs' instances on one straggler node are two alerts."""
    asyncio.run(_two_jobs(tmp_path))


async def _two_jobs(tmp_path: Path) -> None:
    now = [START]
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: now[0])
    shared = FakeNode("shared", [JobPart("A", (0, 1), (0, 1), 4), JobPart("torch/B", (2, 3), (0, 1), 4, "torch")])
    others = [
        FakeNode("a-1", [JobPart("A", (0, 1), (2, 3), 4)], gpus=2),
        FakeNode("b-1", [JobPart("torch/B", (0, 1), (2, 3), 4, "torch")], gpus=2),
    ]
    fleet = [shared, *others]
    streams = {n.node_id: StreamHandle(n.node_id, "test") for n in fleet}
    for node in fleet:
        ingest.attach(streams[node.node_id], node.info())
    for k in range(200):
        if k == ONSET:
            shared.util, shared.data_rx_bytes_per_second = 0.5, 1.2e9  # both jobs' GPUs starve
        for node in fleet:
            report = node.report(now[0])
            ingest.accept(streams[node.node_id], report, report.SerializeToString())
        now[0] += 1.0
        await ingest.flusher.flush()
    firing = {(a.name, a.node_id, a.key) for a in writer.call_sync(alerting.recent, False) if a.name == "JobStraggler"}
    assert firing == {("JobStraggler", "shared", "A"), ("JobStraggler", "shared", "torch/B")}
    writer.call_sync(alerting.close)
    writer.close()


async def _slowed_job(tmp_path: Path, now: list[float]) -> tuple[StoreWriter, Alerting, Ingest]:
    """A 4-node job whose node-1 is starved by its network, long enough for its JobStraggler."""
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: now[0])
    nodes = job_nodes("1234", 4)
    streams = {}
    for node in nodes:
        streams[node.node_id] = stream = StreamHandle(node.node_id, "test")
        ingest.attach(stream, node.info())
    nodes[1].util, nodes[1].data_rx_bytes_per_second = 0.5, 1.2e9
    for _ in range(ONSET + 90):
        for node in nodes:
            report = node.report(now[0])
            ingest.accept(streams[node.node_id], report, report.SerializeToString())
        now[0] += 1.0
        await ingest.flusher.flush()
    return writer, alerting, ingest


def test_time_ends_a_job_whose_nodes_all_stopped_and_its_alert_outlives_no_restart(tmp_path: Path) -> None:
    asyncio.run(_silent_job(tmp_path))


async def _silent_job(tmp_path: Path) -> None:
    now = [START]
    writer, alerting, ingest = await _slowed_job(tmp_path, now)

    def straggler_alerts() -> set[str]:
        return {a.node_id for a in writer.call_sync(alerting.recent, False) if a.name == "JobStraggler"}

    assert straggler_alerts() == {"node-1"}
    # Every node stops at once: no report drives the roll-up any more; its clock does.
    config = ingest.detector_config
    step = config.evaluate_seconds / 2
    ended_after = None
    for tick in range(1, 40):
        now[0] += step
        await ingest.tick_jobs()
        await ingest.flusher.flush()
        if not straggler_alerts():
            ended_after = tick * step
            break
    assert ended_after is not None and ended_after <= config.window_seconds + config.evaluate_seconds
    assert ingest.jobs.verdicts() == ()
    writer.close()


def test_a_job_alert_the_restarted_collector_no_longer_judges_resolves(tmp_path: Path) -> None:
    asyncio.run(_restart(tmp_path))


async def _restart(tmp_path: Path) -> None:
    now = [START]
    writer, alerting, ingest = await _slowed_job(tmp_path, now)
    await ingest.flusher.flush(final=True)
    writer.close()
    # The collector restarts; the job's nodes went elsewhere (or stopped): nobody judges the job here.
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: now[0])
    firing = [a for a in writer.call_sync(alerting.recent, False) if a.name == "JobStraggler"]
    assert [a.node_id for a in firing] == ["node-1"]
    config = ingest.detector_config
    for _ in range(int((config.window_seconds + config.evaluate_seconds) / 5) + 1):
        now[0] += 5.0
        await ingest.tick_jobs()
        await ingest.flusher.flush()
    assert [a for a in writer.call_sync(alerting.recent, False) if a.name == "JobStraggler"] == []
    writer.close()


def test_a_job_whose_nodes_all_said_a_stopping_goodbye_ends_at_once_and_its_alert_resolves(tmp_path: Path) -> None:
    asyncio.run(_stopped_job(tmp_path))


async def _stopped_job(tmp_path: Path) -> None:
    now = [START]
    writer, alerting, ingest = await _slowed_job(tmp_path, now)

    def job_alerts() -> list[tuple[str, str]]:
        recent = writer.call_sync(alerting.recent, True)
        return [(a.node_id, "resolved" if a.ends_at else "firing") for a in recent if a.name == "JobStraggler"]

    assert job_alerts() == [("node-1", "firing")]
    # The agents stop cleanly one after another, the collector's clock standing still: no silence
    # ends the job here, only the goodbyes.
    members = sorted(ingest.nodes)
    for node_id in members:
        stream = ingest.nodes[node_id].stream
        assert stream is not None
        stream.goodbye = stream.stopping = True
        ingest.detach(stream)
        if node_id != members[-1]:  # nodes still in it: the job goes on, the leaver noted
            (verdict,) = ingest.jobs.verdicts()
            assert node_id not in ingest.jobs.jobs.membership.jobs[verdict.job].members
    await ingest.flusher.flush()
    assert ingest.jobs.verdicts() == ()
    assert job_alerts() == [("node-1", "resolved")]
    assert all(ingest.jobs.jobs_of(n) == () for n in members)
    writer.close()
