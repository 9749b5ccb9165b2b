"""Slow and greedy clients of the /metrics server: tricklers, idle kept-alive connections, one
address opening many, clients that never read their reply. None of them may keep a fresh scrape
out for long. Loopback only: a client socket bound to 127.0.0.2 (any of 127.0.0.0/8) is a second
client address. The deadlines are patched short; what is judged is who gets served and who is
closed, with generous bounds, never this machine's speed."""

from __future__ import annotations

import asyncio
import http.client
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.core.exposition import http_slots
from nodeagent.core.exposition.http_server import MetricsHttpServer
from tests.fakes.certs import Authority
from tests.fakes.slow_http_clients import trickle_and_scrape

PAGE = b"m 1\n" * 100
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
NOISY = "127.0.0.2"  # a second client address on loopback


@pytest.fixture
def served() -> Iterator[MetricsHttpServer]:
    server = MetricsHttpServer("127.0.0.1:0", lambda: PAGE, health=lambda: (True, "ok"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _connect(server: MetricsHttpServer, source: str, *, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer is not None:  # set before connect: the window the client offers
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(10)
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", server.port))
    return sock


def _kept_alive(server: MetricsHttpServer, source: str) -> http.client.HTTPConnection:
    """A kept-alive connection from ``source``, after one scrape."""
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10, source_address=(source, 0))
    conn.request("GET", "/metrics")
    response = conn.getresponse()
    assert (response.status, response.read()) == (200, PAGE)
    return conn


def _status(server: MetricsHttpServer, source: str = "127.0.0.1", path: str = "/metrics") -> int:
    """The status a new connection from ``source`` gets; 0 where it gets none."""
    try:
        with _connect(server, source) as sock:
            sock.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            line = sock.recv(64)
    except OSError:
        return 0
    return int(line.split(b" ", 2)[1]) if line.startswith(b"HTTP/1.1 ") else 0


def _scraped_within(server: MetricsHttpServer, seconds: float, path: str = "/metrics") -> bool:
    """A fresh scrape from 127.0.0.1 gets 200 within ``seconds``, asking again after each 503."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if _status(server, path=path) == 200:
            return True
        time.sleep(0.05)
    return False


def _closed_by_server(sock: socket.socket) -> bool:
    """The server has closed ``sock`` (without waiting: what has come is read and dropped)."""
    timeout = sock.gettimeout()
    sock.settimeout(0)  # a socket with a timeout would wait for something to read first
    try:
        while sock.recv(65536):
            pass
    except BlockingIOError:
        return False
    except ConnectionError:
        return True
    finally:
        sock.settimeout(timeout)
    return True


def test_tricklers_are_closed_at_the_head_deadline_and_a_fresh_scrape_gets_in(
    served: MetricsHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slot for every trickler, each sending a byte of its head every 0.5 s (each receive well
    within the 30 s request timeout): each is closed at its head's deadline, and a scrape from
    another address gets 200 in the meantime."""
    monkeypatch.setattr(http_slots, "HEAD_TIMEOUT_SECONDS", 1.0)
    monkeypatch.setattr(http_slots, "MAX_CONNECTIONS_PER_ADDRESS", 1000)  # only the deadline frees them here
    tricklers = [_connect(served, NOISY) for _ in range(http_slots.MAX_CONNECTIONS)]
    head = SCRAPE.replace(b"\r\n\r\n", b"\r\n" + b"X-Slow: 1\r\n" * 100)  # longer than this test trickles
    open_ = set(range(len(tricklers)))
    scraped = False
    try:
        for step in range(30):  # at most 15 s: half the request timeout, which would close them too
            for index in list(open_):
                if _closed_by_server(tricklers[index]):
                    open_.discard(index)
                    continue
                try:
                    tricklers[index].send(head[step : step + 1])
                except OSError:
                    open_.discard(index)
            scraped = scraped or _status(served) == 200
            if scraped and not open_:
                break
            time.sleep(0.5)
        assert scraped, "no fresh scrape got in past the tricklers"
        assert not open_, f"{len(open_)} tricklers still open"
    finally:
        for sock in tricklers:
            sock.close()


def test_a_kept_alive_connection_that_trickles_its_next_request_is_closed_at_its_deadline(
    served: MetricsHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The deadline runs from the next request's first byte, not from the connection's accept."""
    monkeypatch.setattr(http_slots, "HEAD_TIMEOUT_SECONDS", 1.0)
    conn = _kept_alive(served, NOISY)
    time.sleep(1.5)  # idle past the head deadline: idle is not a request under way
    assert conn.sock is not None and not _closed_by_server(conn.sock)
    closed = False
    for byte in SCRAPE[:20]:  # 10 s at most
        if _closed_by_server(conn.sock):
            closed = True
            break
        try:
            conn.sock.send(bytes([byte]))
        except OSError:
            closed = True
            break
        time.sleep(0.5)
    conn.close()
    assert closed


def test_when_the_slots_run_out_the_longest_idle_connection_makes_room(served: MetricsHttpServer) -> None:
    """Every slot held by a kept-alive connection between scrapes: a new client is served, and
    the connection idle longest is the one closed for it."""
    per_address = http_slots.MAX_CONNECTIONS_PER_ADDRESS
    sources = [f"127.0.0.{2 + index // per_address}" for index in range(http_slots.MAX_CONNECTIONS)]
    kept = [_kept_alive(served, sources[0])]
    time.sleep(0.3)  # the first waits longest
    kept += [_kept_alive(served, source) for source in sources[1:]]
    try:
        assert _status(served) == 200  # at once: not a 503
        oldest = kept[0].sock
        assert oldest is not None and oldest.recv(100) == b""  # closed by the server, no reply
        for conn in (kept[1], kept[-1]):  # the others are still kept, and served
            first = conn.sock
            conn.request("GET", "/metrics")
            assert conn.getresponse().read() == PAGE and conn.sock is first
    finally:
        for conn in kept:
            conn.close()


def test_one_address_gets_503_beyond_its_cap_while_others_are_served(served: MetricsHttpServer) -> None:
    """An address whose connections all have a request under way gets 503 for one more whose
    request is not whole either, and for a whole one has its own oldest unfinished head closed;
    an address whose connections are idle has its own longest-idle one closed for the new one."""
    busy = [_connect(served, NOISY) for _ in range(http_slots.MAX_CONNECTIONS_PER_ADDRESS)]
    try:
        for sock in busy:
            sock.sendall(SCRAPE[:20])  # begun, not finished
            time.sleep(0.01)  # in order of age
        with _connect(served, NOISY) as unfinished:
            unfinished.sendall(SCRAPE[:20])
            assert unfinished.recv(64).startswith(b"HTTP/1.1 503 ")
        assert _status(served) == 200  # the slots left are the other addresses'
        assert _status(served, NOISY) == 200  # whole: its own oldest unfinished head makes room
        assert busy[0].recv(100) == b""  # closed by the server, no reply
        assert not any(_closed_by_server(sock) for sock in busy[1:])
    finally:
        for sock in busy:
            sock.close()
    idle_source = "127.0.0.3"
    kept = [_kept_alive(served, idle_source)]
    time.sleep(0.3)
    kept += [_kept_alive(served, idle_source) for _ in range(http_slots.MAX_CONNECTIONS_PER_ADDRESS - 1)]
    try:
        assert _status(served, idle_source) == 200
        oldest = kept[0].sock
        assert oldest is not None and oldest.recv(100) == b""
    finally:
        for conn in kept:
            conn.close()


def test_clients_that_never_read_a_big_reply_give_their_slots_back_at_the_reply_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every slot held by a client that asked for a page far bigger than the socket buffers and
    reads none of it (each send within the 30 s request timeout would wait on it): the slots come
    back at the reply's deadline, each reply cut short."""
    monkeypatch.setattr(http_slots, "REPLY_TIMEOUT_SECONDS", 0.5)
    monkeypatch.setattr(http_slots, "MAX_CONNECTIONS", 4)
    page = b"m 1\n" * (16 << 20)  # 64 MiB
    served = MetricsHttpServer("127.0.0.1:0", lambda: page, health=lambda: (True, "ok"))
    served.start()
    readers = [_connect(served, NOISY, receive_buffer=4096) for _ in range(http_slots.MAX_CONNECTIONS)]
    try:
        for sock in readers:
            sock.sendall(SCRAPE)
        assert _scraped_within(served, 10, path="/healthz")
        for sock in readers:  # each got part of its reply, then the close
            taken = 0
            try:
                while chunk := sock.recv(1 << 20):
                    taken += len(chunk)
            except ConnectionError:
                pass
            assert 0 < taken < len(page)
    finally:
        for sock in readers:
            sock.close()
        served.stop()


@pytest.fixture
def served_tls(tmp_path: Path) -> Iterator[MetricsHttpServer]:
    server = MetricsHttpServer(
        "127.0.0.1:0", lambda: PAGE, ssl_context=Authority(tmp_path, "test").loopback_server_context()
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def test_a_tls_handshake_counts_against_the_first_requests_deadline(
    served_tls: MetricsHttpServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that opens a TLS connection and never finishes its handshake is closed at the
    first request's deadline, not after the request timeout of each receive."""
    monkeypatch.setattr(http_slots, "HEAD_TIMEOUT_SECONDS", 0.5)
    with _connect(served_tls, NOISY) as silent:
        started = time.monotonic()
        assert silent.recv(100) == b""  # closed, with nothing sent
        assert time.monotonic() - started < 8  # the request timeout is 30 s


def test_fresh_scrapes_get_in_past_tricklers_from_many_addresses_that_reconnect_at_once(
    served: MetricsHttpServer,
) -> None:
    """Every slot held by tricklers from 8 addresses (under the per-address cap), each connecting
    again the moment it is closed or refused: every fresh scrape is answered, each taking the slot
    of the oldest unfinished head (before: each was refused with 503 until a head's deadline freed
    a slot, which a trickler took back at once)."""
    outcome = asyncio.run(
        trickle_and_scrape(
            "127.0.0.1", served.port, tricklers=http_slots.MAX_CONNECTIONS, addresses=8, scrapes=5,
            scrape_timeout_seconds=10.0,
        )
    )  # fmt: skip
    assert outcome.answered == outcome.scrapes == 5, outcome
    assert outcome.trickler_connections > http_slots.MAX_CONNECTIONS  # some were closed for the scrapes
