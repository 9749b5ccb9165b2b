"""What a new operator trips over in the first hour: ports, exit codes, silent failures, words.

Every test here runs the real command the way an operator types it (or the one function that
decides what they see) and checks the line they read and the status a script gets.
"""

from __future__ import annotations

import asyncio
import ctypes.util
import datetime as dt
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import click
import grpc
import pytest
from structlog.testing import capture_logs

from nodeagent.agent.delivery.sender import Sender, SenderConfig
from nodeagent.agent.delivery.sender_log import DeliveryLog
from nodeagent.agent.delivery.spool import Spool
from nodeagent.agent.views.sample_table import render
from nodeagent.collector.cli.replay import render as render_replay
from nodeagent.collector.states.words import shown_state
from nodeagent.collector.views.fleet_table import render_fleet
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import Collector, free_port, processes
from tests.fakes.ingest_server import serve_ingest
from tests.fakes.trees import REPO

_ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def run(
    module: str, *args: str, env: dict[str, str] | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout,
        check=False, env={**_ENV, **(env or {})},
    )  # fmt: skip


# ---- ports and files ---------------------------------------------------------------------------


def test_a_second_collector_on_a_taken_port_exits_2_naming_the_reason(tmp_path: Path) -> None:
    port = free_port()
    with processes() as started:
        first = Collector(db=tmp_path / "first.db", port=port).start()
        started.append(first)
        second = run(
            "collector", "serve", "--listen", f"127.0.0.1:{port}", "--http-listen", "127.0.0.1:0",
            "--db", str(tmp_path / "second.db"), timeout=30,
        )  # fmt: skip
    assert second.returncode == 2, second.stdout + second.stderr
    assert "listening on" not in second.stdout
    assert "address already in use" in second.stderr.lower()
    assert f"127.0.0.1:{port}" in second.stderr


def test_serve_without_db_uses_the_state_directory_and_says_so(tmp_path: Path) -> None:
    state, cwd = tmp_path / "state", tmp_path / "cwd"
    cwd.mkdir()
    # systemd's StateDirectory= (root) and $XDG_STATE_HOME (a user) lead to the same place here;
    # test_the_state_directory_as_root_is_var_lib checks how each is chosen.
    env = {**_ENV, "XDG_STATE_HOME": str(state), "STATE_DIRECTORY": str(state / "nodeagent"), "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [
            sys.executable, "-m", "nodeagent.collector", "serve",
            "--listen", "127.0.0.1:0", "--http-listen", "127.0.0.1:0",
        ],
        cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert proc.stdout is not None
        lines = [proc.stdout.readline() for _ in range(3)]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    db = state / "nodeagent" / "collector.db"
    assert any(line.strip() == f"database {db}" for line in lines), (lines, err[-2000:])
    assert db.exists()
    assert not list(cwd.iterdir())


