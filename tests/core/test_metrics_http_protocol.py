"""HTTP/1.1 as scrapers speak it: kept-alive connections, HEAD, refused methods and bodies, bad
requests, gzip, and a stop that ends the connections it kept."""

from __future__ import annotations

import gzip
import http.client
import socket
import time
from collections.abc import Iterator

import pytest

from nodeagent.core.metrics_http import MetricsHttpServer

PAGE = b"m 1\n" * 1000


@pytest.fixture
def server() -> Iterator[MetricsHttpServer]:
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, health=lambda: (False, "no tick for 40 s"))
    served.start()
    try:
        yield served
    finally:
        served.stop()


def _connection(server: MetricsHttpServer) -> http.client.HTTPConnection:
    return http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)


def test_a_scraper_keeps_one_connection_between_scrapes(server: MetricsHttpServer) -> None:
    conn = _connection(server)
    ports = set()
    for _ in range(3):
        conn.request("GET", "/metrics", headers={"Accept-Encoding": "gzip"})
        reply = conn.getresponse()
        assert reply.status == 200
        assert reply.getheader("Content-Encoding") == "gzip"
        assert reply.getheader("Content-Type") == "text/plain; version=0.0.4; charset=utf-8"
        assert gzip.decompress(reply.read()) == PAGE
        assert conn.sock is not None
        ports.add(conn.sock.getsockname()[1])
    assert len(ports) == 1  # the same TCP connection each time
    conn.close()


def test_head_has_the_length_without_the_body_and_other_methods_are_refused(server: MetricsHttpServer) -> None:
    conn = _connection(server)
    conn.request("HEAD", "/metrics")
    reply = conn.getresponse()
    assert (reply.status, reply.getheader("Content-Length"), reply.read()) == (200, str(len(PAGE)), b"")
    conn.request("POST", "/metrics", body=b"x=1")
    reply = conn.getresponse()
    assert (reply.status, reply.getheader("Allow"), reply.read()) == (405, "GET, HEAD", b"use GET\n")
    conn.request("GET", "/healthz")
    reply = conn.getresponse()
    assert (reply.status, reply.read()) == (503, b"no tick for 40 s\n")
    conn.close()


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
    conn = _connection(served)
    conn.request("GET", "/metrics")
    assert conn.getresponse().read() == PAGE
    served.stop()
    conn.request("GET", "/metrics")  # written into the socket buffer; the server has gone
    with pytest.raises((http.client.HTTPException, OSError)):
        conn.getresponse()
    conn.close()


def test_connections_beyond_the_cap_get_503_and_the_others_are_served(monkeypatch: pytest.MonkeyPatch) -> None:
    from nodeagent.core import metrics_http

    monkeypatch.setattr(metrics_http, "MAX_CONNECTIONS", 2)
    served = MetricsHttpServer("127.0.0.1:0", lambda: PAGE)
    served.start()
    kept = [_connection(served) for _ in range(2)]
    try:
        for conn in kept:  # two kept-alive scrapers fill the cap
            conn.request("GET", "/metrics")
            assert conn.getresponse().read() == PAGE
        assert _raw(served, b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").startswith(b"HTTP/1.1 503 ")
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
