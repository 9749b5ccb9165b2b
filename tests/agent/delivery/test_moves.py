"""Placement by node id over real gRPC on loopback: a node whose job appears stays on the
collector its node id ranks first (and so does every node of a job), follows a front's redirect,
fails over and moves back; every report stored exactly once over all collectors (or twice only
as counted)."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from nodeagent.agent.delivery.spool import Spool
from nodeagent.collector.ingest.shown_state import node_shown_state
from nodeagent.collector.service.server import CollectorServer
from nodeagent.core.transport.rendezvous import rendezvous_order
from nodeagent.core.wire.framing import OWNER_PORT_TRAILER
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import wait_for
from tests.fakes.ingest_server import serve_ingest
from tests.fakes.shards import FAST, Collectors, FakeNode, drive


@pytest.fixture
def collectors(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Collectors]:
    count, node_down = getattr(request, "param", (2, 60.0))
    shards = Collectors(tmp_path, count, node_down_seconds=node_down)
    try:
        yield shards
    finally:
        shards.close()


def _key_ranking_first(addresses: list[str], wanted: str, avoid: str = "") -> str:
    """A job key whose first choice is ``wanted``."""
    for i in range(1000):
        key = f"slurm/job-{i}"
        if rendezvous_order(key, addresses)[0] == wanted and key != avoid:
            return key
    raise AssertionError("no key ranks it first")


def _stored_on(shards: Collectors, i: int) -> int:
    """Reports stored in collector ``i``'s database (after ``close``)."""
    with sqlite3.connect(shards.dbs[i]) as conn:
        return int(conn.execute("SELECT count(*) FROM history_reports").fetchone()[0])


def _all_once(shards: Collectors, nodes: list[FakeNode]) -> tuple[int, int, int]:
    """(missing, doubled, stored) over every collector's store, of the reports the nodes made."""
    stored = shards.stored()
    wanted = {(n.node_id, n.spool.epoch, s) for n in nodes for s in range(1, n.seq + 1)}
    missing = len(wanted - set(stored))
    doubled = sum(1 for key, count in stored.items() if count > 1)
    return missing, doubled, sum(stored.values())


def test_a_node_whose_job_appears_stays_on_its_collector(collectors: Collectors, tmp_path: Path) -> None:
    """The job's key ranks the other collector first: the node stays where its node id put it,
    no goodbye, no second stream, every report stored once and all of them at home."""
    node_id = "stayer"
    addresses = collectors.addresses
    home = rendezvous_order(node_id, addresses)[0]
    other = next(a for a in addresses if a != home)
    job = _key_ranking_first(addresses, other)
    node = FakeNode(node_id, Spool(directory=tmp_path / "spool"), addresses, job=job, job_from_seq=11).start()
    i_home, i_other = addresses.index(home), addresses.index(other)
    try:
        drive([node], 10, 0.05)
        assert wait_for(lambda: node_id in collectors.connected(i_home), timeout=10)
        drive([node], 30, 0.05)
        assert wait_for(node.spool.all_acked, timeout=15)
        sender = node.sender
        assert sender is not None
        assert (sender.connected_to, sender.moves_total, sender.reconnects_total) == (home, 0, 0)
        assert node_id in collectors.connected(i_home)
        assert node_id not in collectors.connected(i_other)
    finally:
        node.stop()
    collectors.close()
    assert _all_once(collectors, [node]) == (0, 0, 40)
    assert _stored_on(collectors, i_other) == 0


