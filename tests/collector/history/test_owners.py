"""Whom each job is billed to, as the history notes it (``collector/history/owners.py``): a job's
account and namespace from its processes' identity, noted when the job shows and once a minute,
an owner that arrives late taken at the next minute; through a collector's ingest and flush to
``ledger --by account|namespace``, a flush that fails losing neither the owners nor the hours to
sum."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.owners import LOOK_AGAIN_SECONDS, JobOwners, job_owners
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.core.detector.verdict import NodeVerdict
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.job_reports import START, job_nodes, stream


def _report(*refs: pb.JobRef, mig: pb.JobRef | None = None, at: float = 0.0) -> pb.NodeReport:
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=START + at)
    for index, ref in enumerate(refs):
        report.gpus.add(index=index).processes.add(pid=100 + index, job=ref)
    if mig is not None:
        report.gpus.add(index=len(refs)).mig_instances.add(index=len(refs), uuid="MIG-1").processes.add(pid=9, job=mig)
    return report


def _verdict(*jobs: str) -> NodeVerdict:
    return NodeVerdict(
        node_id="n", time_unix_seconds=START, state="busy", cause=None, tier=None, starvation_ratio=None,
        interconnect_ratio=None, gpu_seconds_lost=0.0, needed_ingest_bytes_per_second=None, evidence={}, gpus=(),
        jobs=jobs,
    )  # fmt: skip


def test_a_jobs_owner_is_its_first_process_that_names_one_mig_instances_too() -> None:
    report = _report(
        pb.JobRef(job_key="torch/a"), pb.JobRef(job_key="torch/a", account="ml"),
        pb.JobRef(k8s_pod_uid="uid-1", k8s_namespace="team-a"), pb.JobRef(slurm_job_id="77"),
        mig=pb.JobRef(slurm_job_id="78", account="hpc"),
    )  # fmt: skip
    assert job_owners(report) == {"torch/a": ("ml", ""), "uid-1": ("", "team-a"), "78": ("hpc", "")}


def test_noted_when_a_job_shows_once_a_minute_and_when_it_changes_within_seconds() -> None:
    owners = JobOwners()
    a, b = pb.JobRef(job_key="torch/a"), pb.JobRef(job_key="torch/a", account="ml")
    owners.note("n", _report(a, at=0), _verdict("torch/a"), 60, new_minute=True)
    assert owners.pending == []  # no owner yet (the kubelet has not answered)
    owners.note("n", _report(b, at=1), _verdict("torch/a"), 60, new_minute=False)
    assert owners.pending == []  # the job is known: looked at again only a few seconds later
    owners.note("n", _report(b, at=1 + LOOK_AGAIN_SECONDS), _verdict("torch/a"), 60, new_minute=False)
    assert owners.pending == [("n", "torch/a", "ml", "", 60)]  # a short job's late owner is not lost
    owners.note("n", _report(b, at=12), _verdict("torch/a", "torch/b"), 60, new_minute=False)  # a new job: looked at
    owners.note("n", _report(b, at=20), _verdict("torch/a"), 60, new_minute=False)
    assert len(owners.pending) == 1  # torch/b names no owner, torch/a's has not changed
    owners.note("n", _report(b, at=60), _verdict("torch/a"), 120, new_minute=True)
    assert owners.pending[-1] == ("n", "torch/a", "ml", "", 120)  # the minute follows the job


def _fail_once(flusher: Any, when: Callable[[HistoryBatch], bool]) -> list[bool]:
    """Make the first of the flusher's writes whose history ``when`` picks fail, as a full disk
    would; the list it returns says whether one did."""
    write, failed = flusher._write, []

    def failing_once(*args: Any) -> Any:
        if not failed and when(args[3]):
            failed.append(True)
            raise OSError("disk full")
        return write(*args)

    flusher._write = failing_once
    return failed


def test_a_flush_that_fails_loses_no_owner_of_a_job_that_ends_before_it_is_noted_again(tmp_path: Path) -> None:
    """A job of seconds: its owner is in one flush only; that flush fails; the next writes it."""
    [node] = job_nodes("pod-uid-1", 1, gpus=2, prefix="k8s")
    node.jobs[0].namespace = "team-a"

    async def scenario() -> pb.LedgerResponse:
        config = ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", clock_bounds=None, flush_seconds=3600)
        server = CollectorServer(config)
        await server.start()
        try:
            flusher = server.ingest.flusher
            failed = _fail_once(flusher, lambda history: bool(history.owners))
            handle = StreamHandle(node.node_id, "test")
            server.ingest.attach(handle, pb.NodeInfo(node_id=node.node_id))
            start = START // 60 * 60 + 5
            for report in stream([node], 30, start=start):  # half a minute: noted once
                report.epoch, report.seq = 1, int(report.time_unix_seconds - start) + 1
                server.ingest.accept(handle, report, report.SerializeToString())
            with pytest.raises(OSError, match="disk full"):
                await flusher.flush()
            await flusher.flush(final=True)
            assert failed == [True]
            return await asyncio.to_thread(server.ask_ledger, pb.LedgerRequest(by="namespace"))
        finally:
            await server.stop(0.0)

    rows = {r.key: r for r in asyncio.run(scenario()).rows}
    assert set(rows) == {"team-a"} and list(rows["team-a"].jobs) == ["pod-uid-1"]


def _ledgers(tmp_path: Path, fail_a_flush: bool) -> dict[str, pb.LedgerResponse]:
    """Two jobs on three nodes over two hours, fed to a collector and flushed every ten minutes
    (the first flush past the first hour failing with ``fail_a_flush``); the ledger by account,
    namespace, job and the fleet."""
    nodes = job_nodes("torch/train", 2, gpus=2) + job_nodes("pod-uid-9", 1, gpus=2, prefix="k8s")
    for node in nodes[:2]:
        node.jobs[0].account = "ml"
    nodes[2].jobs[0].namespace = "team-a"
    start = START // 3600 * 3600 + 3000

    async def scenario() -> dict[str, pb.LedgerResponse]:
        config = ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", clock_bounds=None, flush_seconds=3600)
        server = CollectorServer(config)
        await server.start()
        try:
            flusher = server.ingest.flusher
            failed = _fail_once(flusher, lambda history: fail_a_flush and bool(history.compact))  # hours to sum
            streams: dict[str, StreamHandle] = {}
            for report in stream(nodes, 7200, start=start, every=5.0):
                report.epoch, report.seq = 1, int(report.time_unix_seconds - start) + 1
                handle = streams.get(report.node_id)
                if handle is None:
                    handle = streams[report.node_id] = StreamHandle(report.node_id, "test")
                    server.ingest.attach(handle, pb.NodeInfo(node_id=report.node_id))
                server.ingest.accept(handle, report, report.SerializeToString())
                if report.node_id == nodes[-1].node_id and (report.time_unix_seconds - start) % 600 == 0:
                    try:
                        await flusher.flush()
                    except OSError:
                        assert failed
            await flusher.flush(final=True)
            assert failed == ([True] if fail_a_flush else [])
            asks = {by: pb.LedgerRequest(by=by) for by in ("account", "namespace", "job", "fleet")}
            return {by: await asyncio.to_thread(server.ask_ledger, ask) for by, ask in asks.items()}
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def test_a_collectors_ledger_by_account_and_namespace(tmp_path: Path) -> None:
    ledgers = _ledgers(tmp_path, fail_a_flush=False)
    accounts = {r.key: r for r in ledgers["account"].rows}
    namespaces = {r.key: r for r in ledgers["namespace"].rows}
    jobs = {r.key: r for r in ledgers["job"].rows}
    [fleet] = ledgers["fleet"].rows
    assert set(accounts) == {"ml", ""} and set(namespaces) == {"team-a", ""}
    assert list(accounts["ml"].jobs) == ["torch/train"] and list(accounts["ml"].nodes) == ["node-0", "node-1"]
    assert list(namespaces["team-a"].jobs) == ["pod-uid-9"] and list(accounts[""].jobs) == ["pod-uid-9"]
    assert accounts["ml"].gpu_hours_held == pytest.approx(jobs["torch/train"].gpu_hours_held)
    assert accounts["ml"].gpu_hours_held == pytest.approx(2 * 2 * 2, rel=0.05)  # 2 nodes, 2 GPUs, 2 hours
    for by in (accounts, namespaces):
        assert sum(r.gpu_hours_held for r in by.values()) == pytest.approx(fleet.gpu_hours_held)
    assert (jobs["torch/train"].account, jobs["pod-uid-9"].namespace) == ("ml", "team-a")


def test_a_flush_that_fails_loses_neither_the_owners_nor_the_hours_to_sum(tmp_path: Path) -> None:
    (tmp_path / "ok").mkdir()
    (tmp_path / "failed").mkdir()
    clean, failed = _ledgers(tmp_path / "ok", fail_a_flush=False), _ledgers(tmp_path / "failed", fail_a_flush=True)
    for by in ("account", "namespace", "job"):
        assert {r.key: r.gpu_hours_held for r in failed[by].rows} == pytest.approx(
            {r.key: r.gpu_hours_held for r in clean[by].rows}
        )
