"""``serve --workers 2`` when a worker cannot start: the others serve, the failed one is named (log,
``nodes``, ``/metrics``, ``/healthz``) and started again until it comes up; when none can start
``serve`` exits in one line. And the workers' default ports, which must not take the collector's own."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import grpc
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.core.transport.rendezvous import owner_index
from tests.collector.workers.front_process import ENV, deliver, redirect_of, running_front
from tests.fakes.fleet import free_port_run, wait_for
from tests.fakes.trees import REPO

NODES = [f"node-{i}" for i in range(12)]
NOT_A_DATABASE = b"this is not an SQLite database, whoever runs the collector (root too)\n" * 4


def _metrics(http: str) -> dict[tuple[str, str], float]:
    """The front's per-worker samples: (name, worker) -> value."""
    with urllib.request.urlopen(f"http://{http}/metrics", timeout=20) as response:
        text = response.read().decode()
    return {
        (sample.name, sample.labels.get("worker", "")): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("nodeagent_collector_worker")
    }


def _nodes(address: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "nodes", "--json", "--collector", address],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip


def test_a_worker_whose_database_is_unusable_leaves_the_other_serving_and_is_named(tmp_path: Path) -> None:
    bad = tmp_path / "collector.worker1.db"
    bad.write_bytes(NOT_A_DATABASE)
    mine = next(n for n in NODES if owner_index(n, 2) == 0)
    theirs = next(n for n in NODES if owner_index(n, 2) == 1)
    with running_front(tmp_path) as front:
        why = f"cannot open database {bad}: file is not a database"
        assert front.not_started == {1: why}
        # Worker 0 takes its agents and answers for them.
        code, _details, port = redirect_of(front.address, mine)
        assert (code, port) == (grpc.StatusCode.UNAVAILABLE, front.ports[0])
        assert deliver(front.ports[0], mine, [1, 2, 3]) == 3
        # Worker 1's agents are told to come back (no port to go to).
        code, details, port = redirect_of(front.address, theirs)
        assert (code, port) == (grpc.StatusCode.UNAVAILABLE, None) and "restarting" in details
        listed = _nodes(front.address)
        assert listed.returncode == 0, listed.stderr
        assert [n["node_id"] for n in json.loads(listed.stdout)] == [mine]
        assert f"worker-1 of the collector at {front.address} did not answer: UNAVAILABLE: worker 1 is not serving" in (
            listed.stderr
        )
        assert why in listed.stderr and "its nodes are missing here" in listed.stderr
        # Started again and again, with backoff: the count grows, the worker stays down.
        restarts = ("nodeagent_collector_worker_restarts_total", "1")
        assert wait_for(lambda: _metrics(front.http).get(restarts, 0) >= 2, 30)
        metrics = _metrics(front.http)
        assert metrics[("nodeagent_collector_worker_up", "0")] == 1.0
        assert metrics[("nodeagent_collector_worker_up", "1")] == 0.0
        assert metrics[("nodeagent_collector_worker_restarts_total", "0")] == 0.0
        # Healthy while a worker serves (the other's agents still deliver); the body says which is not.
        with urllib.request.urlopen(f"http://{front.http}/healthz", timeout=20) as response:
            assert response.status == 200
            assert why in response.read().decode()
        with urllib.request.urlopen(f"http://{front.http}/api/fleet", timeout=20) as response:
            shards = json.loads(response.read())["shards"]
        assert [(s["shard"], s["answered"]) for s in shards] == [("worker-0", True), ("worker-1", False)]
        assert why in shards[1]["error"]
        # Failing the same way again and again is said once, with the worker and why; no traceback.
        log = front.log.read_text()
        said = [line for line in log.splitlines() if why in line]
        assert len(said) == 1, log[-3000:]
        line = json.loads(said[0])
        assert (line["event"], line["worker"], line["level"]) == ("worker not started; restarting it", 1, "error")
        assert "Traceback" not in log
        # Its database mended, it comes up by itself and takes its agents.
        bad.unlink()
        assert wait_for(lambda: _metrics(front.http)[("nodeagent_collector_worker_up", "1")] == 1.0, 60)
        port = redirect_of(front.address, theirs)[2]
        assert port is not None and deliver(port, theirs, [1]) == 1
        assert sorted(n["node_id"] for n in json.loads(_nodes(front.address).stdout)) == sorted([mine, theirs])
        assert front.stop() == 0