def test_the_state_directory_as_root_is_var_lib(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.collector.store.database import default_db_path

    monkeypatch.delenv("STATE_DIRECTORY", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", "/somewhere")
    assert default_db_path(euid=0) == Path("/var/lib/nodeagent/collector.db")
    assert default_db_path(euid=1000) == Path("/somewhere/nodeagent/collector.db")
    monkeypatch.delenv("XDG_STATE_HOME")
    assert default_db_path(euid=1000) == Path.home() / ".local/state/nodeagent/collector.db"
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/nodeagent-x:/other")
    assert default_db_path(euid=0) == Path("/var/lib/nodeagent-x/collector.db")


def test_databases_are_ignored() -> None:
    # Every package folder is declared: tests/packaging/test_import_names.py holds that.
    assert "*.db" in (REPO / ".gitignore").read_text().split()


# ---- exit codes ------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["nodes", "alerts"])
def test_query_commands_without_a_collector_are_a_runtime_failure(command: str) -> None:
    target = f"127.0.0.1:{free_port()}"
    done = run("collector", command, "--collector", target, "--timeout", "2", timeout=30)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"nodeagent-collector: error: cannot reach the collector at {target}: ")
    # gRPC says what failed; the line adds what to check.
    assert lines[0].endswith(f"; is `nodeagent-collector serve` running there, and is {target} its --listen?")


def test_replay_of_a_trace_without_one_valid_report_exits_2(tmp_path: Path) -> None:
    trace = tmp_path / "bad.jsonl"
    trace.write_text('{"not": "a report"}\n')
    done = run("collector", "replay", str(trace))
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == f"nodeagent-collector: error: {trace}: no valid report (1 bad line)"


def test_history_of_a_node_the_collector_does_not_hold_exits_2(tmp_path: Path) -> None:
    """As `replay --node` does: one line naming the node, exit 2; --json still prints a list."""
    with processes() as started:
        collector = Collector(db=tmp_path / "c.db", port=free_port()).start()
        started.append(collector)
        table = run("collector", "history", "nosuch", "--collector", collector.address, timeout=30)
        as_json = run("collector", "history", "nosuch", "--json", "--collector", collector.address, timeout=30)
    assert table.returncode == 2, table.stderr
    assert table.stderr.strip().splitlines() == [
        "nodeagent-collector: error: no history of node 'nosuch' in the range asked"
    ]
    assert as_json.returncode == 2 and json.loads(as_json.stdout) == []


def test_aiming_at_the_http_port_or_giving_a_url_is_said_in_one_line(tmp_path: Path) -> None:
    """The collector's HTTP port answers gRPC with HTTP/1: "that is an HTTP port", not a page of
    HTTP/2 parsing; a URL is refused before anything is dialled, by the agent too (exit 2)."""
    with processes() as started:
        collector = Collector(db=tmp_path / "c.db", port=free_port()).start()
        started.append(collector)
        http = run("collector", "nodes", "--collector", collector.http_address, timeout=30)
        url = run("collector", "nodes", "--collector", f"http://{collector.address}", timeout=30)
    agent = run("agent", "run", "--collector", f"http://{collector.address}", "--max-reports", "1", timeout=30)
    assert http.returncode == 1 and len(http.stderr.strip().splitlines()) == 1, http.stderr
    assert f"cannot reach the collector at {collector.http_address}: that is an HTTP port" in http.stderr
    for done in (url, agent):
        assert done.returncode == 2, done.stderr
        assert f"give '{collector.address}', without http://" in done.stderr


# ---- the agent and the collector say what happens -------------------------------------------


def test_an_agent_names_a_refusing_collector_within_2_seconds(tmp_path: Path) -> None:
    port = free_port()  # nobody listens: connection refused
    done = run(
        "agent", "run", "--collector", f"127.0.0.1:{port}", "--simulate", "healthy", "--node-id", "n1",
        "--spool-dir", str(tmp_path / "spool"), "--deadline", "4", timeout=60,
    )  # fmt: skip
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    started = next(e for e in events if e["event"] == "agent running")  # info shows by default for run
    failure = next(e for e in events if e["event"] == "cannot reach the collector")
    assert failure["level"] == "warning"
    assert "UNAVAILABLE" in failure["error"] and "refused" in failure["error"].lower(), failure
    assert _seconds(started["timestamp"], failure["timestamp"]) < 2.0
    repeats = [e for e in events if e["event"] == "cannot reach the collector"]
    assert len(repeats) < 4, "the same failure is rate-limited, not logged every attempt"


def test_an_agent_that_cannot_deliver_says_so_again_with_backoff_and_what_waits() -> None:
    """It said "cannot reach the collector" once, then nothing for a minute: it looked hung."""
    now = [0.0]
    waiting = [0]
    delivery_log = DeliveryLog(clock=lambda: now[0], waiting=lambda: waiting[0])
    with capture_logs() as logs:
        while now[0] <= 200:
            waiting[0] = int(now[0])  # a report a second, none acknowledged
            delivery_log.failed("cannot reach the collector", "127.0.0.1:50099", "UNAVAILABLE: refused")
            now[0] += 0.5
    first, *again = logs
    assert (first["event"], first["log_level"]) == ("cannot reach the collector", "warning")
    assert {e["event"] for e in again} == {"still cannot reach the collector"}
    # After 5 s, then twice as far apart each time, then once a minute.
    assert [e["down_seconds"] for e in again] == [5, 15, 35, 75, 135, 195]
    assert [e["reports_waiting"] for e in again] == [5, 15, 35, 75, 135, 195]
    assert [e["repeated"] for e in again] == [9, 19, 39, 79, 119, 119]
    assert all(e["collector"] == "127.0.0.1:50099" and e["error"] == "UNAVAILABLE: refused" for e in again)


def test_agent_and_collector_log_the_connection_at_the_default_level(tmp_path: Path) -> None:
    with processes() as started:
        coll = Collector(db=tmp_path / "c.db", port=free_port()).start()
        started.append(coll)
        done = run(
            "agent", "run", "--collector", coll.address, "--simulate", "healthy", "--node-id", "n1",
            "--interval", "0.2", "--max-reports", "3", "--deadline", "30", timeout=60,
        )  # fmt: skip
        assert done.returncode == 0, done.stderr[-2000:]
        coll.kill(15)
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    connected = [e for e in events if e["event"] == "connected to collector"]
    assert connected and connected[0]["level"] == "info" and connected[0]["collector"] == coll.address
    assert coll.log is not None
    collector_events = [json.loads(line) for line in coll.log.read_text().splitlines() if line.startswith("{")]
    node = [e for e in collector_events if e["event"] == "node connected"]
    assert node and node[0]["node"] == "n1" and node[0]["level"] == "info"


def test_the_sender_logs_a_periodic_delivery_summary() -> None:
    async def ack_all(requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        await context.read()
        while (message := await context.read()) is not grpc.aio.EOF:  # type: ignore[comparison-overlap]
            report = pb.AgentMessage.FromString(message).report
            await context.write(pb.Ack(epoch=report.epoch, acked_seq=report.seq))

    port = serve_ingest(ack_all, 8)
    spool = Spool()
    for seq in range(1, 11):
        spool.append(seq, pb.NodeReport(node_id="n", epoch=spool.epoch, seq=seq).SerializeToString())
    config = SenderConfig(summary_seconds=0.3)
    sender = Sender(spool, [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"), config=config)
    with capture_logs() as logs:
        sender.start()
        assert sender.wait_all_acked(time.monotonic() + 20)
        time.sleep(1.0)
        sender.stop()
    assert [e["event"] for e in logs].count("connected to collector") == 1
    summaries = [e for e in logs if e["event"] == "delivery summary"]
    assert summaries and summaries[-1]["acked_reports_total"] == 10 and summaries[-1]["spool_reports"] == 0
    assert summaries[-1]["connected_to"] == f"127.0.0.1:{port}"


@pytest.mark.parametrize("refusal_seconds", [0.0, 0.5], ids=["prompt", "slow"])
def test_the_agent_logs_the_collectors_refusal_status_not_an_internal_error(refusal_seconds: float) -> None:
    """A refusal slower than the agent's wait for acceptance (0.3 s) races its first reports:
    gRPC then says "INTERNAL: Internal error from Core"; the log still says the refusal."""

    async def refuse(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        await context.read()
        await asyncio.sleep(refusal_seconds)
        await context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong bearer token")

    port = serve_ingest(refuse, 8)
    spool = Spool()
    for seq in range(1, 2001):
        spool.append(seq, pb.NodeReport(node_id="n", epoch=spool.epoch, seq=seq).SerializeToString())
    config = SenderConfig(backoff_initial_seconds=0.01, backoff_max_seconds=0.05)
    sender = Sender(spool, [f"127.0.0.1:{port}"], hello=lambda: pb.NodeInfo(node_id="n"), config=config)
    with capture_logs() as logs:
        sender.start()
        time.sleep(2 + 6 * refusal_seconds)  # a few tries either way
        sender.stop()
    ended = [e for e in logs if e["event"] in ("collector stream ended", "cannot reach the collector")]
    assert ended, logs
    for entry in ended:
        assert entry["error"] == "UNAUTHENTICATED: missing or wrong bearer token", entry
    assert len(ended) < 5, "a failure that repeats is rate-limited"


def _seconds(start: str, end: str) -> float:
    return (dt.datetime.fromisoformat(end) - dt.datetime.fromisoformat(start)).total_seconds()


# ---- diag in a prolog ------------------------------------------------------------------------


def _diag(*args: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in _ENV.items() if k not in ("FAKE_NVML_STATE", "LD_LIBRARY_PATH", "NO_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "diag", "--json", "--window", "0", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO, env=clean,
    )  # fmt: skip


def _checks(done: subprocess.CompletedProcess[str]) -> dict[str, dict[str, str]]:
    return {f"{r['check']} {r['subject']}": r for r in json.loads(done.stdout)["checks"]}


def test_diag_without_nvml_fails_unless_no_gpus_are_expected(tmp_path: Path) -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVIDIA driver")
    plain = _diag()
    assert plain.returncode == 1, plain.stdout + plain.stderr
    driver = _checks(plain)["nvml.driver node"]
    assert driver["status"] == "FAIL" and "--no-gpu" in driver["hint"]
    for args in (["--no-gpu"], ["--expect-gpus", "0"]):
        told = _diag(*args)
        assert told.returncode == 0, told.stdout + told.stderr
        checks = _checks(told)
        assert checks["nvml.driver node"]["status"] == "PASS"
        assert "no GPUs expected" in checks["gpu.count node"]["hint"]
    profile = tmp_path / "cpu.toml"
    profile.write_text('description = "CPU node"\n[gpu]\ncount = 0\n')
    assert _diag("--profile", str(profile)).returncode == 0
    clash = _diag("--no-gpu", "--expect-gpus", "8")
    assert clash.returncode == 2 and "--no-gpu" in clash.stderr


def test_diag_says_which_expectation_a_profile_lacks(tmp_path: Path) -> None:
    profile = tmp_path / "cpu.toml"
    profile.write_text('description = "CPU node"\n[gpu]\ncount = 0\n')
    checks = _checks(_diag("--profile", str(profile)))
    speed = checks["nic.speed node"]
    assert speed["status"] == "SKIP" and "[nic] speed" in speed["hint"] and "cpu.toml" in speed["hint"]
    memory = checks["host.memory node"]
    assert memory["expected"] != "-"
    assert memory["status"] == "SKIP" and "[host] min_memory_gib" in memory["hint"]


# ---- words and units -------------------------------------------------------------------------


def _node_row(**overrides: object) -> dict[str, object]:
    row: dict[str, object] = {
        "node_id": "cpu-1", "connected": True, "gpu_count": 0, "state": "idle", "cause": None,
        "starvation_ratio": None, "gpu_hours_lost_today": 0.0, "needed_ingest_bytes_per_second": None,
        "reports_total": 3, "last_seen": 0.0,
    }  # fmt: skip
    row.update(overrides)
    return row


def test_a_node_without_gpus_is_no_gpu_not_idle() -> None:
    # The collector decides the word (collector/states/); the table shows it as given.
    assert shown_state("idle", gpu_count=0) == "no-gpu"
    assert shown_state("idle", gpu_count=8) == "idle"
    line = render_fleet([_node_row(state=shown_state("idle", gpu_count=0))]).splitlines()[1]
    assert line.split()[3] == "no-gpu"


def _replay_plain(timeline: list[dict[str, object]], needed: float | None, gpus: bool = True) -> dict[str, object]:
    share = {"state_ratios": {"busy": 0.1, "starved": 0.9}, "cause_ratios": {"network": 0.9}}
    gpu = {"index": 0, **share}
    final = {
        "state": "starved", "cause": "network", "tier": "high", "starvation_ratio": 0.341,
        "interconnect_ratio": 0.1, "gpu_seconds_lost": 3600.0, "needed_ingest_bytes_per_second": needed,
    }  # fmt: skip
    node = {
        "node_id": "n", "reports": 10, "first_time_unix_seconds": 0.0, "last_time_unix_seconds": 60.0,
        "timeline": timeline, "alerts": [], "shares": {"node": share, "gpus": [gpu] if gpus else []},
        "final_verdict": final,
    }  # fmt: skip
    return {"trace": "t.jsonl", "skipped_lines": [], "nodes": [node]}


def test_replay_speaks_of_links_in_bits_and_names_the_time_share() -> None:
    text = render_replay(_replay_plain([], 1.81e9))
    assert "ingest needed 14.48 Gb/s" in text
    assert "GB/s" not in text
    lines = text.splitlines()
    verdicts = lines.index("  verdicts")
    assert lines[verdicts + 1].strip() == "no verdict changes"
    header = next(line for line in lines if "busy" in line and "network" in line)
    assert "time starved" in header and " starved " not in f" {header.replace('time starved', '')} "
    no_gpu = render_replay(_replay_plain([], None, gpus=False)).splitlines()
    assert no_gpu[no_gpu.index("  verdicts") + 1] == "    none: no GPU in this trace"
    assert no_gpu[-1] == "  at the end: no-gpu"


def _snap(**overrides: object) -> dict[str, object]:
    snap: dict[str, object] = {
        "node_id": "n", "seq": 1, "interval_seconds": None, "collectors": [],
        "nics": [
            {"name": "eth0", "kind": "physical", "operstate": "up", "speed_bytes_per_second": 1.25e9,
             "speed_source": "sysfs", "mtu": 1500, "rx_bytes_total": 0, "tx_bytes_total": 0},
            {"name": "veth1", "kind": "veth", "virtual": True, "operstate": None, "speed_bytes_per_second": None,
             "mtu": 1500, "rx_bytes_total": 0, "tx_bytes_total": 0},
        ],
        "rdma_ports": [],
        "disks": [
            {"name": "vda", "transport": "", "rotational": True, "size_bytes": 1 << 30, "reads_completed_total": 1,
             "read_bytes_total": 0, "writes_completed_total": 0, "written_bytes_total": 0, "mountpoints": ["/"]},
        ],
        "host": {"cpu_count": 2},
        "gpus": [],
        "gpu_unavailable_reason": "no NVIDIA driver (libnvidia-ml.so.1 not found)",
        "events": [
            {"severity": "info", "kind": "gpu_unavailable", "subject": "gpu",
             "message": "no NVIDIA driver (libnvidia-ml.so.1 not found)"},
        ],
    }  # fmt: skip
    snap.update(overrides)
    return snap


def test_sample_table_says_each_thing_once_and_for_what_it_is() -> None:
    text = render(_snap())
    assert text.count("no NVIDIA driver") == 1
    disk_header = next(line for line in text.splitlines() if line.startswith("disk"))
    disk_row = next(line for line in text.splitlines() if line.startswith("vda"))
    cells = dict(zip(disk_header.split(), disk_row.split(), strict=False))
    assert cells["transport"] == "-" and cells["rotational"] == "yes"
    assert "configured speed" not in text
    assert "(1 virtual interfaces hidden; --all shows them)" in text
    nics = _snap()["nics"]
    assert isinstance(nics, list)
    nics[0]["speed_source"] = "config"
    assert "* = configured speed" in render(_snap(nics=nics))


def test_sample_json_gives_unread_operstate_as_null() -> None:
    done = run("agent", "sample", "--json", "--count", "1")
    assert done.returncode == 0, done.stderr
    for nic in json.loads(done.stdout)["nics"]:
        assert nic["operstate"] != "", nic["name"]


# ---- help ------------------------------------------------------------------------------------


def _commands(group: click.Group, prefix: str) -> list[tuple[str, click.Command]]:
    out: list[tuple[str, click.Command]] = [(prefix, group)]
    context = click.Context(group, info_name=prefix)
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        assert command is not None, f"{prefix} {name}"
        if isinstance(command, click.Group):
            out += _commands(command, f"{prefix} {name}")
        else:
            out.append((f"{prefix} {name}", command))
    return out


def test_every_command_and_option_has_help() -> None:
    from nodeagent.agent.cli.main import cli as agent_cli
    from nodeagent.collector.cli.main import cli as collector_cli

    missing = []
    for path, command in _commands(agent_cli, "nodeagent") + _commands(collector_cli, "nodeagent-collector"):
        if not (command.help or command.short_help):
            missing.append(path)
        for param in command.params:
            if isinstance(param, click.Option) and not param.help:
                missing.append(f"{path} {param.opts[0]}")
    assert not missing, f"no help text: {missing}"


@pytest.mark.parametrize("args", [["agent"], ["collector"], ["agent", "config"]], ids=" ".join)
def test_the_command_list_shows_whole_descriptions(args: list[str]) -> None:
    done = run(*args, "--help")
    assert done.returncode == 0
    listed = done.stdout.split("Commands:")[1]
    assert "..." not in listed, listed


# ---- flush metrics ---------------------------------------------------------------------------


def test_empty_flushes_are_counted_apart_from_the_flush_duration(tmp_path: Path) -> None:
    with processes() as started:
        coll = Collector(db=tmp_path / "c.db", port=free_port(), args=["--flush-seconds", "0.01"]).start()
        started.append(coll)
        time.sleep(1.0)  # dozens of flushes with nothing to write
        text = coll.metrics()
    # Summed over the series of each name: through a front, each worker's carry worker="i".
    values: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name = line.split()[0].split("{")[0]
            values[name] = values.get(name, 0.0) + float(line.split()[-1])
    assert values["nodeagent_store_flushes_empty_total"] >= 10
    assert values["nodeagent_store_flush_duration_seconds_count"] == 0
