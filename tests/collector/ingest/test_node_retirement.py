"""Nodes leave: an operator forgets one, or one stays silent past the retirement age. Through a
running collector: its row, watermarks and stored reports go, its NodeDown resolves (in the
sinks too), it stops counting toward ``--max-nodes``, it is not reloaded after a restart, and
it comes back as a new node; its per-minute history stays. In process: the retiring flush is
all or nothing, and silence counts from the collector's start."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import grpc
import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.node_state import StreamHandle, StreamRefusedError
from nodeagent.collector.ingest.retire import RetireRefusedError
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.alert_sinks import CapturingSink
from tests.fakes.fleet import Agent, Collector, cli, free_port, processes, wait_for
from tests.fakes.http_receiver import http_receiver
from tests.fakes.ingest_client import framed, hello_message, small_report, streamed
from tests.fakes.trees import REPO

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1


def _forget(collector: Collector, node: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "forget", node, "--collector", collector.address],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def _send(channel: grpc.Channel, node: str, seqs: range) -> tuple[grpc.StatusCode, int]:
    return streamed(channel, [hello_message(node), *(framed(node, 1, seq) for seq in seqs)])


def _alerts(collector: Collector) -> list[tuple[str, str, str]]:
    out = json.loads(cli("collector", "alerts", "--all", "--json", "--collector", collector.address))
    return sorted((a["name"], a["node_id"], a["state"]) for a in out)


def _retired(collector: Collector) -> dict[str, float]:
    found = re.findall(r'^nodeagent_ingest_nodes_retired_total\{reason="(\w+)"\} (\S+)$', collector.metrics(), re.M)
    return {reason: float(value) for reason, value in found}


def test_forget_retires_a_node_resolves_its_node_down_and_keeps_its_minutes(tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    config.write_text("[alerts]\nnode_down_seconds = 1.0\n")
    with http_receiver() as hooks, processes() as started:
        collector = Collector(
            workers=ONE_PROCESS,
            db=tmp_path / "c.db",
            port=free_port(),
            args=["--config", str(config), "--webhook-url", hooks.url],
        )
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            assert _send(channel, "gone", range(1, 6)) == (grpc.StatusCode.OK, 5)
        live = Agent(["--collector", collector.address, "--node-id", "live", "--simulate", "fast-cloud",
                      "--interval", "0.2"]).start(tmp_path / "live.log")  # fmt: skip
        started.append(live)
        assert wait_for(lambda: ("NodeDown", "gone", "firing") in _alerts(collector), 15)
        assert wait_for(lambda: collector.reports("live") > 0, 30), live.tail()
        minutes_before = json.loads(cli("collector", "history", "gone", "--json", "--collector", collector.address))

        connected = _forget(collector, "live")
        forgotten = _forget(collector, "gone")
        again = _forget(collector, "gone")
        nodes = {n["node_id"] for n in collector.nodes()}
        alerts = _alerts(collector)
        minutes_after = json.loads(cli("collector", "history", "gone", "--json", "--collector", collector.address))
        retired = _retired(collector)
        resolved = [
            hook for hook in hooks.wait_accepted(2) if (hook["kind"], hook["alert"]["name"]) == ("resolved", "NodeDown")
        ]
        collector.kill(signal.SIGTERM)
        collector.start()
        after_restart = {n["node_id"] for n in collector.nodes()}
        with grpc.insecure_channel(collector.address) as channel:
            back = _send(channel, "gone", range(1, 3))
        returned = collector.node("gone")
    log = [json.loads(line) for line in (tmp_path / "c.log0").read_text().splitlines() if line.startswith("{")]
    assert (connected.returncode, connected.stdout) == (1, "")
    assert len(connected.stderr.splitlines()) == 1 and "FAILED_PRECONDITION" in connected.stderr
    assert forgotten.returncode == 0, forgotten.stderr
    assert forgotten.stdout.splitlines() == ["forgot gone: 5 stored reports deleted; its per-minute history stays"]
    assert again.returncode == 1 and len(again.stderr.splitlines()) == 1 and "NOT_FOUND" in again.stderr
    assert nodes == {"live"}
    assert ("NodeDown", "gone", "resolved") in alerts and ("NodeDown", "gone", "firing") not in alerts
    assert [hook["alert"]["node_id"] for hook in resolved] == ["gone"]
    assert minutes_before and minutes_after == minutes_before
    assert retired == {"forgotten": 1.0, "silent": 0.0}
    assert "live" in after_restart and "gone" not in after_restart  # not reloaded from the store
    # Back as a new node: its seqs count afresh (the old watermark would call 1 and 2 duplicates).
    assert back == (grpc.StatusCode.OK, 2)
    assert (returned["reports_total"], returned["duplicates_total"]) == (2, 0)
    assert [(e["node"], e["reason"], e["reports_deleted"]) for e in log if e["event"] == "node retired"] == [
        ("gone", "forgotten", 5)
    ]


def test_a_node_silent_past_the_age_is_retired(tmp_path: Path) -> None:
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(), args=["--retire-after-seconds", "2"]
    )
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            assert _send(channel, "quiet", range(1, 4)) == (grpc.StatusCode.OK, 3)
        # Silent from here. Held until then (the retirement below names it); a listing here
        # could itself take past the age on a busy machine, so none is asked for.
        assert wait_for(lambda: not collector.nodes(), 30)
        retired = _retired(collector)
    log = [json.loads(line) for line in (tmp_path / "c.log0").read_text().splitlines() if line.startswith("{")]
    assert retired == {"forgotten": 0.0, "silent": 1.0}
    # Retired for its silence past the age (2 s), by the collector's own clock, not before it.
    assert [(e["node"], e["reason"], e["silent_seconds"] >= 2) for e in log if e["event"] == "node retired"] == [
        ("quiet", "silent", True)
    ]


def test_nodes_that_come_and_go_never_hold_the_max_nodes_slots_for_good(tmp_path: Path) -> None:
    """A rented fleet whose host names come and go: with ``--max-nodes 3``, a node forgotten or
    silent past the age frees its slot for the next one, across a restart too."""
    collector = Collector(
        workers=ONE_PROCESS,
        db=tmp_path / "c.db",
        port=free_port(),
        args=["--max-nodes", "3", "--retire-after-seconds", "3"],
    )

    def joins(channel: grpc.Channel, node: str) -> bool:
        return wait_for(lambda: _send(channel, node, range(1, 3))[0] == grpc.StatusCode.OK, 20, interval=0.3)

    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            first = [_send(channel, f"a{i}", range(1, 3)) for i in range(3)]
            full = _send(channel, "b0", range(1, 3))
            forgotten = _forget(collector, "a0")
            b0 = _send(channel, "b0", range(1, 3))  # into a0's slot at once
            # a1, a2 and b0 are silent now: each newcomer gets in once one of them has retired.
            newcomers = [joins(channel, node) for node in ("c0", "c1", "c2")]
            retired = _retired(collector)
        collector.kill(signal.SIGTERM)
        collector.start()
        reloaded = sorted(n["node_id"] for n in collector.nodes())
        with grpc.insecure_channel(collector.address) as channel:
            # The reloaded nodes count, and their silence counts from this start, not from before it.
            full_after_restart = _send(channel, "d0", range(1, 3))
            later = joins(channel, "d0")
        listed = [n["node_id"] for n in collector.nodes()]
    assert first == [(grpc.StatusCode.OK, 2)] * 3
    assert full[0] == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert forgotten.returncode == 0, forgotten.stderr
    assert b0 == (grpc.StatusCode.OK, 2)
    assert newcomers == [True, True, True]
    assert retired["forgotten"] == 1 and retired["silent"] >= 3
    assert reloaded and set(reloaded) <= {"c0", "c1", "c2"}
    assert full_after_restart[0] == (grpc.StatusCode.RESOURCE_EXHAUSTED if len(reloaded) == 3 else grpc.StatusCode.OK)
    assert later and "d0" in listed


def test_a_retiring_flush_is_all_or_nothing_and_silence_counts_from_the_start(tmp_path: Path) -> None:
    asyncio.run(_retiring(tmp_path))


async def _retiring(tmp_path: Path) -> None:
    now = [time.time()]
    sink = CapturingSink()
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(node_down_seconds=1.0), [sink])
    ingest = build_ingest(writer, alerting, clock=lambda: now[0], retire_after_seconds=3600.0)
    streams = {node: StreamHandle(node, "test") for node in ("gone", "live")}
    for node, stream in streams.items():
        ingest.attach(stream, pb.NodeInfo(node_id=node))
        ingest.accept(stream, small_report(node, 1, now[0]), small_report(node, 1, now[0]).SerializeToString())
    await ingest.flusher.flush()
    # A report whose open minute the next flush does not write (written 1 s of reports ago).
    ingest.accept(streams["gone"], small_report("gone", 2, now[0] + 1), small_report("gone", 2).SerializeToString())
    ingest.detach(streams["gone"])
    now[0] += 2.0
    await ingest.flusher.flush()  # NodeDown fires for both

    with pytest.raises(RetireRefusedError) as connected:
        await ingest.forget("live")
    with pytest.raises(RetireRefusedError) as unknown:
        await ingest.forget("nobody")
    store_write = writer.store.write

    def locked(*_args: Any) -> dict[str, str]:
        raise sqlite3.OperationalError("database is locked")

    writer.store.write = locked  # type: ignore[method-assign]
    failing = asyncio.create_task(ingest.forget("gone"))
    await asyncio.sleep(0)
    with pytest.raises(sqlite3.OperationalError):
        await ingest.flusher.flush()
    with pytest.raises(RetireRefusedError) as unavailable:
        await failing
    kept = "gone" in ingest.nodes and not ingest.nodes["gone"].retiring
    writer.store.write = store_write  # type: ignore[method-assign]

    forgotten = asyncio.create_task(ingest.forget("gone"))
    await asyncio.sleep(0)
    flush = asyncio.create_task(ingest.flusher.flush())
    await asyncio.sleep(0)  # the flush has marked it and waits on the store
    with pytest.raises(StreamRefusedError) as meanwhile:
        ingest.attach(StreamHandle("gone", "test"), pb.NodeInfo(node_id="gone"))
    await flush
    deleted = await forgotten
    stored = {row.node_id for row in writer.call_sync(writer.store.nodes.load)}
    minutes = writer.call_sync(writer.store.history.minutes, "gone", None, 0.0, None)
    reports = writer.call_sync(writer.store.history.reports, "gone", 0.0, None)
    alerts = {(a.name, a.node_id, a.ends_at is not None) for a in writer.call_sync(alerting.recent, True)}
    back = StreamHandle("gone", "test")
    ingest.attach(back, pb.NodeInfo(node_id="gone"))
    taken_again = ingest.accept(back, small_report("gone", 1, now[0]), b"")
    writer.call_sync(alerting.close)
    writer.close()

    assert (connected.value.code, unknown.value.code, unavailable.value.code) == (
        "FAILED_PRECONDITION", "NOT_FOUND", "UNAVAILABLE",
    )  # fmt: skip
    assert "database is locked" in unavailable.value.detail and kept
    assert (meanwhile.value.code, meanwhile.value.reason) == ("UNAVAILABLE", "node_retiring")
    assert deleted == 2 and stored == {"live"} and reports == []
    assert sum(m.samples for m in minutes if m.gpu == -1) == 2  # its open minute went out first
    assert ("NodeDown", "gone", True) in alerts and ("NodeDown", "live", False) in alerts
    assert [(t.kind, t.alert.node_id) for t in sink.transitions if t.alert.name == "NodeDown"][-1] == (
        "resolved", "gone",
    )  # fmt: skip
    assert taken_again and ingest.retirement.retired_total == {"forgotten": 1, "silent": 0}

    # A collector started long after the node's last report gives it the whole age from its start.
    later = [now[0] + 30 * 86400]
    writer = StoreWriter(tmp_path / "c.db")
    ingest = build_ingest(writer, Alerting(AlertConfig(), []), clock=lambda: later[0], retire_after_seconds=3600.0)
    await ingest.flusher.flush()
    at_start = set(ingest.nodes)
    later[0] += 3600.0
    await ingest.flusher.flush()
    after_the_age = set(ingest.nodes)
    writer.call_sync(ingest.alerting.close)
    writer.close()
    assert at_start == {"live"} and after_the_age == set()
    assert ingest.retirement.retired_total == {"forgotten": 0, "silent": 1}
