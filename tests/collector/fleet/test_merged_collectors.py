"""One view across real collectors: three in-process collectors and a silent address, one
collector stopped; the query commands and the fleet page (over its HTTP listener) merge what
answers, mark what does not, and never wait past the timeout.

Collector A lists the fleet in ``[fleet]``; B holds the fresher copy of a node both hold
(``moved``); C is stopped (refuses at once); D is a socket that accepts and never speaks (the
timeout's case).
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
import urllib.request
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
from click.testing import CliRunner

from nodeagent.collector.cli.main import cli
from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.fleet.config import FleetConfig
from nodeagent.collector.fleet.fanout import LOCAL_HEADER
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import feed_simulated, free_port

T = TypeVar("T")
FLEET_TIMEOUT = 1.0
CLI_TIMEOUT = 1.0
# What an answer may take past the timeout: the event loop, a thread hop, JSON of a few nodes.
MARGIN = 1.5


class _Loop:
    """An event loop on its own thread: the collectors run there while the tests call them."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 120.0) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Fleet:
    def __init__(self, tmp: Path) -> None:
        self.ports = {name: free_port() for name in "ABC"}
        self.silent = socket.create_server(("127.0.0.1", 0), backlog=16)  # accepts in the kernel, never speaks
        self.address = {name: f"127.0.0.1:{port}" for name, port in self.ports.items()}
        self.address["D"] = f"127.0.0.1:{self.silent.getsockname()[1]}"
        everyone = tuple(self.address[n] for n in "ABCD")
        fleet = FleetConfig(collectors=everyone, timeout_seconds=FLEET_TIMEOUT)
        self.servers = {name: self._server(tmp, name, fleet if name == "A" else FleetConfig()) for name in "ABC"}
        self.loop = _Loop()
        self.loop.run(self._start())

    def _server(self, tmp: Path, name: str, fleet: FleetConfig) -> CollectorServer:
        return CollectorServer(ServerConfig(
            listen=self.address[name], db_path=tmp / f"{name}.db", http_listen="127.0.0.1:0",
            settings=CollectorConfig(fleet=fleet),
        ))  # fmt: skip

    async def _start(self) -> None:
        for server in self.servers.values():
            await server.start()
        a, b, c = (self.servers[n] for n in "ABC")
        feed_simulated(a.ingest, {"a1": "healthy", "moved": "healthy"}, 20)
        await asyncio.sleep(1.2)  # B's copy of "moved" is the fresher
        feed_simulated(b.ingest, {"b1": "ordinary-cloud", "moved": "healthy"}, 20)
        feed_simulated(c.ingest, {"c1": "healthy"}, 20)
        for server in (a, b, c):
            for node in server.ingest.nodes.values():  # the fed nodes' streams close: forget may retire them
                if node.stream is not None:
                    server.ingest.detach(node.stream)
            await server.ingest.flusher.flush()
        await c.stop(0.0)

    def close(self) -> None:
        async def stop() -> None:
            for name in "AB":
                await self.servers[name].stop(0.0)

        self.loop.run(stop())
        self.loop.close()
        self.silent.close()

    def http(self, name: str, path: str) -> tuple[int, dict[str, Any], float]:
        server = self.servers[name]
        assert server.http is not None
        started = time.monotonic()
        try:
            with urllib.request.urlopen(f"http://{server.http.address}{path}", timeout=30) as reply:
                status, body = reply.status, reply.read()
        except urllib.error.HTTPError as err:
            status, body = err.code, err.read()
        took = time.monotonic() - started
        return status, json.loads(body) if body.startswith(b"{") else {"text": body.decode()}, took


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("merged_collectors")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    started = Fleet(tmp_path_factory.mktemp("fleet"))
    try:
        yield started
    finally:
        started.close()


def _cli(fleet: Fleet, *args: str, collectors: str = "ABCD") -> tuple[int, str, list[str], float]:
    flags = [x for name in collectors for x in ("--collector", fleet.address[name])]
    started = time.monotonic()
    result = CliRunner().invoke(cli, [*args, *flags, "--timeout", str(CLI_TIMEOUT)])
    took = time.monotonic() - started
    return result.exit_code, result.stdout, result.stderr.splitlines(), took


def _warned_about(fleet: Fleet, lines: list[str]) -> dict[str, str]:
    prefix = "nodeagent-collector: collector "
    out = {}
    for line in lines:
        if line.startswith("{"):  # a log line of the in-process collectors
            continue
        assert line.startswith(prefix), line
        address, _, why = line.removeprefix(prefix).partition(" did not answer: ")
        out[next(n for n, a in fleet.address.items() if a == address)] = why
    return out


