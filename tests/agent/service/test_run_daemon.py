"""``nodeagent run`` as systemd and a simulated node see it."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import grpc

from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import Collector, cli, free_port, processes, wait_for
from tests.fakes.trees import REPO

# The agent's whole run (start, 20 ticks, stop) must fit in this, on a loaded machine too.
NOTIFY_WAIT_SECONDS = 60.0


def test_simulated_node_streams_eight_gpus_and_notifies_systemd(tmp_path: Path) -> None:
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    notify_path = tmp_path / "notify.sock"
    with processes() as started, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as notify:
        notify.bind(str(notify_path))
        notify.settimeout(0.5)
        messages: list[str] = []
        reader = threading.Thread(target=_drain, args=(notify, messages), daemon=True)
        reader.start()
        started.append(collector.start())
        env = {**os.environ, "NOTIFY_SOCKET": str(notify_path), "WATCHDOG_USEC": "5000000", "WATCHDOG_PID": ""}
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.agent", "run", "--collector", collector.address, "--node-id", "sim-1",
             "--simulate", "ordinary-cloud", "--interval", "0.05", "--max-reports", "20", "--deadline", "30"],
            cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        reader.join(timeout=NOTIFY_WAIT_SECONDS)
        with grpc.insecure_channel(collector.address) as channel:
            latest = pb_grpc.QueryStub(channel).LatestReport(pb.LatestReportRequest(node_id="sim-1"), timeout=5)
        node = collector.node("sim-1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (node["reports_total"], node["gpu_count"]) == (20, 8)
    assert len(latest.gpus) == 8
    assert latest.seq == 20
    assert messages and messages[0] == "READY=1", messages
    assert messages.count("WATCHDOG=1") == 20  # one per completed tick
    assert messages[-1] == "STOPPING=1"


def _drain(sock: socket.socket, into: list[str]) -> None:
    # Until the last message the agent sends, however slowly a loaded machine starts it, but bounded.
    deadline = time.monotonic() + NOTIFY_WAIT_SECONDS
    while time.monotonic() < deadline:
        try:
            into.append(sock.recv(4096).decode())
        except TimeoutError:
            continue
        if into[-1] == "STOPPING=1":
            return


def test_a_deadline_alone_fails_the_run_when_reports_stay_unacknowledged(tmp_path: Path) -> None:
    """`--deadline` without `--max-reports`: exit 1 when the drain leaves reports unacknowledged,
    0 when the collector took everything (its help says so)."""
    argv = [sys.executable, "-m", "nodeagent.agent", "run", "--simulate", "healthy", "--node-id", "d-1",
            "--interval", "0.1", "--no-collector.gpu", "--deadline", "1.5"]  # fmt: skip
    nobody = subprocess.run(
        [*argv, "--collector", f"127.0.0.1:{free_port()}"],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    summary = json.loads(nobody.stdout.splitlines()[-1])
    assert summary["produced"] > 0 and summary["unacked"] == summary["produced"]
    assert nobody.returncode == 1, nobody.stderr[-2000:]
    assert nobody.stderr.splitlines()[-1].startswith("nodeagent: error: ")
    collector = Collector(db=tmp_path / "c.db", port=free_port())
    with processes() as started:
        started.append(collector.start())
        served = subprocess.run(
            [*argv, "--collector", collector.address], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
    assert served.returncode == 0, served.stderr[-2000:]
    assert json.loads(served.stdout.splitlines()[-1])["unacked"] == 0


def test_a_second_agent_on_the_same_spool_directory_is_refused(tmp_path: Path) -> None:
    """Two agents on one spool would hand out the same epoch and seqs: the second is refused in
    one line, exit 2; once the first is killed, its lock is gone with it."""
    spool = tmp_path / "spool"
    argv = [sys.executable, "-m", "nodeagent.agent", "run", "--simulate", "healthy", "--node-id", "s-1",
            "--no-collector.gpu", "--interval", "0.1", "--spool-dir", str(spool),
            "--collector", f"127.0.0.1:{free_port()}"]  # fmt: skip
    first = subprocess.Popen([*argv, "--deadline", "60"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 30
        while not ((spool / "lock").exists() and (spool / "lock").read_text().strip() == str(first.pid)):
            assert first.poll() is None and time.monotonic() < deadline, "the first agent never took the spool"
            time.sleep(0.1)
        second = subprocess.run(
            [*argv, "--deadline", "5"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert second.returncode == 2, second.stderr
        assert second.stderr == (
            f"nodeagent: error: Invalid value for --spool-dir: spool directory {spool} is in use by process "
            f"{first.pid} (lock file {spool / 'lock'})\n"
        )
    finally:
        first.kill()
        first.communicate(timeout=30)
    third = subprocess.run(
        [*argv, "--deadline", "0.5"], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert third.returncode == 1, third.stderr  # it ran (nothing acknowledged it), not refused
    assert json.loads(third.stdout.splitlines()[-1])["produced"] > 0


def test_a_clean_stop_says_goodbye_the_node_is_stopped_not_down(tmp_path: Path) -> None:
    """Stopped by systemd (SIGTERM), or done with `--max-reports`: the agent says a stopping
    goodbye, so the collector shows the node `stopped`, raises the info `NodeStopped` and, past
    `node_down_seconds`, no critical `NodeDown`."""
    config = tmp_path / "collector.toml"
    config.write_text("[alerts]\nnode_down_seconds = 1.0\n")
    collector = Collector(db=tmp_path / "c.db", port=free_port(), args=("--config", str(config)))
    argv = [sys.executable, "-m", "nodeagent.agent", "run", "--simulate", "healthy", "--no-collector.gpu",
            "--interval", "0.1", "--collector", collector.address]  # fmt: skip
    with processes() as started:
        started.append(collector.start())
        agent = subprocess.Popen(
            [*argv, "--node-id", "term-1"], cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert wait_for(lambda: collector.reports("term-1") >= 3, timeout=60)
            agent.send_signal(signal.SIGTERM)
            _out, err = agent.communicate(timeout=60)
        finally:
            agent.kill()
        assert agent.returncode == 0, err[-2000:]
        finite = subprocess.run(
            [*argv, "--node-id", "done-1", "--max-reports", "3"], cwd=REPO, capture_output=True, text=True,
            timeout=60, check=False,
        )  # fmt: skip
        assert finite.returncode == 0, finite.stderr[-2000:]
        # One killed says nothing: down after node_down_seconds, in `nodes` and NodeDown alike
        # (one threshold, not the detector's 60 s window for the word).
        killed = subprocess.Popen([*argv, "--node-id", "kill-1"], cwd=REPO)
        try:
            assert wait_for(lambda: collector.reports("kill-1") >= 3, timeout=60)
        finally:
            killed.kill()
            killed.wait(timeout=30)
        time.sleep(2.5)  # past node_down_seconds and the next NodeDown check
        states = {n["node_id"]: n["state"] for n in collector.nodes()}
        alerts = json.loads(cli("collector", "alerts", "--json", "--collector", collector.address))
    assert states == {"term-1": "stopped", "done-1": "stopped", "kill-1": "down"}
    firing = sorted((a["node_id"], a["name"], a["severity"]) for a in alerts)
    assert firing == [
        ("done-1", "NodeStopped", "info"),
        ("kill-1", "NodeDown", "critical"),
        ("term-1", "NodeStopped", "info"),
    ]


def test_a_signal_before_the_acks_says_what_stopped_it_and_where_the_reports_are(tmp_path: Path) -> None:
    """`--max-reports` with no collector to take them, stopped by SIGTERM (twice, on one spool):
    not "10 of 5 reports not acknowledged by the deadline" (there was none, and the spool holds
    the earlier run's reports too), but what stopped it, how many, and where they are."""
    spool = tmp_path / "spool"
    argv = [sys.executable, "-m", "nodeagent.agent", "run", "--simulate", "healthy", "--no-collector.gpu",
            "--node-id", "sig-1", "--interval", "0.01", "--max-reports", "3", "--spool-dir", str(spool),
            "--collector", f"127.0.0.1:{free_port()}"]  # fmt: skip

    def spooled() -> int:
        return sum(path.stat().st_size for path in spool.glob("seg-*"))

    ends = []
    for _run in range(2):
        before = spooled() if spool.exists() else 0
        agent = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert wait_for(lambda: spool.exists() and spooled() > before, timeout=60)  # noqa: B023
            agent.send_signal(signal.SIGTERM)
            out, err = agent.communicate(timeout=60)
        finally:
            agent.kill()
        summary = json.loads(out.splitlines()[-1])
        ends.append((agent.returncode, summary["unacked"], summary["produced"], err.splitlines()[-1]))
    (first_status, first_unacked, _, first_line), (status, unacked, produced, line) = ends
    where = f"; they stay in {spool} for the next run"
    assert first_status == 1 and first_line == (
        f"nodeagent: error: stopped by a signal with {first_unacked} report{'s' * (first_unacked != 1)} not "
        "acknowledged (after a 2 s drain)" + where
    )
    assert status == 1 and unacked > produced
    assert line == (
        f"nodeagent: error: stopped by a signal with {unacked} reports not acknowledged (after a 2 s drain), "
        f"at least {unacked - produced} of them from an earlier run" + where
    )
