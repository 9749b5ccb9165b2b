"""The routing key: the job with the most GPUs on the node, changed only once held for 3 reports."""

from __future__ import annotations

from nodeagent.agent.delivery.moves import ResentCount, owner_port, with_port
from nodeagent.agent.delivery.routing import ROUTING_HOLD_REPORTS, RoutingKey, job_key
from nodeagent.v1 import nodeagent_pb2 as pb


def _report(*jobs: tuple[str, int]) -> pb.NodeReport:
    report = pb.NodeReport(node_id="n")
    for key, gpus in jobs:
        report.jobs.add(job=key, gpus=range(gpus))
    return report


def test_the_job_with_most_gpus_wins_ties_by_the_smaller_key() -> None:
    assert job_key(_report().jobs) == ""
    assert job_key(_report(("b", 2), ("a", 1)).jobs) == "b"
    assert job_key(_report(("b", 2), ("a", 2)).jobs) == "a"
    assert job_key(_report(("", 8), ("c", 0)).jobs) == "c"


def test_a_new_key_holds_for_three_reports_before_it_counts() -> None:
    assert ROUTING_HOLD_REPORTS == 3
    heard: list[str] = []
    routing = RoutingKey()
    routing.subscribe(heard.append)
    assert [routing.observe(_report(("job", 4))) for _ in range(3)] == [False, False, True]
    assert (routing.key, heard) == ("job", ["job"])
    # Back to none takes as long; one report without the job moves nothing.
    assert not routing.observe(_report())
    assert not routing.observe(_report(("job", 4)))
    assert [routing.observe(_report()) for _ in range(3)] == [False, False, True]
    assert (routing.key, heard) == ("", ["job", ""])


def test_a_key_that_flickers_never_holds() -> None:
    routing = RoutingKey()
    for i in range(30):
        routing.observe_key("a" if i % 3 == 0 else "b" if i % 3 == 1 else "")
    assert routing.key == ""
    # Two candidates alternating: each run is cut short by the other.
    for i in range(30):
        routing.observe_key("a" if (i // 2) % 2 == 0 else "b")
    assert routing.key == ""
    for key in ("a", "a", "b", "b", "b"):
        routing.observe_key(key)
    assert routing.key == "b"


def test_the_redirect_trailer_and_the_host_it_keeps() -> None:
    assert owner_port((("nodeagent-owner-port", "50071"),)) == 50071  # type: ignore[arg-type]
    assert owner_port((("other", "1"),)) is None  # type: ignore[arg-type]
    assert owner_port((("nodeagent-owner-port", "x"),)) is None  # type: ignore[arg-type]
    assert with_port("10.0.0.1:50051", 50052) == "10.0.0.1:50052"
    assert with_port("[::1]:50051", 50052) == "[::1]:50052"


def test_resent_counts_only_what_another_collector_may_hold() -> None:
    resent = ResentCount()
    resent.ended("a", sent_seq=10, first_unacked_seq=6)  # 6..10 sent to a, unacknowledged
    assert resent.bound_for("a", first_unacked_seq=6) == 0  # a again: it deduplicates
    assert resent.bound_for("b", first_unacked_seq=6) == 10
    assert resent.bound_for("b", first_unacked_seq=11) == 0  # acknowledged since
    resent.ended("a", sent_seq=5, first_unacked_seq=6)  # everything it sent was acknowledged
    assert resent.bound_for("b", first_unacked_seq=6) == 0
