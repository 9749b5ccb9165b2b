"""loadgen drives a real collector with simulated 8-GPU nodes; the ingest benchmark runs."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.core.transport.rendezvous import owner_index
from tests.collector.workers.front_process import running_front
from tests.conftest import require
from tests.fakes.fleet import Collector, cli, free_port, processes
from tests.fakes.trees import REPO
from tests.fakes.tsdb import RECEIVERS


def test_loadgen_streams_simulated_nodes_and_every_report_is_stored(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        out = cli("collector", "loadgen", "--collector", collector.address, "--nodes", "30", "--rate", "4",
                  "--duration", "2", "--processes", "2", "--json", timeout=60)  # fmt: skip
        nodes = collector.nodes()
    result = json.loads(out)
    assert (result["nodes"], result["streams_failed"]) == (30, 0)
    assert result["acked"] == result["sent"] == sum(n["reports_total"] for n in nodes)
    assert result["sent"] >= 30 * 4 * 2 * 0.9
    assert {n["gpu_count"] for n in nodes} == {8}
    # The wire budget of an 8-GPU report, and what an A800's agent adds for its GPUs without GPM:
    # ten power readings between reports and the computing source, 60 bytes a GPU.
    assert result["bytes_per_report"] <= 1500 + 8 * 60
    # Generating has a cost of its own, measured over the load's window only.
    assert 0 < result["cpu_seconds"] < 2 * 2 * 1.5  # two processes, two seconds, some slack


def test_ingest_benchmark_runs_against_the_reference() -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "ingest_throughput.py"), "--loads", "40", "--seconds", "2",
         "--processes", "1"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    row = next(line.split() for line in done.stdout.splitlines() if line.split()[:2] == ["1", "40"])
    assert row[2] == row[3]  # sent == acked
    assert float(row[6]) >= float(row[7]) > 0  # the collector's CPU per report, its main thread's part
    assert float(row[9]) > 0  # the load generator's CPU per report
    summary = re.search(r"workers 1: sustained 40 reports/s; .* gRPC floor (\d+) us at \d+/s \(ratio ([\d.]+)\)",
                        done.stdout)  # fmt: skip
    assert summary, done.stdout
    assert int(summary.group(1)) > 0 and float(summary.group(2)) > 0
    assert "reference (read + ack, nothing else):" in done.stdout and "its loop would saturate near" in done.stdout


def test_ingest_benchmark_runs_with_remote_write_and_without_history() -> None:
    """The benchmark's other modes, a short smoke run: remote write to its own receiver (the
    acked share, samples built and sent, CPU per sample printed), history off."""
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "ingest_throughput.py"), "--loads", "40", "--seconds", "2",
         "--processes", "1", "--history", "off", "--remote-write", "on",
         "--collector-cpus", "0", "--loadgen-cpus", "0"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    assert "history off, remote write on" in done.stdout
    # Pinned (taskset), as a many-core machine runs it to keep the load generator off the collector's cores.
    assert "collector on CPUs 0, load generator (1 processes) on CPUs 0" in done.stdout
    # Whether one pinned core sustains 40 a second is this machine's speed (and the other tests'
    # load on CPU 0), which the benchmark prints and this test does not judge; what it counts must
    # add up whatever the load.
    assert re.search(r"workers 1: sustained \d+ reports/s", done.stdout), done.stdout
    pushed = _REMOTE_WRITE_LINE.search(done.stdout)
    assert pushed, done.stdout
    assert 0 < float(pushed["acked"]) <= 100.0
    # Every acknowledged report was handed to the remote-write process (none refused: history off).
    assert int(pushed["handed"]) == int(pushed["acked_reports"]) > 0 and int(pushed["dropped"]) == 0
    assert int(pushed["built"]) >= int(pushed["acked_reports"]) * 50  # every report's series (over 50 for 8 GPUs)
    assert int(pushed["sent"]) == int(pushed["built"])
    assert float(pushed["cpu"]) > 0
    assert "history on disk" not in done.stdout


@pytest.mark.parametrize("kind", ["prometheus", "victoria-metrics"])
def test_ingest_benchmark_writes_to_a_real_receiver(kind: str) -> None:
    """With --receiver, the receiver's own count of samples received is printed against what
    the collector offered."""
    require(RECEIVERS[kind].available(), f"needs {kind} (Debian package; `make system-deps`)")
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / "ingest_throughput.py"), "--loads", "40", "--seconds", "2",
         "--processes", "1", "--history", "off", "--remote-write", "on", "--receiver", kind],
        capture_output=True, text=True, timeout=180, check=True,
    )  # fmt: skip
    pushed = _REMOTE_WRITE_LINE.search(done.stdout)
    assert pushed, done.stdout
    received = re.search(rf"{kind} received (\d+) samples: ([\d.]+)% of the (\d+)", done.stdout)
    assert received, done.stdout
    assert int(received[1]) == int(pushed["sent"]) == int(received[3])


_REMOTE_WRITE_LINE = re.compile(
    r"acked (?P<acked>[\d.]+)% of the reports sent \((?P<acked_reports>\d+)\); "
    r"remote write: (?P<handed>\d+) reports handed over, "
    r"(?P<dropped>\d+) not \(counted\), (?P<built>\d+) samples built \(\d+ per report, \d+/s\), (?P<sent>\d+) sent, "
    r"\d+ dropped; (?P<cpu>[\d.]+) us"
)


def test_loadgen_follows_the_fronts_redirect_to_each_nodes_owner(tmp_path: Path) -> None:
    """Against a real ``serve --workers 2``: every stream is redirected once, as an agent's is, and
    lands on the worker that owns its node; what each worker took is what its database stored."""
    nodes = 30
    with running_front(tmp_path, workers=2) as front:
        out = cli("collector", "loadgen", "--collector", front.address, "--nodes", str(nodes), "--rate", "4",
                  "--duration", "2", "--processes", "2", "--json", timeout=90)  # fmt: skip
        stored = Collector(db=front.db, port=int(front.address.rpartition(":")[2])).nodes()
    result = json.loads(out)
    assert (result["streams_redirected"], result["streams_failed"]) == (nodes, 0), result["failures"]
    assert result["acked"] == result["sent"] >= nodes * 4 * 2 * 0.9
    owners = [0, 0]
    for node in stored:
        owners[owner_index(node["node_id"], 2)] += node["reports_total"]
    assert len(stored) == nodes and all(owners)  # both workers own some of the 30
    assert result["sent_by_target"] == {f"127.0.0.1:{port}": owners[i] for i, port in enumerate(front.ports)}
