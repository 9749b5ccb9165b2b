"""The HTTP server's extra pages (the collector's fleet page) sit behind the /metrics guard."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from nodeagent.core.exposition.http_server import MetricsHttpServer


def _pages(path: str, query: str) -> tuple[str, str, bytes] | None:
    if path == "/" or path.startswith("/api/"):
        return "200 OK", "text/plain", f"page {path} {query}".encode()
    return None


def _guard(token: str | None, _peer: dict[str, Any] | None, _path: str) -> tuple[int, str] | None:
    return None if token == "scrape" else (401, "needs the credential of a scraper or operator")


@pytest.fixture
def base() -> Iterator[str]:
    server = MetricsHttpServer("127.0.0.1:0", lambda: b"m 1\n", health=lambda: (True, "ok"), guard=_guard, pages=_pages)
    server.start()
    try:
        yield f"http://{server.address}"
    finally:
        server.stop()


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return int(reply.status), reply.read().decode()
    except urllib.error.HTTPError as err:
        return int(err.code), err.read().decode()


def test_pages_need_the_scrape_credential_and_health_stays_open(base: str) -> None:
    assert _get(f"{base}/")[0] == 401
    assert _get(f"{base}/api/fleet?state=starved")[0] == 401
    assert _get(f"{base}/api/fleet?state=starved", "scrape") == (200, "page /api/fleet state=starved")
    assert _get(f"{base}/", "scrape") == (200, "page / ")
    assert _get(f"{base}/healthz") == (200, "ok\n")
    assert _get(f"{base}/nothing", "scrape")[0] == 404
