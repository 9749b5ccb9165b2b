"""Every report arrives once: collector restarts and crashes, agent crashes, a full spool.

Real processes on loopback: ``nodeagent-collector serve`` on a SQLite file and ``nodeagent run``
sampling this machine, with ``--max-reports`` so the number of reports produced is known, and
``nodes --json`` saying how many distinct reports the collector stored.
"""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

from nodeagent.agent.delivery.recovery import decode_all
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for

FAST = ["--interval", "0.03", "--no-collector.gpu"]


def _agent(collector: Collector, node: str, *args: str) -> Agent:
    return Agent(["--collector", collector.address, "--node-id", node, *FAST, *args])


def test_collector_stopped_for_a_while_loses_nothing(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        agent = _agent(collector, "node-a", "--max-reports", "150", "--deadline", "60").start(tmp_path / "a.log")
        started.append(agent)
        time.sleep(1.0)
        collector.kill(signal.SIGTERM)  # a clean stop: the collector flushes and exits
        time.sleep(1.5)  # the agent keeps sampling into its spool meanwhile
        collector.start()
        code, summary = agent.wait(timeout=90)
        assert code == 0, agent.tail()
        node = collector.node("node-a")
    assert summary["produced"] == 150
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (150, 150, 0)
    assert summary["dropped_total"] == 0


def test_collector_killed_mid_stream_loses_nothing(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        agent = _agent(collector, "node-k", "--max-reports", "200", "--deadline", "90").start(tmp_path / "a.log")
        started.append(agent)
        for _ in range(3):
            time.sleep(0.8)
            collector.kill(signal.SIGKILL)
            time.sleep(0.4)
            collector.start()
        code, _summary = agent.wait(timeout=120)
        assert code == 0, agent.tail()
        node = collector.node("node-k")
    # Acks only follow commits, so a killed collector made the agent resend, and dedup kept one of each.
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (200, 200, 0)


def test_agent_killed_with_disk_spool_delivers_after_restart(tmp_path: Path) -> None:
    # One process, so that SIGSTOP freezes what acks (a front's workers would go on acking).
    collector = Collector(db=tmp_path / "c.db", port=free_port(), workers=1)
    spool = tmp_path / "spool"
    with processes() as started:
        started.append(collector.start())
        first = _agent(collector, "node-s", "--spool-dir", str(spool)).start(tmp_path / "a1.log")
        started.append(first)
        assert wait_for(lambda: collector.reports("node-s") >= 20, timeout=30), first.tail()
        # Freeze the collector: reports keep going into the spool but nothing more is acked.
        assert collector.proc is not None
        collector.proc.send_signal(signal.SIGSTOP)
        time.sleep(1.0)
        first.kill(signal.SIGKILL)
        collector.proc.send_signal(signal.SIGCONT)
        unacked = _spooled_seqs(spool)
        assert len(unacked) >= 10, "the frozen collector should have left reports unacknowledged"
        produced_before = unacked[-1]
        second = _agent(collector, "node-s", "--spool-dir", str(spool), "--max-reports", "30", "--deadline", "60")
        started.append(second.start(tmp_path / "a2.log"))
        code, summary = second.wait(timeout=90)
        assert code == 0, second.tail()
        node = collector.node("node-s")
    assert summary["last_seq"] == produced_before + 30  # same epoch, seq carried on
    assert node["epoch"] == summary["epoch"]
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (produced_before + 30,) * 2 + (0,)
    assert node["duplicates_total"] >= 0


def test_full_spool_drops_exactly_the_oldest_and_counts_them(tmp_path: Path) -> None:
    port = free_port()
    collector = Collector(db=tmp_path / "c.db", port=port)
    with processes() as started:
        # No collector yet: all 120 reports pile up in a spool that holds only part of them.
        agent = Agent(
            ["--collector", collector.address, "--node-id", "node-f", *FAST, "--max-reports", "120",
             "--deadline", "60", "--spool-max-bytes", str(64 * 1024)]
        ).start(tmp_path / "a.log")  # fmt: skip
        started.append(agent)
        time.sleep(120 * 0.03 + 1.5)
        started.append(collector.start())
        code, summary = agent.wait(timeout=90)
        assert code == 0, agent.tail()
        node = collector.node("node-f")
    dropped = summary["dropped_total"]
    assert 0 < dropped < 120
    # The collector got a contiguous run ending at the last report: exactly the oldest went.
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (120 - dropped, 120, 0)
    assert node["spool_dropped_reports_total"] == dropped


def test_reports_the_collector_has_are_never_counted_dropped(tmp_path: Path) -> None:
    # Reports the collector committed but the agent never learned of (its ack lost to a kill of
    # either side) are dropped by a small spool while the collector is down. Only the reports the
    # collector does not have may be counted as dropped: produced = stored + dropped, exactly, and
    # the agent's count is the collector's gap.
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    spool = tmp_path / "spool"
    small = ["--interval", "0.02", "--no-collector.gpu", "--spool-dir", str(spool), "--spool-max-bytes", str(64 * 1024)]
    with processes() as started:
        started.append(collector.start())
        first = Agent(["--collector", collector.address, "--node-id", "node-o", *small]).start(tmp_path / "a1.log")
        started.append(first)
        assert wait_for(lambda: collector.reports("node-o") >= 30, timeout=30), first.tail()
        # Killed, the agent's state file lags the acks it had (it is written once a second):
        # the restarted agent holds reports the collector already has.
        first.kill(signal.SIGKILL)
        collector.kill(signal.SIGKILL)
        second = Agent(
            ["--collector", collector.address, "--node-id", "node-o", *small, "--max-reports", "250",
             "--deadline", "120"]
        ).start(tmp_path / "a2.log")  # fmt: skip
        started.append(second)
        for _ in range(4):
            time.sleep(1.5)  # longer than the spool holds at this interval: it drops the oldest
            collector.start()
            time.sleep(0.6)
            collector.kill(signal.SIGKILL)
        collector.start()
        code, summary = second.wait(timeout=150)
        assert code == 0, second.tail()
        node = collector.node("node-o")
    produced = summary["last_seq"]  # one epoch across both agents: seqs 1..produced
    assert node["epoch"] == summary["epoch"]
    missing = produced - node["reports_total"]
    assert missing > 0, "the spool should have overflowed while the collector was down"
    assert node["last_seq"] == produced
    assert (summary["dropped_total"], node["gap_reports_total"]) == (missing, missing)
    assert summary["dropped_unresolved"] == 0


def _spooled_seqs(spool: Path) -> list[int]:
    """Seqs in the spool above the acked mark it recorded (which may lag: never too few)."""
    acked = json.loads((spool / "state.json").read_text())["acked_seq"]
    seqs: list[int] = []
    for segment in sorted(spool.glob("seg-*.log")):
        records, _torn = decode_all(segment.read_bytes())
        seqs.extend(r.seq for r in records if r.seq > acked)
    return seqs
