"""Routing by job over real gRPC on loopback: a node moves to the collector its job key ranks
first, follows a front's redirect, fails over and moves back, and a job's nodes meet on one
collector; every report stored exactly once over all collectors (or twice only as counted)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import grpc
import pytest

from nodeagent.agent.delivery.spool import Spool
from nodeagent.collector.views.shown_state import node_shown_state
from nodeagent.core.transport.rendezvous import rendezvous_order
from nodeagent.core.wire.framing import OWNER_PORT_TRAILER
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
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


def _all_once(shards: Collectors, nodes: list[FakeNode]) -> tuple[int, int, int]:
    """(missing, doubled, stored) over every collector's store, of the reports the nodes made."""
    stored = shards.stored()
    wanted = {(n.node_id, n.spool.epoch, s) for n in nodes for s in range(1, n.seq + 1)}
    missing = len(wanted - set(stored))
    doubled = sum(1 for key, count in stored.items() if count > 1)
    return missing, doubled, sum(stored.values())


@pytest.mark.parametrize("collectors", [(2, 1.0)], indirect=True)
def test_a_node_whose_job_appears_moves_to_the_collector_its_key_ranks_first(
    collectors: Collectors, tmp_path: Path
) -> None:
    node_id = "mover"
    addresses = collectors.addresses
    home = rendezvous_order(node_id, addresses)[0]
    new = next(a for a in addresses if a != home)
    job = _key_ranking_first(addresses, new)
    node = FakeNode(node_id, Spool(directory=tmp_path / "spool"), addresses, job=job, job_from_seq=11).start()
    i_home, i_new = addresses.index(home), addresses.index(new)
    try:
        drive([node], 10, 0.05)
        assert wait_for(lambda: node_id in collectors.connected(i_home), timeout=10)
        drive([node], 30, 0.05)
        assert wait_for(node.spool.all_acked, timeout=15)
        assert node_id in collectors.connected(i_new)
        sender = node.sender
        assert sender is not None
        assert (sender.routing_key, sender.moves_total, sender.reports_resent_total) == (job, 1, 0)
        # The old collector: moved, not down, and no NodeDown (1 s) after it stays silent for 2.5 s.
        time.sleep(2.5)

        def seen_there(server: object) -> tuple[str, list[str]]:
            ingest = server.ingest  # type: ignore[attr-defined]
            state = node_shown_state(ingest.nodes[node_id], ingest.clock(), ingest.detector_config.window_seconds)
            book = server.alerting.book  # type: ignore[attr-defined]
            return state, [a.name for a in book.recent(1000) if a.node_id == node_id]

        state, alerts = collectors.on(i_home, seen_there)
        assert state == "moved"
        assert "NodeDown" not in alerts
    finally:
        node.stop()
    collectors.close()
    assert _all_once(collectors, [node]) == (0, 0, 40)


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
    # Within about two probe periods (the first probe may just have missed it), loaded machine aside.
    assert back_seconds < 2 * probe + 1.5, back_seconds
    assert missing == 0
    assert doubled <= resent  # what the stopped collector committed without acknowledging, counted


def _produce(node: FakeNode, stop: threading.Event) -> None:
    while not stop.is_set():
        node.tick()
        time.sleep(0.05)


@pytest.mark.parametrize("collectors", [(3, 60.0)], indirect=True)
def test_a_16_node_job_spread_over_three_collectors_ends_up_on_one(collectors: Collectors, tmp_path: Path) -> None:
    addresses = collectors.addresses
    names = [f"gpu-node-{i:02d}" for i in range(16)]
    homes = {rendezvous_order(name, addresses)[0] for name in names}
    assert len(homes) == 3  # they come up spread over all three
    job = "slurm/4242"
    target = addresses.index(rendezvous_order(job, addresses)[0])
    job_from = 11
    nodes = [FakeNode(n, Spool(directory=tmp_path / n), addresses, job=job, job_from_seq=job_from) for n in names]
    for node in nodes:
        node.start()
    interval = 0.1
    try:
        drive(nodes, job_from - 1, interval)
        assert wait_for(lambda: sum(len(collectors.connected(i)) for i in range(3)) == 16, timeout=15)
        assert len(collectors.connected(target)) < 16
        held_at: list[float] = []
        done_at: list[float] = []

        def watch() -> None:
            end = time.monotonic() + 30
            while time.monotonic() < end and not done_at:
                if len(collectors.connected(target)) == 16:
                    done_at.append(time.monotonic())
                time.sleep(0.02)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        drive(nodes, 2, interval)  # the job key's first two reports
        held_at.append(time.monotonic())
        drive(nodes, 48, interval)  # its third makes it the key
        watcher.join(30)
        assert done_at, "not every node reached the job's collector"
        assert all(not collectors.connected(i) for i in range(3) if i != target)
        assert wait_for(lambda: all(n.spool.all_acked() for n in nodes), timeout=30)

        def job_nodes() -> list[str]:
            with grpc.insecure_channel(addresses[target]) as channel:
                jobs = pb_grpc.QueryStub(channel).ListJobs(pb.ListJobsRequest(), timeout=10).jobs
            return [n for j in jobs if j.job == job for n in j.nodes]

        assert wait_for(lambda: len(job_nodes()) == 16, timeout=15), job_nodes()
        members = collectors.on(target, lambda s: sorted(s.ingest.jobs.membership.jobs[job].members))
        assert members == names
        resent = [n.sender.reports_resent_total for n in nodes if n.sender is not None]
    finally:
        for node in nodes:
            node.stop()
    collectors.close()
    print(f"16 nodes on one collector {done_at[0] - held_at[0]:.2f} s after the key's third report")
    assert _all_once(collectors, nodes) == (0, 0, 16 * 60)
    assert resent == [0] * 16
