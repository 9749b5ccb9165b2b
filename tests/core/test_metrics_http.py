"""What the /metrics server answers: every method, path, header and failure a scraper or a person
with curl can meet (the server is shared by the agent and the collector)."""

from __future__ import annotations

import gzip
import http.client
import io
import socket
import ssl
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nodeagent.core.exposition import http_connection, http_slots
from nodeagent.core.exposition import http_server as metrics_http
from nodeagent.core.exposition.http_reply import TEXT_CONTENT_TYPE
from nodeagent.core.exposition.http_server import MetricsHttpServer
from tests.fakes.certs import Authority
from tests.fakes.fleet import wait_for

BIG_HEAD = http_connection.MAX_REQUEST_HEAD_BYTES
PAGE = b"# HELP m A gauge.\n# TYPE m gauge\nm 1\n" * 50


def _guard(token: str | None, _peer: dict[str, Any] | None, _path: str) -> tuple[int, str] | None:
    if token is None:
        return 401, "no credential"
    return None if token == "scrape" else (403, "not a scraper")


@pytest.fixture
def server() -> Iterator[MetricsHttpServer]:
    healthy = {"ok": True}

    def health() -> tuple[bool, str]:
        return (True, "ok") if healthy["ok"] else (False, "no sampling tick completed for 31.0 s")

    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, health=health, name="test-agent")
    served.start()
    served.healthy = healthy  # type: ignore[attr-defined]
    try:
        yield served
    finally:
        served.stop()


def _request(
    server: MetricsHttpServer, method: str, path: str, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        connection.request(method, path, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


def test_metrics_plain_and_gzipped_when_asked(server: MetricsHttpServer) -> None:
    status, headers, body = _request(server, "GET", "/metrics")
    assert (status, headers["content-type"], body) == (200, TEXT_CONTENT_TYPE, PAGE)
    assert headers["content-length"] == str(len(PAGE)) and "content-encoding" not in headers
    status, headers, body = _request(server, "GET", "/metrics", {"Accept-Encoding": "gzip"})
    assert (status, headers["content-encoding"], headers["content-type"]) == (200, "gzip", TEXT_CONTENT_TYPE)
    assert headers["content-length"] == str(len(body)) and gzip.decompress(body) == PAGE


def test_the_cached_gzip_is_served_when_the_owner_keeps_one() -> None:
    packed = gzip.compress(PAGE)
    served = MetricsHttpServer("127.0.0.1:0", lambda: b"plain\n", metrics_gzip=lambda: packed)
    served.start()
    try:
        assert _request(served, "GET", "/metrics", {"Accept-Encoding": "gzip, deflate"})[2] == packed
        assert _request(served, "GET", "/metrics")[2] == b"plain\n"
    finally:
        served.stop()


def test_head_gives_the_headers_of_get_without_the_body(server: MetricsHttpServer) -> None:
    status, headers, body = _request(server, "HEAD", "/metrics")
    assert (status, body, headers["content-length"]) == (200, b"", str(len(PAGE)))


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE", "OPTIONS", "PURGE"])
def test_other_methods_are_refused_with_405_and_allow(server: MetricsHttpServer, method: str) -> None:
    status, headers, body = _request(server, method, "/metrics")
    assert (status, headers["allow"], body) == (405, "GET, HEAD", b"use GET\n")


def test_health_index_and_unknown_paths(server: MetricsHttpServer) -> None:
    assert _request(server, "GET", "/healthz")[::2] == (200, b"ok\n")
    server.healthy["ok"] = False  # type: ignore[attr-defined]
    assert _request(server, "GET", "/healthz")[::2] == (503, b"no sampling tick completed for 31.0 s\n")
    assert _request(server, "GET", "/")[::2] == (200, b"test-agent\n/metrics\n/healthz\n")
    assert _request(server, "GET", "/metrics?x=1")[2] == PAGE  # the query string is not the path
    assert _request(server, "GET", "/nothing")[::2] == (404, b"not found\n")


def test_a_failing_page_or_health_check_is_a_500_or_503_not_a_dropped_connection() -> None:
    def broken() -> bytes:
        raise RuntimeError("boom")

    def sick() -> tuple[bool, str]:
        raise OSError("gone")

    served = MetricsHttpServer("127.0.0.1:0", broken, health=sick)
    served.start()
    try:
        assert _request(served, "GET", "/metrics")[::2] == (500, b"metrics failed; see the log\n")
        assert _request(served, "GET", "/healthz")[::2] == (503, b"health check failed: OSError: gone\n")
    finally:
        served.stop()


def test_the_guard_sees_the_bearer_token_and_answers_401_or_403() -> None:
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, guard=_guard)
    served.start()
    try:
        status, headers, body = _request(served, "GET", "/metrics")
        assert (status, headers["www-authenticate"], body) == (401, 'Bearer realm="nodeagent"', b"no credential\n")
        assert _request(served, "GET", "/metrics", {"Authorization": "Bearer other"})[::2] == (403, b"not a scraper\n")
        assert _request(served, "GET", "/metrics", {"Authorization": "Basic scrape"})[0] == 403
        assert _request(served, "GET", "/metrics", {"Authorization": "bearer  scrape "})[::2] == (200, PAGE)
    finally:
        served.stop()


def test_a_client_that_sends_nothing_is_dropped_after_the_request_timeout() -> None:
    assert metrics_http.REQUEST_TIMEOUT_SECONDS == 30.0  # the default; a short one here
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, request_timeout_seconds=0.5)
    served.start()
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=20) as silent:
            started = time.monotonic()
            assert silent.recv(100) == b""  # closed by the server, with no reply
            assert time.monotonic() - started < 15
        assert _request(served, "GET", "/metrics")[2] == PAGE  # the server goes on serving others
    finally:
        served.stop()


