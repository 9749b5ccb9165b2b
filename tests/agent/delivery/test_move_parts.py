"""The parts of a move (``moves.py``): the front's redirect trailer, the host it keeps, and the
count of reports that another collector may hold as well."""

from __future__ import annotations

from nodeagent.agent.delivery.moves import ResentCount, owner_port, with_port


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
