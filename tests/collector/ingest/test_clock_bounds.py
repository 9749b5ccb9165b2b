"""Reports from the future (or from long ago): a running collector acknowledges a report whose
time is too far from its clock but stores nothing of it, counts it, logs it now and then, and
shows each node's clock skew; a sped-up simulated node never runs ahead of the wall clock."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import grpc

from tests.fakes.fleet import Agent, Collector, cli, free_port, processes
from tests.fakes.ingest_client import framed, hello_message, streamed

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

HOUR = 3600.0


def _metric(text: str, name: str, labels: str) -> float | None:
    found = re.search(rf"^{name}\{{{re.escape(labels)}\}} (\S+)$", text, re.M)
    return None if found is None else float(found.group(1))


def test_reports_out_of_the_clock_bounds_are_acked_not_stored(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    now = time.time()
    # seq: its time. Good reports, one from an hour ahead, one from two days back, then a run of
    # reports an hour ahead (a clock set wrong): all acknowledged, only the good ones stored.
    times = {1: now - 5, 2: now + HOUR, 3: now - 4, 4: now - 2 * 24 * HOUR, 5: now - 3}
    times |= {seq: now + HOUR + seq for seq in range(6, 16)}
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            sent = streamed(channel, [hello_message("skewed"), *(framed("skewed", 1, s, t) for s, t in times.items())])
            good = streamed(channel, [hello_message("on-time"), framed("on-time", 1, 1)])
        nodes = {n["node_id"]: n for n in collector.nodes()}
        table = cli("collector", "nodes", "--collector", collector.address)
        metrics = collector.metrics()
        rows = json.loads(cli("collector", "history", "skewed", "--json", "--collector", collector.address))
    log = [json.loads(line) for line in (tmp_path / "c.log0").read_text().splitlines() if line.startswith("{")]
    assert sent == (grpc.StatusCode.OK, 15) and good == (grpc.StatusCode.OK, 1)
    skewed, on_time = nodes["skewed"], nodes["on-time"]
    assert (skewed["reports_total"], skewed["gap_reports_total"], skewed["last_seq"]) == (3, 0, 15)
    assert skewed["clock_refused_reports_total"] == 12
    assert HOUR < skewed["clock_skew_seconds"] < HOUR + 30  # its newest report's
    assert on_time["clock_refused_reports_total"] == 0 and -5 < on_time["clock_skew_seconds"] <= 5
    assert sum(row["samples"] for row in rows if row["gpu"] is None) == 3  # the history took only those
    assert re.search(r"^skewed .* \+1\.0h +12$", table, re.M), table
    assert _metric(metrics, "nodeagent_ingest_reports_refused_total", 'reason="clock_ahead"') == 11
    assert _metric(metrics, "nodeagent_ingest_reports_refused_total", 'reason="clock_behind"') == 1
    assert _metric(metrics, "nodeagent_node_clock_refused_reports_total", 'node="skewed"') == 12
    skew = _metric(metrics, "nodeagent_node_clock_skew_seconds", 'node="skewed"')
    assert skew is not None and HOUR < skew < HOUR + 30
    # Logged once a minute per node at most: the first refusal, not the eleven after it.
    refusals = [e for e in log if e["event"].startswith("reports refused for their time")]
    assert [(e["node"], e["reason"], e["refused"]) for e in refusals] == [("skewed", "clock_ahead", 1)]


def test_a_sped_up_simulated_node_stays_behind_the_wall_clock(tmp_path: Path) -> None:
    """``--time-scale 30`` for 10 s of wall clock: five simulated minutes that end about now, not
    five minutes in the future, and none of them refused."""
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        agent = Agent(
            ["--collector", collector.address, "--node-id", "sim", "--simulate", "ordinary-cloud", "--time-scale",
             "30", "--interval", "0.05", "--max-reports", "200", "--deadline", "60"]
        ).start(tmp_path / "agent.log")  # fmt: skip
        started.append(agent)
        status, summary = agent.wait(90)
        done = time.time()
        node = collector.node("sim")
        rows = json.loads(cli("collector", "history", "sim", "--json", "--collector", collector.address))
    minutes = [row["time_unix_seconds"] for row in rows if row["gpu"] is None]
    assert status == 0, agent.tail()
    assert (summary["produced"], node["reports_total"], node["clock_refused_reports_total"]) == (200, 200, 0)
    assert -60 < node["clock_skew_seconds"] <= 0.5
    assert max(minutes) <= done and max(minutes) - min(minutes) >= 4 * 60