def test_a_kept_alive_connection_serves_scrape_after_scrape(server: MetricsHttpServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for _ in range(3):  # as Prometheus scrapes: one connection, request after request
            connection.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
            response = connection.getresponse()
            assert response.status == 200 and gzip.decompress(response.read()) == PAGE
            assert not response.will_close
        first = connection.sock
        connection.request("HEAD", "/healthz")
        response = connection.getresponse()
        assert (response.status, response.read()) == (200, b"")
        assert connection.sock is first  # the same connection throughout
    finally:
        connection.close()


def test_a_request_body_is_read_and_dropped_never_taken_for_the_next_request(server: MetricsHttpServer) -> None:
    connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        for method, body, status in (("GET", b"GET /nothing HTTP/1.1\r\n\r\n", 200), ("POST", b"x=1", 405)):
            connection.request(method, "/metrics", body=body, headers={"Content-Length": str(len(body))})
            response = connection.getresponse()
            assert response.status == status
            response.read()
            connection.request("GET", "/metrics")  # the same connection: the body did not become a request
            response = connection.getresponse()
            assert (response.status, response.read()) == (200, PAGE)
    finally:
        connection.close()


def test_http_1_0_clients_get_one_answer_per_connection(server: MetricsHttpServer) -> None:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw:
        raw.sendall(b"GET /metrics HTTP/1.0\r\n\r\n")
        answer = b""
        while chunk := raw.recv(65536):  # the server closes once it has answered
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and answer.endswith(PAGE)


def test_a_request_thread_serves_the_next_connection_and_ends_with_the_server() -> None:
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE)
    served.start()
    threads_before = threading.active_count()
    try:
        for _ in range(20):  # one connection after another: one thread, handed each in turn
            assert _request(served, "GET", "/metrics")[2] == PAGE
        assert threading.active_count() <= threads_before + 2
    finally:
        served.stop()
    deadline = time.monotonic() + 10
    while threading.active_count() > threads_before - 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the accept loop and the idle request thread end with stop()
    assert threading.active_count() <= threads_before - 1


