"""Shards' streams merged page by page over gRPC: each key once, by ``merge.py``'s rules, pages
under the bound, a shard that fails in the middle of its stream named in ``shards``."""

from __future__ import annotations

import asyncio
from typing import Any

import grpc

from nodeagent.collector.fleet.answer_pages import KINDS, pages_of
from nodeagent.collector.fleet.fanout import Shard, ShardClients
from nodeagent.collector.fleet.stream_merge import merged_pages
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.fakes.fleet import free_port

PAGE = 2048


def _alert(name: str, node: str, starts: float, ends: float | None = None) -> pb.AlertRecord:
    alert = pb.AlertRecord(name=name, node_id=node, key="gpu0", starts_at_unix_seconds=starts)
    if ends is not None:
        alert.ends_at_unix_seconds = ends
    return alert


class _Shard(pb_grpc.QueryServicer):
    """Streams ``alerts`` and ``verdicts`` in small pages; ``fail_after`` pages, then an error."""

    def __init__(
        self, alerts: list[pb.AlertRecord], verdicts: list[pb.JobVerdict], fail_after: int | None = None
    ) -> None:
        self.alerts, self.verdicts, self.fail_after = alerts, verdicts, fail_after

    async def StreamAlerts(self, request: Any, context: Any) -> None:
        await self._send(context, "StreamAlerts", self.alerts)

    async def StreamJobs(self, request: Any, context: Any) -> None:
        await self._send(context, "StreamJobs", self.verdicts)

    async def _send(self, context: Any, method: str, items: list[Any]) -> None:
        for sent, page in enumerate(pages_of(KINDS[method], items, 512)):
            if sent == self.fail_after:
                await context.abort(grpc.StatusCode.INTERNAL, "the worker went away")
            await context.write(page)


def _merged(servicers: list[pb_grpc.QueryServicer], method: str, request: Any) -> list[Any]:
    async def run() -> list[Any]:
        servers, shards = [], []
        for index, servicer in enumerate(servicers):
            server = grpc.aio.server()
            pb_grpc.add_QueryServicer_to_server(servicer, server)
            address = f"127.0.0.1:{free_port()}"
            server.add_insecure_port(address)
            await server.start()
            servers.append(server)
            shards.append(Shard(f"s{index}", address))
        clients = ShardClients(shards)
        try:
            return [page async for page in merged_pages(clients, KINDS[method], request, 5.0, PAGE)]
        finally:
            await clients.close()
            for server in servers:
                await server.stop(None)

    return asyncio.run(run())


def test_alerts_merge_by_key_across_pages_firing_over_resolved() -> None:
    one = [_alert("GpuXid", f"node-{i:03d}", 100.0 + i) for i in range(60)]
    # The second shard holds node-010's alert resolved (the firing one wins) and alerts of its own.
    two = [_alert("GpuXid", "node-010", 50.0, ends=90.0)] + [_alert("NodeDown", f"n-{i}", 5.0) for i in range(40)]
    pages = _merged([_Shard(one, []), _Shard(two, [])], "StreamAlerts", pb.ListAlertsRequest())
    assert len(pages) >= 3
    assert all(page.ByteSize() <= PAGE + 200 for page in pages)
    alerts = [a for page in pages for a in page.alerts]
    keys = [(a.name, a.node_id, a.key) for a in alerts]
    assert keys == sorted(set(keys)) and len(keys) == 100
    xid = next(a for a in alerts if a.node_id == "node-010")
    assert (xid.shard, xid.HasField("ends_at_unix_seconds")) == ("s0", False)
    assert [(s.shard, s.answered) for s in pages[-1].shards] == [("s0", True), ("s1", True)]


def test_a_shard_failing_mid_stream_is_named_and_the_others_merged_whole() -> None:
    wide = [pb.JobVerdict(job=f"job-{i:04d}", nodes=["a", "b"], evidence={"x": "y" * 20}) for i in range(50)]
    narrow = [pb.JobVerdict(job="job-0003", nodes=["a"], time_unix_seconds=9.0)]
    failing = _Shard([], [pb.JobVerdict(job=f"zz-{i:04d}", evidence={"x": "y" * 20}) for i in range(50)], 2)
    pages = _merged([_Shard([], wide), _Shard([], narrow), failing], "StreamJobs", pb.ListJobsRequest())
    jobs = {v.job: v for page in pages for v in page.jobs}
    assert {f"job-{i:04d}" for i in range(50)} <= set(jobs)
    assert jobs["job-0003"].shard == "s0"  # judged over most nodes
    assert 0 < sum(name.startswith("zz-") for name in jobs) < 50  # what came before it failed
    shards = {s.shard: (s.answered, s.error) for s in pages[-1].shards}
    assert shards["s2"] == (False, "INTERNAL: the worker went away")
    assert shards["s0"] == shards["s1"] == (True, "")
