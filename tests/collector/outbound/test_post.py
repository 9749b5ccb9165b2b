"""The collector's one POST: which answers are accepted, retried or refused, and the one line each
leaves for logs, against a real HTTP server."""

from __future__ import annotations

import socket
import threading

import pytest

from nodeagent.collector.outbound.post import USER_AGENT, Answer, post
from tests.fakes.http_receiver import DROP, http_receiver


@pytest.mark.parametrize(
    ("outcome", "accepted", "retry"),
    [
        (200, True, False),
        (204, True, False),
        (500, False, True),
        (503, False, True),
        (429, False, True),
        (400, False, False),
        (404, False, False),
        (413, False, False),
        (DROP, False, True),
    ],
)
def test_what_each_answer_means(outcome: int | str, accepted: bool, retry: bool) -> None:
    with http_receiver([outcome]) as receiver:
        answer = post(receiver.url, b"x", {"Content-Type": "application/octet-stream"}, timeout_seconds=5)
    assert (answer.accepted, answer.retry) == (accepted, retry)
    assert answer.status == (0 if outcome == DROP else outcome)


def test_headers_and_body_arrive_as_given() -> None:
    with http_receiver() as receiver:
        answer = post(
            receiver.url, b"payload", {"Content-Type": "application/x-protobuf", "X-Extra": "1"}, timeout_seconds=5
        )
    assert answer == Answer(200, "HTTP 200")
    [attempt] = receiver.attempts
    assert attempt.body == b"payload"
    assert attempt.headers["user-agent"] == USER_AGENT
    assert (attempt.headers["content-type"], attempt.headers["x-extra"]) == ("application/x-protobuf", "1")


def test_a_refusal_keeps_the_first_line_of_the_receivers_reason() -> None:
    with http_receiver([400], error_body="out of order sample\nsecond line") as receiver:
        answer = post(receiver.url, b"x", {}, timeout_seconds=5)
    assert answer == Answer(400, "HTTP 400: out of order sample")


def test_no_answer_is_status_0_and_names_the_cause() -> None:
    with http_receiver([DROP]) as receiver:
        dropped = post(receiver.url, b"x", {}, timeout_seconds=5)
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    refused = post(f"http://127.0.0.1:{port}/", b"x", {}, timeout_seconds=5)
    assert dropped == Answer(0, "RemoteDisconnected: Remote end closed connection without response")
    assert refused.status == 0 and refused.retry
    assert refused.detail.startswith("ConnectionRefusedError: ")


def test_a_status_whose_reason_never_comes_is_still_that_status() -> None:
    # A receiver that answers 503 and then stalls before the body: the read of its reason times
    # out. That is still a 503 (retry), not an exception out of the sender's thread.
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        stalled: list[socket.socket] = []

        def answer_and_stall() -> None:
            connection, _ = server.accept()
            stalled.append(connection)
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 100\r\n\r\n")

        thread = threading.Thread(target=answer_and_stall, daemon=True)
        thread.start()
        try:
            answer = post(f"http://127.0.0.1:{server.getsockname()[1]}/", b"x", {}, timeout_seconds=0.3)
        finally:
            thread.join(5)
            for connection in stalled:
                connection.close()
    assert answer == Answer(503, "HTTP 503")
    assert answer.retry