def test_an_address_in_use_is_an_os_error() -> None:
    """The agent and the collector turn it into their one-line "cannot listen" exit."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(OSError, match="in use"):
            MetricsHttpServer(f"127.0.0.1:{busy.getsockname()[1]}", lambda: PAGE).start()


def test_a_failing_guard_is_a_500() -> None:
    def broken(_token: str | None, _peer: dict[str, Any] | None, _path: str) -> tuple[int, str] | None:
        raise KeyError("no such scraper")

    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, guard=broken)
    served.start()
    try:
        assert _request(served, "GET", "/metrics")[::2] == (500, b"request failed; see the log\n")
    finally:
        served.stop()


def _raw(server: MetricsHttpServer, data: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(data)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
        return b"".join(chunks)


def test_a_broken_request_gets_400_and_a_big_body_413_then_the_connection_closes(server: MetricsHttpServer) -> None:
    assert _raw(server, b"NOT HTTP AT ALL\r\n\r\n").startswith(b"HTTP/1.1 400 ")
    big = b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n" + b"x" * 1_000_000
    assert _raw(server, big).startswith(b"HTTP/1.1 413 ")
    assert _raw(server, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").startswith(b"HTTP/1.1 200 ")


def test_stop_ends_the_connections_it_kept() -> None:
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE)
    served.start()
    conn = http.client.HTTPConnection("127.0.0.1", served.port, timeout=10)
    conn.request("GET", "/metrics")
    assert conn.getresponse().read() == PAGE
    served.stop()
    conn.request("GET", "/metrics")  # written into the socket buffer; the server has gone
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.getresponse()
    conn.close()


def test_connections_beyond_the_cap_get_503_and_the_others_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    """Where no connection is idle (each has a request under way), a new one whose request is
    not whole either is refused; it does not close another for a place."""
    monkeypatch.setattr(http_slots, "MAX_CONNECTIONS", 2)
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE)
    served.start()
    kept = [socket.create_connection(("127.0.0.1", served.port), timeout=10) for _ in range(2)]
    try:
        for conn in kept:  # two requests begun fill the cap
            conn.sendall(b"GET /metrics HTTP/1.1\r\nHo")
        assert _raw(served, b"GET /metrics HTTP/1.1\r\nHost: x\r\n").startswith(b"HTTP/1.1 503 ")
        kept[0].close()
        deadline = time.monotonic() + 5
        while (reply := _raw(served, b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")).startswith(
            b"HTTP/1.1 503 "
        ) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert reply.startswith(b"HTTP/1.1 200 ")  # a closed connection frees its place
    finally:
        for conn in kept:
            conn.close()
        served.stop()


def test_over_tls_connections_that_never_handshake_take_no_more_than_the_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that opens connections and sends nothing holds a thread each until the request
    timeout: over TLS too, at most MAX_CONNECTIONS of them, and a real scraper gets in once they go."""
    monkeypatch.setattr(http_slots, "MAX_CONNECTIONS", 2)
    ca = Authority(tmp_path, "test")
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, ssl_context=ca.loopback_server_context())
    served.start()
    client = ssl.create_default_context(cafile=str(ca.cert_file))
    silent = [socket.create_connection(("127.0.0.1", served.port), timeout=10) for _ in range(2)]
    try:
        time.sleep(0.2)  # both are counted, each in its handshake
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as third:
            assert third.recv(100) == b""  # refused: closed before any handshake
        for sock in silent:
            sock.close()
        deadline, status = time.monotonic() + 10, 0
        while status != 200 and time.monotonic() < deadline:
            connection = http.client.HTTPSConnection("127.0.0.1", served.port, context=client, timeout=10)
            try:
                connection.request("GET", "/metrics")
                status = connection.getresponse().status
            except (OSError, http.client.HTTPException):
                time.sleep(0.05)
            finally:
                connection.close()
        assert status == 200
    finally:
        for sock in silent:
            sock.close()
        served.stop()


class _Kept(io.BytesIO):
    def close(self) -> None:  # http.client closes it after each response; the next one follows
        pass


class _Recorded:
    """What a server wrote on one connection, read back as responses in turn."""

    def __init__(self, data: bytes) -> None:
        self.file = _Kept(data)

    def makefile(self, _mode: str) -> io.BytesIO:
        return self.file

    def responses(self, *methods: str) -> list[tuple[int, dict[str, str], bytes]]:
        answers = []
        for method in methods:
            response = http.client.HTTPResponse(self, method=method)  # type: ignore[arg-type]
            response.begin()
            answers.append((response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()))
        assert self.file.read() == b"", "more answers than requests"
        return answers


def test_pipelined_requests_in_one_packet_are_answered_in_order(server: MetricsHttpServer) -> None:
    """Several requests in one write (pipelining): each answered, in the order sent; a broken one
    after them is answered with 400 after theirs, and ends the connection."""
    data = _raw(
        server,
        b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
        b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
        b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc"
        b"GET /nothing HTTP/1.1\r\nHost: x\r\n\r\n"
        b"NOT HTTP\r\n\r\n",
    )
    answers = _Recorded(data).responses("GET", "GET", "HEAD", "POST", "GET", "GET")
    assert [(status, body) for status, _, body in answers] == [
        (200, PAGE),
        (200, b"ok\n"),
        (200, b""),
        (405, b"use GET\n"),
        (404, b"not found\n"),
        (400, b"bad request\n"),
    ]
    assert answers[2][1]["content-length"] == str(len(PAGE))
    assert [headers.get("connection") for _, headers, _ in answers] == [None] * 5 + ["close"]


