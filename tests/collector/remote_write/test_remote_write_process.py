"""The remote-write process beside a real collector: its queue's drops are exact while the
receiver is away, it is started again after SIGKILL and dies with the collector, and ingest acks
whatever becomes of it (stopped with SIGSTOP: every report acked, what was not handed over
counted)."""

from __future__ import annotations

import os
import re
import signal
import time
from pathlib import Path

import psutil

from nodeagent.collector.remote_write.config import MIN_HANDOVER_BYTES
from tests.fakes.fleet import Collector, free_port, processes, wait_for
from tests.fakes.http_receiver import http_receiver
from tests.fakes.remote_write_node import Node

QUEUE_SAMPLES = 10_000

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect); the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1


def _value(text: str, name: str, **labels: str) -> float:
    """One sample of the collector's /metrics (labels in any order)."""
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', line.split(" ")[0]))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"{name}{labels} not in /metrics:\n{text[-3000:]}")


def _samples(text: str, result: str) -> float:
    return _value(text, "nodeagent_remote_write_samples_total", result=result)


def _child(collector: Collector) -> psutil.Process:
    assert collector.proc is not None
    children = [
        p for p in psutil.Process(collector.proc.pid).children() if "remote_write.child" in " ".join(p.cmdline())
    ]
    assert len(children) == 1, children
    return children[0]