def test_nodes_merged_the_freshest_copy_wins_the_dead_are_named_within_the_timeout(fleet: Fleet) -> None:
    status, out, err, took = _cli(fleet, "nodes", "--json")
    assert status == 0, err
    rows = {r["node_id"]: r for r in json.loads(out)}
    assert sorted(rows) == ["a1", "b1", "moved"]  # c1 is on the stopped collector
    assert (rows["moved"]["shard"], rows["moved"]["stale_shards"]) == (fleet.address["B"], [fleet.address["A"]])
    assert rows["a1"]["shard"] == fleet.address["A"] and rows["b1"]["shard"] == fleet.address["B"]
    warned = _warned_about(fleet, err)
    assert sorted(warned) == ["C", "D"]
    assert warned["C"].startswith("UNAVAILABLE: ")
    assert warned["D"] == f"DEADLINE_EXCEEDED: no answer within {CLI_TIMEOUT:g} s"
    assert took < CLI_TIMEOUT + MARGIN, took
    # The table names the shard too.
    status, table, _err, _took = _cli(fleet, "nodes")
    (line,) = [x for x in table.splitlines() if x.startswith("moved ")]
    assert line.rstrip().endswith(f"{fleet.address['B']} (+1 stale)")


def test_none_answering_is_the_usual_one_line_error(fleet: Fleet) -> None:
    status, out, err, took = _cli(fleet, "nodes", collectors="CD")
    assert status == 1 and out == ""
    assert err[-1] == f"Error: no collector answered StreamNodes ({fleet.address['C']}, {fleet.address['D']})"
    assert took < CLI_TIMEOUT + MARGIN


def test_one_collector_is_asked_as_ever(fleet: Fleet) -> None:
    status, out, err, _took = _cli(fleet, "nodes", "--json", collectors="B")
    assert status == 0 and err == []
    rows = json.loads(out)
    assert sorted(r["node_id"] for r in rows) == ["b1", "moved"] and all("shard" not in r for r in rows)