def test_when_no_worker_can_start_serve_exits_1_in_one_line(tmp_path: Path) -> None:
    for name in ("collector.db", "collector.worker1.db"):
        (tmp_path / name).write_bytes(NOT_A_DATABASE)
    done = subprocess.run(
        [
            sys.executable, "-m", "nodeagent.collector", "serve", "--listen", "127.0.0.1:0", "--http-listen",
            "127.0.0.1:0", "--db", str(tmp_path / "collector.db"), "--workers", "2",
        ],
        cwd=REPO, env=ENV, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("nodeagent-collector: error:")]
    assert errors == [
        f"nodeagent-collector: error: no worker started: worker 0: cannot open database {tmp_path}/collector.db: "
        f"file is not a database; worker 1: cannot open database {tmp_path}/collector.worker1.db: "
        "file is not a database"
    ], done.stderr
    assert "Traceback" not in done.stderr
    assert "listening on" not in done.stdout


def _serve(tmp: Path, *args: str) -> subprocess.Popen[str]:
    command = [
        sys.executable, "-m", "nodeagent.collector", "serve", "--db", str(tmp / "collector.db"), "--workers", "2",
        *args,
    ]  # fmt: skip
    return subprocess.Popen(command, cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_default_worker_ports_pass_over_the_http_port_and_taken_ones(tmp_path: Path) -> None:
    """``--listen :P --http-listen :P+1`` (the ports one would write down) used to put worker 0 on P+1."""
    first = free_port_run(5)
    listen, http = first, first + 1
    with socket.socket() as taken:  # something else on the host holds the port after them
        taken.bind(("127.0.0.1", first + 2))
        taken.listen()
        proc = _serve(tmp_path, "--listen", f"127.0.0.1:{listen}", "--http-listen", f"127.0.0.1:{http}")
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().strip() for _ in range(5)]
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=60)
    assert lines[:2] == [f"listening on 127.0.0.1:{listen}", f"http on 127.0.0.1:{http}"], (lines, err[-2000:])
    workers = [int(line.split()[3].rpartition(":")[2]) for line in lines[3:]]
    assert workers == [first + 3, first + 4], lines
    assert proc.returncode == 0, err[-2000:]


def test_worker_ports_on_the_collector_s_own_say_which_flag_to_change(tmp_path: Path) -> None:
    first = free_port_run(3)
    proc = _serve(
        tmp_path, "--listen", f"127.0.0.1:{first}", "--http-listen", f"127.0.0.1:{first + 1}",
        "--worker-ports", str(first + 1),
    )  # fmt: skip
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip() == (
        f"nodeagent-collector: error: Invalid value for --worker-ports: worker 0's port {first + 1} is "
        "--http-listen's: give a base whose 2 ports are free"
    )


def test_a_worker_port_taken_is_said_in_one_line_without_grpc_s_own(tmp_path: Path) -> None:
    first = free_port_run(4)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first + 3))
        taken.listen()
        proc = _serve(
            tmp_path, "--listen", f"127.0.0.1:{first}", "--http-listen", f"127.0.0.1:{first + 1}",
            "--worker-ports", str(first + 2),
        )  # fmt: skip
        try:
            assert proc.stdout is not None
            lines = [proc.stdout.readline().strip() for _ in range(5)]
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=60)
    why = f"cannot listen on 127.0.0.1:{first + 3}: address already in use"
    assert lines[3:] == [
        f"worker 0 on 127.0.0.1:{first + 2} database {tmp_path}/collector.db",
        f"worker 1 not started ({why}); restarting it",
    ], (lines, err[-2000:])
    assert "add_port" not in err and "Failed to bind" not in err, err[-2000:]