def test_a_front_redirect_is_followed_to_the_owner_port(collectors: Collectors, tmp_path: Path) -> None:
    owner = collectors.ports[0]
    hellos: list[pb.NodeInfo] = []

    async def front(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        hello = pb.AgentMessage.FromString(await context.read())
        hellos.append(hello.hello)
        await context.abort(grpc.StatusCode.UNAVAILABLE, "owned by another worker",
                            trailing_metadata=((OWNER_PORT_TRAILER, str(owner)),))  # fmt: skip

    front_port = serve_ingest(front, 30)
    node = FakeNode("redirected", Spool(), [f"127.0.0.1:{front_port}"]).start()
    try:
        drive([node], 20, 0.02)
        assert wait_for(node.spool.all_acked, timeout=15)
        sender = node.sender
        assert sender is not None
        assert wait_for(lambda: sender.connected_via == f"127.0.0.1:{owner}", timeout=5)
        assert sender.connected_to == f"127.0.0.1:{front_port}"
    finally:
        node.stop()
    collectors.close()
    assert hellos and hellos[0].node_id == "redirected"
    assert _all_once(collectors, [node]) == (0, 0, 20)


@pytest.mark.alone  # asserts a latency bound: run alone, not beside the rest of the suite
def test_failover_and_the_move_back_when_the_first_choice_returns(collectors: Collectors, tmp_path: Path) -> None:
    node_id = "returner"
    addresses = collectors.addresses
    first = addresses.index(rendezvous_order(node_id, addresses)[0])
    second = 1 - first
    probe = 1.0
    config = replace(FAST, preferred_probe_seconds=probe)
    node = replace(FakeNode(node_id, Spool(directory=tmp_path / "spool"), addresses), config=config).start()
    stop = threading.Event()
    producer = threading.Thread(target=_produce, args=(node, stop), daemon=True)
    producer.start()
    try:
        assert wait_for(lambda: node_id in collectors.connected(first), timeout=10)
        collectors.stop(first)
        assert wait_for(lambda: node_id in collectors.connected(second), timeout=10)
        time.sleep(1.0)
        collectors.start(first)
        back_from = time.monotonic()
        assert wait_for(lambda: node_id in collectors.connected(first), timeout=4 * probe + 5)
        back_seconds = time.monotonic() - back_from
        # The move home said goodbye: the fallback shows the node moved, not down.
        assert wait_for(lambda: collectors.on(second, _shown_state(node_id)) == "moved", timeout=5)
        time.sleep(0.5)
    finally:
        stop.set()
        producer.join(10)
    try:
        assert wait_for(node.spool.all_acked, timeout=15)
        sender = node.sender
        assert sender is not None
        resent = sender.reports_resent_total
    finally:
        node.stop()
    collectors.close()
    missing, doubled, _stored = _all_once(collectors, [node])
    print(f"back on the first choice {back_seconds:.2f} s after it returned (probe {probe:g} s); "
          f"doubled {doubled}, resent {resent}")  # fmt: skip
    # Within about two probe periods (the first probe may just have missed it), loaded machine aside.
    assert back_seconds < 2 * probe + 1.5, back_seconds
    assert missing == 0
    assert doubled <= resent  # what the stopped collector committed without acknowledging, counted


def _shown_state(node_id: str) -> Callable[[CollectorServer], str]:
    def read(server: CollectorServer) -> str:
        ingest = server.ingest
        return node_shown_state(ingest.nodes[node_id], ingest.clock(), ingest.detector_config.window_seconds)

    return read


def _produce(node: FakeNode, stop: threading.Event) -> None:
    while not stop.is_set():
        node.tick()
        time.sleep(0.05)


@pytest.mark.parametrize("collectors", [(3, 60.0)], indirect=True)
def test_a_job_s_nodes_spread_over_three_collectors_stay_spread(collectors: Collectors, tmp_path: Path) -> None:
    """Six nodes of one job, their node ids' homes on all three collectors: when the job appears
    each keeps its stream at home; nothing lost or doubled, nothing resent."""
    addresses = collectors.addresses
    names = _names_on_every_collector(addresses, per_collector=2)
    homes = {name: addresses.index(rendezvous_order(name, addresses)[0]) for name in names}
    job = "slurm/4242"
    nodes = [FakeNode(n, Spool(directory=tmp_path / n), addresses, job=job, job_from_seq=11) for n in names]
    for node in nodes:
        node.start()
    try:
        drive(nodes, 10, 0.05)

        def placed() -> dict[str, int]:
            return {name: i for i in range(3) for name in collectors.connected(i)}

        assert wait_for(lambda: placed() == homes, timeout=15), placed()
        drive(nodes, 30, 0.05)
        assert wait_for(lambda: all(n.spool.all_acked() for n in nodes), timeout=30)
        assert placed() == homes
        senders = [n.sender for n in nodes if n.sender is not None]
        moved = [(s.moves_total, s.reconnects_total, s.reports_resent_total) for s in senders]
    finally:
        for node in nodes:
            node.stop()
    collectors.close()
    assert moved == [(0, 0, 0)] * len(names)
    assert _all_once(collectors, nodes) == (0, 0, len(names) * 40)


def _names_on_every_collector(addresses: list[str], per_collector: int) -> list[str]:
    """Node ids, ``per_collector`` of them ranking each collector first."""
    by_home: dict[str, list[str]] = {a: [] for a in addresses}
    for i in range(1000):
        name = f"gpu-node-{i:03d}"
        home = by_home[rendezvous_order(name, addresses)[0]]
        if len(home) < per_collector:
            home.append(name)
    return [name for home in by_home.values() for name in home]


def test_reports_sent_again_to_another_collector_are_counted_resent(collectors: Collectors) -> None:
    """A collector that took five reports and went away without acknowledging them: sent again to
    the next, they are counted (each may now be stored on both)."""
    sessions: list[int] = []

    async def takes_five_then_fails(_requests: object, context: grpc.aio.ServicerContext[bytes, pb.Ack]) -> None:
        sessions.append(1)
        await context.read()  # hello
        if len(sessions) == 1:
            await context.send_initial_metadata((("nodeagent-stream", "accepted"),))
            for _ in range(5):
                await context.read()
        await context.abort(grpc.StatusCode.UNAVAILABLE, "going away")

    lost = f"127.0.0.1:{serve_ingest(takes_five_then_fails, 30)}"
    real = collectors.addresses[0]
    node_id = next(f"n{i}" for i in range(100) if rendezvous_order(f"n{i}", [lost, real])[0] == lost)
    node = FakeNode(node_id, Spool(), [lost, real])
    drive([node], 5, 0.0)
    node.start()
    try:
        assert wait_for(node.spool.all_acked, timeout=15)
        sender = node.sender
        assert sender is not None
        assert sender.reports_resent_total == 5
    finally:
        node.stop()
    collectors.close()
    assert _all_once(collectors, [node]) == (0, 0, 5)