def test_with_the_receiver_away_the_queue_drops_exactly_what_it_cannot_hold(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/api/v1/write"
    collector = Collector(
        db=tmp_path / "c.db", port=free_port(), workers=ONE_PROCESS,
        args=["--remote-write-url", closed, "--remote-write-resolution-seconds", "0",
              "--remote-write-queue-samples", str(QUEUE_SAMPLES)],
    )  # fmt: skip
    node = Node("rw-away", "fast-cloud", time.time() - 300)
    with processes() as started:
        started.append(collector.start())
        node.stream(collector.address, node.reports(150))
        offered = node.series_total
        assert offered > 2 * QUEUE_SAMPLES

        def settled() -> bool:
            text = collector.metrics()
            return (
                _samples(text, "dropped_queue_full") + _value(text, "nodeagent_remote_write_queued_samples") == offered
            )

        assert wait_for(settled, 60, 0.2), collector.metrics()[-3000:]
        text = collector.metrics()
    kept = _value(text, "nodeagent_remote_write_queued_samples")
    assert 0 < kept <= QUEUE_SAMPLES
    assert _samples(text, "dropped_queue_full") == offered - kept
    assert _samples(text, "sent") == 0
    assert _value(text, "nodeagent_remote_write_reports_handed_over_total") == 150
    for reason in ("handover_full", "process_down", "too_large", "process_died"):
        assert _value(text, "nodeagent_remote_write_reports_dropped_total", reason=reason) == 0
    assert _value(text, "nodeagent_remote_write_requests_total", result="failed") > 0


def test_the_process_is_started_again_after_sigkill_and_dies_with_the_collector(tmp_path: Path) -> None:
    node = Node("rw-restart", "fast-cloud", time.time() - 300)
    with http_receiver() as receiver, processes() as started:
        collector = Collector(
            db=tmp_path / "c.db", port=free_port(), workers=ONE_PROCESS,
            args=["--remote-write-url", receiver.url, "--remote-write-resolution-seconds", "0"],
        )  # fmt: skip
        started.append(collector.start())
        node.stream(collector.address, node.reports(20))
        first = node.series_total
        assert wait_for(lambda: _samples(collector.metrics(), "sent") == first, 30, 0.1), collector.metrics()[-2000:]
        child = _child(collector)
        child.send_signal(signal.SIGKILL)
        child.wait(10)

        def restarted() -> bool:
            return _value(collector.metrics(), "nodeagent_remote_write_process_restarts_total") == 1

        assert wait_for(restarted, 30, 0.1), collector.metrics()[-2000:]
        again = _child(collector)
        assert again.pid != child.pid
        node.stream(collector.address, node.reports(20))
        # The counters go on from the dead process's; everything after the restart arrives.
        assert wait_for(lambda: _samples(collector.metrics(), "sent") == node.series_total, 30, 0.1), (
            collector.metrics()[-2000:]
        )
        assert collector.reports("rw-restart") == 40
        # Killed with its queue empty and every report read: nothing to count as lost.
        text = collector.metrics()
        assert _samples(text, "lost_process_died") == 0
        assert _value(text, "nodeagent_remote_write_reports_dropped_total", reason="process_died") == 0
        # The collector killed outright: the parent-death signal ends the child.
        collector.kill(signal.SIGKILL)
        again.wait(10)
        assert not psutil.pid_exists(again.pid) or again.status() == psutil.STATUS_ZOMBIE


def test_ingest_acks_every_report_while_the_process_is_stopped(tmp_path: Path) -> None:
    # Up to 8,000 reports of 1 s each (far more than fill the buffer), all in the past (the collector
    # refuses reports from the future).
    nodes = [Node(f"rw-stopped-{i}", "fast-cloud", time.time() - 4200) for i in range(2)]
    with http_receiver() as receiver, processes() as started:
        collector = Collector(
            db=tmp_path / "c.db", port=free_port(), workers=ONE_PROCESS,
            # The smallest hand-over buffer: full after a few hundred reports, not thousands.
            args=["--remote-write-url", receiver.url, "--remote-write-resolution-seconds", "0",
                  "--remote-write-handover-bytes", str(MIN_HANDOVER_BYTES)],
        )  # fmt: skip
        started.append(collector.start())
        child = _child(collector)
        os.kill(child.pid, signal.SIGSTOP)
        try:
            total = 0
            # Enough reports to fill the socket's buffer however large the kernel let it be.
            for _ in range(40 * 2):
                for node in nodes:
                    node.stream(collector.address, node.reports(50))  # asserts every report acked
                total += 100
                if _value(collector.metrics(), "nodeagent_remote_write_reports_dropped_total", reason="handover_full"):
                    break
            text = collector.metrics()
            sent_while_stopped = _samples(text, "sent")
        finally:
            os.kill(child.pid, signal.SIGCONT)
        assert sum(collector.reports(node.node_id) for node in nodes) == total
        handed = _value(text, "nodeagent_remote_write_reports_handed_over_total")
        dropped = _value(text, "nodeagent_remote_write_reports_dropped_total", reason="handover_full")
        assert dropped > 0
        assert handed + dropped == total  # every report either handed over or counted
        assert sent_while_stopped == 0
        # Resumed: what was handed over is built and sent.
        assert wait_for(lambda: _samples(collector.metrics(), "sent") > 0, 60, 0.2)


def test_what_a_killed_process_held_is_counted_as_lost(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/api/v1/write"
    collector = Collector(
        db=tmp_path / "c.db", port=free_port(), workers=ONE_PROCESS,
        args=["--remote-write-url", closed, "--remote-write-resolution-seconds", "0"],
    )  # fmt: skip
    node = Node("rw-lost", "fast-cloud", time.time() - 300)
    with processes() as started:
        started.append(collector.start())
        node.stream(collector.address, node.reports(20))

        def queued() -> bool:
            return _value(collector.metrics(), "nodeagent_remote_write_queued_samples") == node.series_total

        assert wait_for(queued, 30, 0.1), collector.metrics()[-2000:]
        child = _child(collector)
        child.send_signal(signal.SIGKILL)
        child.wait(10)

        def restarted() -> bool:
            return _value(collector.metrics(), "nodeagent_remote_write_process_restarts_total") == 1

        assert wait_for(restarted, 30, 0.1)
        text = collector.metrics()
    assert _samples(text, "lost_process_died") == node.series_total
    assert _value(text, "nodeagent_remote_write_queued_samples") == 0
