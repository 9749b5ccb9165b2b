"""``serve --workers 2`` as a real process: the front's redirect, the owner's database, merged
queries and /metrics, a worker killed and restarted, and the front's stop draining its workers."""

from __future__ import annotations

import json
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import grpc
import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families

from nodeagent.core.transport.rendezvous import owner_index
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.collector.workers.front_process import deliver, read_lines, redirect_of, running_front
from tests.conftest import require
from tests.fakes.fleet import free_port, wait_for
from tests.fakes.trees import REPO

NODES = [f"node-{i}" for i in range(12)]


def _stored(db: Path) -> dict[str, int]:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as conn:
        return dict(conn.execute("SELECT node_id, reports_total FROM nodes"))


def _nodes(address: str) -> list[dict[str, object]]:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "nodes", "--json", "--collector", address],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return list(json.loads(done.stdout))


def test_a_hello_is_sent_to_the_worker_owning_its_node_id_and_always_the_same(tmp_path: Path) -> None:
    with running_front(tmp_path) as front:
        owners = set()
        for node in NODES:
            code, details, port = redirect_of(front.address, node)
            assert code is grpc.StatusCode.UNAVAILABLE, details
            owner = owner_index(node, 2)
            assert port == front.ports[owner], (node, details)
            assert details == f"node {node} is served by worker {owner} on port {port}"
            assert redirect_of(front.address, node)[2] == port  # stable
            owners.add(owner)
        assert owners == {0, 1}, "twelve nodes all on one worker: the hashing does not spread"
        # A hello that names a routing key (an older agent's job key) is placed by its node id all the same.
        job_ports = {node: redirect_of(front.address, node, routing_key="slurm/4242")[2] for node in NODES}
        assert job_ports == {node: front.ports[owner_index(node, 2)] for node in NODES}
        # A bad hello is refused as a collector refuses it, with no redirect.
        code, _details, port = redirect_of(front.address, "bad node id with spaces")
        assert (code, port) == (grpc.StatusCode.INVALID_ARGUMENT, None)


def test_a_worker_s_port_takes_agents_and_refuses_queries_naming_the_front(tmp_path: Path) -> None:
    """Asked directly, a worker answered with its share of the fleet as if it were all of it."""
    front_address = f"127.0.0.1:{free_port()}"
    node = next(n for n in NODES if owner_index(n, 2) == 1)
    with running_front(tmp_path, args=("--listen", front_address)) as front:
        (said,) = read_lines(front.proc, 1, 30)
        assert said == (
            f"workers' ports take agents only, queries go to {front_address}; "
            f"one database per worker: {tmp_path}/collector.db, {tmp_path}/collector.worker1.db"
        )
        worker = f"127.0.0.1:{front.ports[1]}"
        assert deliver(front.ports[1], node, [1, 2]) == 2  # the agents' ingest is untouched
        for command in ("nodes", "alerts", "ledger"):
            done = subprocess.run(
                [sys.executable, "-m", "nodeagent.collector", command, "--collector", worker],
                cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            assert done.returncode == 2, (command, done.stdout, done.stderr)
            assert done.stdout == ""
            (line,) = done.stderr.splitlines()
            assert f"the collector at {worker} refused" in line and f"ask its front at {front_address}" in line
        # The same through several collectors: a worker among them is the operator's slip too.
        both = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "nodes", "--collector", worker, "--collector", front_address],
            cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        assert both.returncode == 2 and f"ask its front at {front_address}" in both.stderr, both.stderr
        # The front's own calls to its workers (unix sockets) still answer, the node included.
        assert [n["node_id"] for n in _nodes(front_address)] == [node]