def test_the_list_can_come_from_fleet_in_collector_toml(fleet: Fleet, tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    listed = ", ".join(f'"{fleet.address[n]}"' for n in "ABC")
    config.write_text(f"[fleet]\ncollectors = [{listed}]\ntimeout_seconds = 9.0\n")
    result = CliRunner().invoke(cli, ["nodes", "--json", "--config", str(config), "--timeout", "1"])
    assert result.exit_code == 0, result.stderr
    assert {r["node_id"] for r in json.loads(result.stdout)} >= {"a1", "b1"}
    assert sorted(_warned_about(fleet, result.stderr.splitlines())) == ["C"]
    # A --collector on the command line is asked alone, as ever.
    result = CliRunner().invoke(cli, ["nodes", "--json", "--config", str(config), "--collector", fleet.address["A"]])
    assert result.exit_code == 0 and all("shard" not in r for r in json.loads(result.stdout))


def test_alerts_jobs_and_history_merged(fleet: Fleet) -> None:
    status, out, err, _took = _cli(fleet, "alerts", "--json", "--all")
    assert status == 0 and sorted(_warned_about(fleet, err)) == ["C", "D"]
    assert all(row["shard"] in (fleet.address["A"], fleet.address["B"]) for row in json.loads(out))
    status, out, err, _took = _cli(fleet, "jobs", "--json")
    assert status == 0, err
    assert isinstance(json.loads(out), list)
    status, out, err, _took = _cli(fleet, "history", "moved", "--json", collectors="ABC")
    assert status == 0, err
    rows = json.loads(out)
    assert {r["shard"] for r in rows} == {fleet.address["A"], fleet.address["B"]}  # both hold minutes of it
    keys = [(r["time_unix_seconds"], -1 if r["gpu"] is None else r["gpu"], r["shard"]) for r in rows]
    assert keys == sorted(keys)
    assert sorted(_warned_about(fleet, err)) == ["C"]


def test_the_fleet_page_merges_over_http_and_marks_the_dead(fleet: Fleet) -> None:
    status, body, took = fleet.http("A", "/api/fleet")
    assert status == 200
    assert took < FLEET_TIMEOUT + MARGIN, took
    shards = {s["shard"]: s for s in body["shards"]}
    assert [s["answered"] for s in body["shards"]] == [True, True, False, False]
    assert list(shards) == [fleet.address[n] for n in "ABCD"]
    assert shards[fleet.address["D"]]["error"] == f"DEADLINE_EXCEEDED: no answer within {FLEET_TIMEOUT:g} s"
    nodes = {n["node_id"]: n for n in body["nodes"]}
    assert sorted(nodes) == ["a1", "b1", "moved"]
    assert (nodes["moved"]["shard"], nodes["moved"]["stale_shards"]) == (fleet.address["B"], [fleet.address["A"]])
    assert sum(body["states"].values()) == 3  # "moved" counted once
    status, node, _took = fleet.http("A", "/api/node/moved")
    assert status == 200 and node["shard"] == fleet.address["B"] and node["stale_shards"] == [fleet.address["A"]]
    status, node, _took = fleet.http("A", "/api/node/b1")
    assert status == 200 and node["shard"] == fleet.address["B"]
    status, missing, _took = fleet.http("A", "/api/node/nobody")
    assert status == 404 and len(missing["shards"]) == 4
    for path in ("/api/alerts", "/api/jobs"):
        status, other, _took = fleet.http("A", path)
        assert status == 200 and len(other["shards"]) == 4
    # B has no [fleet]: its page is its own; /metrics is never merged.
    status, own, _took = fleet.http("B", "/api/fleet")
    assert status == 200 and "shards" not in own and sorted(n["node_id"] for n in own["nodes"]) == ["b1", "moved"]
    status, metrics, _took = fleet.http("A", "/metrics")
    assert status == 200 and 'node="a1"' in metrics["text"] and 'node="b1"' not in metrics["text"]


def test_the_page_rpc_answers_local_with_the_header_merged_without(fleet: Fleet) -> None:
    def page(name: str, path: str, local: bool) -> tuple[pb.PageResponse, Any]:
        with grpc.insecure_channel(fleet.address[name]) as channel:
            metadata = (LOCAL_HEADER,) if local else ()
            reply = pb_grpc.QueryStub(channel).Page(pb.PageRequest(path=path), timeout=10, metadata=metadata)
        return reply, json.loads(reply.body) if reply.content_type.startswith("application/json") else None

    reply, body = page("A", "/api/fleet", local=True)
    assert (
        reply.status == 200 and "shards" not in body and sorted(n["node_id"] for n in body["nodes"]) == ["a1", "moved"]
    )
    reply, body = page("A", "/api/fleet", local=False)
    assert reply.status == 200 and len(body["shards"]) == 4 and len(body["nodes"]) == 3
    reply, _body = page("B", "/metrics", local=True)
    assert reply.status == 200 and b'node="b1"' in reply.body
    reply, _body = page("B", "/nowhere", local=True)
    assert reply.status == 404


def test_the_page_shows_a_banner_naming_who_did_not_answer(fleet: Fleet, tmp_path: Path) -> None:
    from tests.fakes.chromium import Browser  # skips without chromium

    server = fleet.servers["A"]
    assert server.http is not None
    with Browser(tmp_path / "profile") as browser:
        page = browser.open(f"http://{server.http.address}/", 1200, 800)
        page.wait_for("document.querySelectorAll('#nodes tr.node').length === 3")
        banner = page.evaluate("({hidden: document.getElementById('shards').hidden, "
                               "text: document.getElementById('shards').textContent})")  # fmt: skip
        held = page.evaluate("Object.fromEntries([...document.querySelectorAll('#nodes tr.node')].map("
                             "(r) => [r.dataset.node, r.querySelector('.shard').textContent]))")  # fmt: skip
    assert not banner["hidden"]
    assert banner["text"].startswith("2 of 4 collectors did not answer")
    assert fleet.address["C"] in banner["text"] and fleet.address["D"] in banner["text"]
    assert fleet.address["B"] not in banner["text"]
    assert held == {"a1": fleet.address["A"], "b1": fleet.address["B"], "moved": f"{fleet.address['B']} +1 stale"}


def test_forget_asks_each_and_says_which_held_it(fleet: Fleet) -> None:
    status, out, err, _took = _cli(fleet, "forget", "moved", collectors="ABC")
    assert status == 0, err
    held = [line.removeprefix("forgot moved on ").split(": ", 1)[0] for line in out.splitlines()]
    assert sorted(held) == sorted([fleet.address["A"], fleet.address["B"]])
    assert sorted(_warned_about(fleet, err)) == ["C"]
    status, _out, err, _took = _cli(fleet, "forget", "moved", collectors="AB")
    assert (
        status == 1
        and err[-1] == f"Error: no collector holds node 'moved' (asked: {fleet.address['A']}, {fleet.address['B']})"
    )


def test_a_collector_that_returns_is_asked_again_within_seconds(fleet: Fleet, tmp_path: Path) -> None:
    """A's kept channel to C retries every 2 s at most: C back on its port is merged again."""
    back = fleet._server(tmp_path, "C", FleetConfig())

    async def start() -> None:
        await back.start()
        feed_simulated(back.ingest, {"c1": "healthy"}, 5)

    fleet.loop.run(start())
    try:
        deadline = time.monotonic() + 15.0
        answered: list[bool] = []
        while time.monotonic() < deadline:
            _status, body, _took = fleet.http("A", "/api/fleet")
            answered = [s["answered"] for s in body["shards"]]
            if answered[2]:
                break
            time.sleep(0.25)
        assert answered == [True, True, True, False]
        assert "c1" in {n["node_id"] for n in body["nodes"]}
    finally:
        fleet.loop.run(back.stop(0.0))
