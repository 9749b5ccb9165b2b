"""Every reply of the /metrics server (the agent's and the collector's) forbids content sniffing
and framing, and lets nothing run unless the page brings its own policy (the collector's pages)."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator

import pytest

from nodeagent.core.exposition.http_server import MetricsHttpServer

PAGE_POLICY = "default-src 'none'; script-src 'sha256-abc'; frame-ancestors 'none'"


def _pages(path: str, _query: str) -> tuple[str, str, bytes] | None:
    if path == "/page":
        return "200 OK", "text/html; charset=utf-8", b"<!doctype html><p>page</p>"
    if path == "/api/data":
        return "200 OK", "application/json", b"{}"
    return None


@pytest.fixture
def served() -> Iterator[MetricsHttpServer]:
    server = MetricsHttpServer(
        "127.0.0.1:0", lambda: b"m 1\n", health=lambda: (True, "ok"), pages=_pages, page_policy=PAGE_POLICY
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _headers(server: MetricsHttpServer, path: str, method: str = "GET") -> dict[str, str]:
    request = urllib.request.Request(f"http://{server.address}{path}", method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return dict(reply.headers.items())
    except urllib.error.HTTPError as err:
        return dict(err.headers.items())


@pytest.mark.parametrize(
    ("path", "method"),
    [("/metrics", "GET"), ("/metrics", "HEAD"), ("/healthz", "GET"), ("/", "GET"), ("/nothing", "GET"),
     ("/api/data", "GET"), ("/metrics", "POST")],
)  # fmt: skip
def test_every_reply_forbids_sniffing_framing_and_scripts(served: MetricsHttpServer, path: str, method: str) -> None:
    headers = _headers(served, path, method)
    assert headers["X-Content-Type-Options"] == "nosniff"
    policy = headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "frame-ancestors 'none'" in policy


def test_an_html_page_gets_its_own_policy(served: MetricsHttpServer) -> None:
    headers = _headers(served, "/page")
    assert headers["X-Content-Type-Options"] == "nosniff"
    assert headers["Content-Security-Policy"] == PAGE_POLICY


def test_an_html_page_without_a_policy_gets_the_default(served: MetricsHttpServer) -> None:
    served.stop()
    server = MetricsHttpServer("127.0.0.1:0", lambda: b"", pages=_pages)
    server.start()
    try:
        assert _headers(server, "/page")["Content-Security-Policy"].startswith("default-src 'none'")
    finally:
        server.stop()