def test_reports_through_the_redirect_are_stored_by_the_owner_and_listed_by_the_front(tmp_path: Path) -> None:
    # One node for each worker.
    picked = {owner_index(node, 2): node for node in NODES}
    assert set(picked) == {0, 1}
    with running_front(tmp_path) as front:
        for owner, node in picked.items():
            _code, _details, port = redirect_of(front.address, node)
            assert port == front.ports[owner]
            assert deliver(port, node, [1, 2, 3]) == 3
        listed = {n["node_id"]: n for n in _nodes(front.address)}
        assert set(listed) == set(picked.values())
        assert all(int(str(n["reports_total"])) == 3 for n in listed.values())
        assert front.stop() == 0
    # After the drain each report is in its owner's database, and only there.
    for owner, node in picked.items():
        assert _stored(front.dbs[owner]) == {node: 3}
    assert front.dbs[0] == tmp_path / "collector.db"
    assert front.dbs[1] == tmp_path / "collector.worker1.db"


def test_metrics_through_the_front_hold_every_series_once(tmp_path: Path) -> None:
    with running_front(tmp_path) as front:
        for node in NODES[:4]:
            port = redirect_of(front.address, node)[2]
            assert port is not None
            assert deliver(port, node, [1]) == 1
        with urllib.request.urlopen(f"http://{front.http}/metrics", timeout=20) as response:
            text = response.read().decode()
    series = [
        (sample.name, tuple(sorted(sample.labels.items())))
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    ]
    assert len(series) == len(set(series)), "a series twice on the merged page"
    workers = {dict(labels).get("worker") for name, labels in series if name == "process_cpu_seconds_total"}
    assert workers == {"0", "1", "front"}, workers
    assert ("nodeagent_collector_workers_up", ()) in series
    assert sum(1 for name, _ in series if name == "nodeagent_collector_redirects_total") == 2
    families = text_string_to_metric_families(text)
    ingested = [s.value for f in families for s in f.samples if s.name == "nodeagent_ingest_reports_total"]
    assert len(ingested) == 2, 'one count per worker (worker="i")'
    assert sum(ingested) == 4
    require(shutil.which("promtool") is not None, "needs promtool (Debian's prometheus; `make system-deps`)")
    from tests.promtool_lint import promtool_problems

    assert promtool_problems(text) == set()


def test_a_killed_worker_is_restarted_on_its_port_and_its_nodes_deliver_again(tmp_path: Path) -> None:
    node = next(n for n in NODES if owner_index(n, 2) == 1)
    with running_front(tmp_path) as front:
        port = redirect_of(front.address, node)[2]
        assert port == front.ports[1]
        assert deliver(port, node, [1, 2]) == 2
        before = front.worker_pids()
        assert len(before) == 2
        victim = next(pid for pid in before if psutil.Process(pid).cmdline()[4] == "1")
        psutil.Process(victim).kill()
        assert wait_for(lambda: len(front.worker_pids()) == 2 and victim not in front.worker_pids(), 30)
        # Up again on the port its agents were sent to; the front sends them there again.
        assert wait_for(lambda: redirect_of(front.address, node)[2] == port, 30)
        assert wait_for(lambda: deliver(port, node, [3, 4]) == 4, 30)
        with urllib.request.urlopen(f"http://{front.http}/metrics", timeout=20) as response:
            text = response.read().decode()
        assert 'nodeagent_collector_worker_restarts_total{worker="1"} 1.0' in text
        assert front.stop() == 0
    assert _stored(front.dbs[1]) == {node: 4}


def test_a_worker_s_metrics_larger_than_one_message_still_reach_the_front(tmp_path: Path) -> None:
    """--max-message-bytes bounds what crosses the network, not a worker's answer to its own front:
    with a bound far below a worker's /metrics, the front's page still has every node."""
    nodes = [node for node in NODES if owner_index(node, 2) == 0][:4]
    with running_front(tmp_path, args=["--max-message-bytes", "8192"]) as front:
        for node in nodes:
            assert deliver(front.ports[0], node, [1, 2]) == 2
        with urllib.request.urlopen(f"http://{front.http}/metrics", timeout=20) as response:
            text = response.read().decode()
        assert front.stop() == 0
    assert len(text.encode()) > 8192
    for node in nodes:
        assert f'nodeagent_node_reports_total{{node="{node}"}} 2.0' in text, node


