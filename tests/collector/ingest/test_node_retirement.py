"""Nodes leave: an operator forgets one, or one stays silent past the retirement age. Through a
running collector: its row, watermarks and stored reports go, its NodeDown resolves (in the
sinks too), it stops counting toward ``--max-nodes``, it is not reloaded after a restart, and
it comes back as a new node; its per-minute history stays."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc

from tests.fakes.fleet import Agent, Collector, cli, free_port, processes, wait_for
from tests.fakes.http_receiver import http_receiver
from tests.fakes.ingest_client import framed, hello_message, streamed
from tests.fakes.trees import REPO


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
    found = re.findall(r'^nodeagent_collector_nodes_retired_total\{reason="(\w+)"\} (\S+)$', collector.metrics(), re.M)
    return {reason: float(value) for reason, value in found}


def test_forget_retires_a_node_resolves_its_node_down_and_keeps_its_minutes(tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    config.write_text("[alerts]\nnode_down_seconds = 1.0\n")
    with http_receiver() as hooks, processes() as started:
        collector = Collector(
            db=tmp_path / "c.db", port=free_port(), args=["--config", str(config), "--webhook-url", hooks.url]
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
    collector = Collector(db=tmp_path / "c.db", port=free_port(), args=["--retire-after-seconds", "2"])
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            assert _send(channel, "quiet", range(1, 4)) == (grpc.StatusCode.OK, 3)
        assert [n["node_id"] for n in collector.nodes()] == ["quiet"]
        quiet_since = time.monotonic()
        assert wait_for(lambda: not collector.nodes(), 15)
        waited = time.monotonic() - quiet_since
        retired = _retired(collector)
    log = [json.loads(line) for line in (tmp_path / "c.log0").read_text().splitlines() if line.startswith("{")]
    assert 1.0 < waited < 10
    assert retired == {"forgotten": 0.0, "silent": 1.0}
    assert [(e["node"], e["reason"]) for e in log if e["event"] == "node retired"] == [("quiet", "silent")]


def test_nodes_that_come_and_go_never_hold_the_max_nodes_slots_for_good(tmp_path: Path) -> None:
    """A rented fleet whose host names come and go: with ``--max-nodes 3``, a node forgotten or
    silent past the age frees its slot for the next one, across a restart too."""
    collector = Collector(
        db=tmp_path / "c.db", port=free_port(), args=["--max-nodes", "3", "--retire-after-seconds", "3"]
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