@pytest.mark.parametrize(
    ("request_head", "method", "expected"),
    [
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", "GET", (200, b"ok\n")),
        (b"GET /healthz HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", "GET", (200, b"ok\n")),  # 1.0: closed anyway
        # Nothing here switches protocols: answered as a plain request, then closed.
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: h2c\r\n\r\n", "GET", (200, b"ok\n")),
        (b"CONNECT x:443 HTTP/1.1\r\nHost: x\r\n\r\n", "CONNECT", (405, b"use GET\n")),
    ],
)
def test_the_connection_closes_after_one_reply_where_the_client_cannot_keep_it(
    server: MetricsHttpServer, request_head: bytes, method: str, expected: tuple[int, bytes]
) -> None:
    """The request after it, in the same packet, is not answered: the server says `Connection:
    close` and closes (a kept connection would leave `_raw` waiting into its timeout)."""
    data = _raw(server, request_head + b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    ((status, headers, body),) = _Recorded(data).responses(method)
    assert (status, body) == expected and headers["connection"] == "close"


@pytest.mark.parametrize(
    ("request_head", "status"),
    [
        (b"GET /metrics HTTP/1.1\r\n\r\n", 400),  # HTTP/1.1 without Host (RFC 9112 3.2)
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n", 400),
        (b"GET /metrics HTTP/2.0\r\nHost: x\r\n\r\n", 505),
        (b"GET /metrics\r\n\r\n", 505),  # HTTP/0.9
        # A head over the limit, whole in one packet and unfinished across several.
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * (BIG_HEAD + 1) + b"\r\n\r\n", 431),
        (b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Many: a\r\n" * 4000, 431),
    ],
)
def test_a_request_outside_the_protocol_or_the_limits_gets_its_error_and_a_closed_connection(
    server: MetricsHttpServer, request_head: bytes, status: int
) -> None:
    ((answered, headers, _),) = _Recorded(_raw(server, request_head)).responses("GET")
    assert (answered, headers["connection"]) == (status, "close")


def test_a_reply_on_a_kept_alive_connection_has_the_request_timeout_not_the_idle_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A client that asks again and then stops reading holds its thread (and one of the
    MAX_CONNECTIONS) for the request timeout, as on a new connection, not for the idle wait."""
    monkeypatch.setattr(http_connection, "IDLE_TIMEOUT_SECONDS", 30.0)
    page = b"m 1\n" * (16 << 20)  # 64 MiB: more than the socket buffers hold
    served = MetricsHttpServer("127.0.0.1:0", lambda: page, request_timeout_seconds=0.3)
    served.start()
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(b"HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")  # kept alive; the reply is never read
            started = time.monotonic()
            assert wait_for(lambda: not served._server.slots, 20, interval=0.05)  # type: ignore[union-attr]
            assert time.monotonic() - started < 10
    finally:
        served.stop()


def test_kept_alive_connections_wait_the_idle_timeout_and_a_request_begun_the_request_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """After a reply the connection waits IDLE_TIMEOUT_SECONDS for the next request, not the
    request timeout; a request that has begun must then finish within the request timeout."""
    served = MetricsHttpServer("127.0.0.1:0", lambda: b"m 1\n", request_timeout_seconds=0.3)
    served.start()
    scrape = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
    try:
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(scrape)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            time.sleep(1.0)  # past the request timeout, well within the idle one
            sock.sendall(scrape)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            sock.sendall(b"GET /metrics HTTP/1.1\r\nHo")  # begun, never finished
            started = time.monotonic()
            assert sock.recv(65536) == b""  # dropped, with no reply
            assert time.monotonic() - started < 8
        monkeypatch.setattr(http_connection, "IDLE_TIMEOUT_SECONDS", 0.3)
        with socket.create_connection(("127.0.0.1", served.port), timeout=10) as sock:
            sock.sendall(scrape)
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
            started = time.monotonic()
            assert sock.recv(65536) == b""  # idle past IDLE_TIMEOUT_SECONDS: closed
            assert time.monotonic() - started < 8
    finally:
        served.stop()
