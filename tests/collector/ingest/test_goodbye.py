"""The collector's side of a goodbye: it ends what a stream may carry; after a move the node shows
``moved``, after a clean stop ``stopped`` (neither down, no NodeDown) once that stream ends, and
its next stream here clears it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import grpc

from nodeagent.collector.ingest.shown_state import down_after_seconds, node_shown_state
from nodeagent.collector.states.words import MOVED, STOPPED, shown_state, worst_first
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import wait_for
from tests.fakes.shards import Collectors

NODE = "leaver"


def _hello() -> bytes:
    return pb.AgentMessage(hello=pb.NodeInfo(node_id=NODE, routing_key="slurm/1")).SerializeToString()


def _report(seq: int) -> bytes:
    report = pb.NodeReport(node_id=NODE, epoch=7, seq=seq, time_unix_seconds=1_800_000_000.0 + seq)
    return frame_report(report.SerializeToString())


def _goodbye() -> bytes:
    return pb.AgentMessage(goodbye=pb.Goodbye(reason="moving", routing_key="slurm/1")).SerializeToString()


def _call(address: str, messages: Iterator[bytes]) -> tuple[grpc.StatusCode, list[int]]:
    acks: list[int] = []
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b,
                                     response_deserializer=pb.Ack.FromString)  # fmt: skip
        try:
            acks.extend(ack.acked_seq for ack in call(messages, timeout=60) if not ack.attached)
        except grpc.RpcError as err:
            return err.code(), acks
    return grpc.StatusCode.OK, acks


def _state(shards: Collectors) -> tuple[str, list[str]]:
    def read(server: object) -> tuple[str, list[str]]:
        ingest = server.ingest  # type: ignore[attr-defined]
        state = node_shown_state(ingest.nodes[NODE], ingest.clock(), down_after_seconds(ingest))
        book = server.alerting.book  # type: ignore[attr-defined]
        return state, [a.name for a in book.active() if a.node_id == NODE]

    return shards.on(0, read)


def test_moved_is_its_own_state_and_sorts_last() -> None:
    assert shown_state("busy", gpu_count=8, silent=True, moved=True) == MOVED
    # The page lists it after every other node, the idle and the stopped included.
    rows = [
        {"node_id": n, "state": state, "starvation_ratio": None, "gpu_hours_lost_today": 0.0}
        for n, state in (("a", MOVED), ("b", "idle"), ("c", STOPPED), ("d", "starved"))
    ]
    assert [r["node_id"] for r in sorted(rows, key=worst_first)] == ["d", "b", "c", "a"]


def test_goodbye_ends_the_stream_marks_the_node_moved_and_a_new_stream_clears_it(tmp_path: Path) -> None:
    shards = Collectors(tmp_path, 1, node_down_seconds=1.0)
    address = shards.addresses[0]
    try:
        # A report after goodbye is refused.
        code, _acks = _call(address, iter([_hello(), _report(1), _goodbye(), _report(2)]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        # A goodbye is checked as a hello is: its key is a job key.
        bad = pb.AgentMessage(goodbye=pb.Goodbye(reason="moving", routing_key="k" * 300)).SerializeToString()
        code, _acks = _call(address, iter([_hello(), bad]))
        assert code == grpc.StatusCode.INVALID_ARGUMENT
        assert shards.on(0, lambda s: s.rejected.get(("INVALID_ARGUMENT", "invalid_goodbye"))) == 1
        assert shards.on(0, lambda s: s.rejected.get(("INVALID_ARGUMENT", "after_goodbye"))) == 1

        # Silent long enough for NodeDown, then goodbye: it resolves, the node shows moved.
        seen: list[tuple[str, list[str]]] = []

        def silent_then_goodbye() -> Iterator[bytes]:
            yield _hello()
            yield _report(2)
            # Silent until NodeDown fires (node_down_seconds 1 s; waited on, not timed: a loaded
            # machine evaluates it later).
            wait_for(lambda: "NodeDown" in _state(shards)[1], timeout=30)
            seen.append(_state(shards))
            yield _goodbye()

        code, acks = _call(address, silent_then_goodbye())
        assert (code, acks[-1:]) == (grpc.StatusCode.OK, [2])
        assert seen[0][1] == ["NodeDown"]  # it was down before it said goodbye
        assert wait_for(lambda: _state(shards) == (MOVED, []), timeout=20), _state(shards)
        time.sleep(2.0)  # still silent, and no NodeDown
        assert _state(shards) == (MOVED, [])

        # Back: a new stream clears it, and its silence counts again from the return.
        def back() -> Iterator[bytes]:
            yield _hello()
            yield _report(3)
            wait_for(lambda: _state(shards)[0] != MOVED, timeout=30)
            seen.append(_state(shards))
            wait_for(lambda: "NodeDown" in _state(shards)[1], timeout=30)

        code, _acks = _call(address, back())
        assert code == grpc.StatusCode.OK
        assert seen[-1][0] != MOVED
        assert "NodeDown" in _state(shards)[1]
    finally:
        shards.close()


def _stopping() -> bytes:
    return pb.AgentMessage(goodbye=pb.Goodbye(reason="stopping", kind=pb.Goodbye.KIND_STOPPING)).SerializeToString()


def test_a_stopping_goodbye_shows_stopped_with_an_info_event_and_no_node_down(tmp_path: Path) -> None:
    shards = Collectors(tmp_path, 1, node_down_seconds=1.0)
    address = shards.addresses[0]
    try:
        code, acks = _call(address, iter([_hello(), _report(1), _stopping()]))
        assert (code, acks[-1:]) == (grpc.StatusCode.OK, [1])
        assert wait_for(lambda: _state(shards) == (STOPPED, ["NodeStopped"]), timeout=5), _state(shards)
        time.sleep(2.5)  # silent past node_down_seconds: still stopped, no NodeDown
        assert _state(shards) == (STOPPED, ["NodeStopped"])
        severity = shards.on(0, lambda s: [a.severity for a in s.alerting.book.active() if a.node_id == NODE])
        assert severity == ["info"]

        # Back: NodeStopped resolves, and the node is watched for NodeDown again from its return.
        seen: list[tuple[str, list[str]]] = []

        def back() -> Iterator[bytes]:
            yield _hello()
            for seq in range(2, 200):  # reporting, so never silent for node_down_seconds
                report = pb.NodeReport(node_id=NODE, epoch=7, seq=seq, time_unix_seconds=time.time())
                yield frame_report(report.SerializeToString())
                time.sleep(0.1)
                state = _state(shards)
                if state[0] != STOPPED and "NodeStopped" not in state[1]:
                    seen.append(state)
                    return

        assert _call(address, back())[0] == grpc.StatusCode.OK
        assert seen and "NodeDown" not in seen[0][1], seen
    finally:
        shards.close()