def test_sigterm_on_the_front_drains_every_worker(tmp_path: Path) -> None:
    picked = {owner_index(node, 2): node for node in NODES}
    with running_front(tmp_path) as front:
        workers = [psutil.Process(pid) for pid in front.worker_pids()]
        assert len(workers) == 2
        for owner, node in picked.items():
            assert deliver(front.ports[owner], node, list(range(1, 21))) == 20
        started = time.monotonic()
        assert front.stop(signal.SIGTERM) == 0
        assert time.monotonic() - started < 45
        _gone, alive = psutil.wait_procs(workers, timeout=10)
        assert not alive, "a worker outlived its front"
    for owner, node in picked.items():
        assert _stored(front.dbs[owner]) == {node: 20}


def test_a_killed_front_s_workers_drain_and_leave_no_runtime_directory(tmp_path: Path) -> None:
    # Where the front makes its directory of sockets ($XDG_RUNTIME_DIR): short, as socket paths must be.
    runtime = Path(tempfile.mkdtemp(prefix="na-run-"))
    try:
        picked = {owner_index(node, 2): node for node in NODES}
        with running_front(tmp_path, env={"XDG_RUNTIME_DIR": str(runtime)}) as front:
            (made,) = runtime.iterdir()
            assert sorted(p.name for p in made.iterdir()) == ["worker0.sock", "worker1.sock", "workers.spec"]
            workers = [psutil.Process(pid) for pid in front.worker_pids()]
            for owner, node in picked.items():
                assert deliver(front.ports[owner], node, list(range(1, 11))) == 10
            front.stop(signal.SIGKILL)
            _gone, alive = psutil.wait_procs(workers, timeout=30)
            assert not alive, "a worker outlived its killed front"
        assert not made.exists(), sorted(p.name for p in made.iterdir())
        for owner, node in picked.items():
            assert _stored(front.dbs[owner]) == {node: 10}  # each drained what it had acked
    finally:
        shutil.rmtree(runtime, ignore_errors=True)


def test_a_runtime_directory_too_long_for_socket_paths_is_passed_over(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100)  # with the front's own name and a socket's, past 107 bytes
    deep.mkdir()
    with running_front(tmp_path, env={"XDG_RUNTIME_DIR": str(deep)}) as front:
        assert not any(deep.iterdir())  # its sockets went to the temporary directory instead
        assert deliver(front.ports[0], "node-0", [1, 2, 3]) == 3


def test_real_agents_follow_the_redirect_and_land_on_their_owners(tmp_path: Path) -> None:
    picked = {owner_index(node, 2): node for node in NODES}
    with running_front(tmp_path) as front:
        agents = [_agent(front.address, node, tmp_path) for node in picked.values()]
        try:
            assert [agent.wait(timeout=90) for agent in agents] == [0, 0]
        finally:
            for agent in agents:
                agent.kill()
        listed = {str(n["node_id"]): int(str(n["reports_total"])) for n in _nodes(front.address)}
        assert listed == dict.fromkeys(picked.values(), 20)
        assert front.stop() == 0
    for owner, node in picked.items():
        assert _stored(front.dbs[owner]) == {node: 20}


def _agent(collector: str, node: str, tmp: Path) -> subprocess.Popen[bytes]:
    command = [
        sys.executable, "-m", "nodeagent.agent", "--log-level", "info", "run", "--collector", collector,
        "--node-id", node, "--simulate", "ordinary-cloud", "--interval", "0.05", "--max-reports", "20",
        "--deadline", "60", "--spool-dir", str(tmp / f"spool-{node}"),
    ]  # fmt: skip
    with (tmp / f"{node}.log").open("w") as log:
        return subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log)


def test_a_job_s_nodes_owned_by_both_workers_each_stay_on_their_own(tmp_path: Path) -> None:
    """Two agents of one job behind one front (one collector address), their node ids owned by
    different workers: each streams to the worker that owns its node id and stays there while its
    reports name the job; every report once, all in its own worker's database."""
    job = "torch/front-job"
    picked = {owner_index(node, 2): node for node in NODES}
    assert set(picked) == {0, 1}
    reports = 40
    with running_front(tmp_path) as front:
        agents = []
        for rank, node in enumerate(picked.values()):
            command = [
                sys.executable, "-m", "nodeagent.agent", "--log-level", "info", "run", "--collector", front.address,
                "--node-id", node, "--simulate", "healthy", "--set", f"job_key={job}", "--set", "job_nodes=2",
                "--set", f"job_node_rank={rank}", "--interval", "0.05", "--max-reports", str(reports),
                "--deadline", "60", "--spool-dir", str(tmp_path / f"spool-{node}"),
            ]  # fmt: skip
            with (tmp_path / f"{node}.log").open("w") as log:
                agents.append(subprocess.Popen(command, cwd=REPO, stdout=subprocess.DEVNULL, stderr=log))
        try:
            assert [agent.wait(timeout=90) for agent in agents] == [0, 0]
        finally:
            for agent in agents:
                if agent.poll() is None:
                    agent.kill()
        assert front.stop() == 0
    for owner, node in picked.items():
        assert _stored(front.dbs[owner]) == {node: reports}, (owner, node)
        assert "moving to another collector" not in (tmp_path / f"{node}.log").read_text()


def test_the_fleet_page_through_the_front_shows_every_worker_s_nodes(tmp_path: Path) -> None:
    picked = {owner_index(node, 2): node for node in NODES}
    with running_front(tmp_path) as front:
        for owner, node in picked.items():
            assert deliver(front.ports[owner], node, [1, 2]) == 2
        with urllib.request.urlopen(f"http://{front.http}/", timeout=20) as response:
            assert response.headers["Content-Type"].startswith("text/html")
            assert b"<html" in response.read()
        with urllib.request.urlopen(f"http://{front.http}/api/fleet", timeout=20) as response:
            fleet = json.loads(response.read())
        with urllib.request.urlopen(f"http://{front.http}/healthz", timeout=20) as response:
            assert response.status == 200
    shown = {row["node_id"] for row in fleet["nodes"]}
    assert shown == set(picked.values()), fleet["nodes"]
    assert [(s["shard"], s["answered"]) for s in fleet["shards"]] == [("worker-0", True), ("worker-1", True)]


def test_the_front_asks_the_credentials_a_collector_asks(tmp_path: Path) -> None:
    node_token, operator_token = tmp_path / "node.token", tmp_path / "operator.token"
    node_token.write_text("node-secret\n")
    operator_token.write_text("operator-secret\n")
    args = ["--token-file", str(node_token), "--operator-token-file", str(operator_token)]
    with running_front(tmp_path, args=args) as front:
        assert redirect_of(front.address, "node-1")[::2] == (grpc.StatusCode.UNAUTHENTICATED, None)
        assert redirect_of(front.address, "node-1", token="wrong")[::2] == (grpc.StatusCode.UNAUTHENTICATED, None)
        code, _details, port = redirect_of(front.address, "node-1", token="node-secret")
        assert (code, port) == (grpc.StatusCode.UNAVAILABLE, front.ports[owner_index("node-1", 2)])
        with grpc.insecure_channel(front.address) as channel:
            stub = pb_grpc.QueryStub(channel)
            for metadata, refused in (
                ((), grpc.StatusCode.UNAUTHENTICATED),
                (_bearer("node-secret"), grpc.StatusCode.PERMISSION_DENIED),
            ):
                with pytest.raises(grpc.RpcError) as err:
                    list(stub.StreamNodes(pb.ListNodesRequest(), timeout=10, metadata=metadata))
                assert err.value.code() is refused  # type: ignore[attr-defined]
            pages = list(stub.StreamNodes(pb.ListNodesRequest(), timeout=10, metadata=_bearer("operator-secret")))
        assert [(s.shard, s.answered) for s in pages[-1].shards] == [("worker-0", True), ("worker-1", True)]
        with pytest.raises(urllib.error.HTTPError) as http_err:
            urllib.request.urlopen(f"http://{front.http}/metrics", timeout=20)
        assert http_err.value.code == 401


def _bearer(token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"),)
