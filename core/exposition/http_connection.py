"""One client connection of the ``/metrics`` server: TLS set up in its own thread, its requests
read and parsed by httptools, each answered in turn by the server's ``respond``.

httptools is the llhttp C parser, as uvicorn uses it: a request costs under 10 microseconds of
parsing where h11's pure-Python state machine took over 100, and the agent's scrape has a CPU
budget. A scraper keeps its connection between scrapes (keep-alive; HTTP/1.0 clients and
``Connection: close`` get theirs closed after the reply), pipelined requests are answered in
order, and the connection is closed when a request stalls for the server's request timeout or
none comes for ``IDLE_TIMEOUT_SECONDS``. A request that breaks the protocol, or whose head or
body is too big, is answered with its error status and the connection closed. Each step tells the
connection's slot (``http_slots.py``) what it waits on, whose deadline bounds the whole request
and the whole reply, and whether it is idle (the first to be closed when the slots run out).
"""

from __future__ import annotations

import contextlib
import math
import socket
import socketserver
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import httptools
import structlog

from nodeagent.core.exposition.http_reply import Reply, send_reply

if TYPE_CHECKING:
    from nodeagent.core.exposition.http_server import ConnectionServer, MetricsHttpServer
    from nodeagent.core.exposition.http_slots import Slot

log = structlog.get_logger("nodeagent.http")

# A kept-alive connection waits this long for its next request: longer than any scrape interval
# (Prometheus keeps idle connections for 5 minutes), so each scrape reuses its connection.
IDLE_TIMEOUT_SECONDS = 300.0
# A request's line and headers together; scrapers send a few hundred bytes.
MAX_REQUEST_HEAD_BYTES = 16 * 1024
_RECEIVE_BYTES = 65536


# Made for every request: not frozen, whose __init__ (object.__setattr__ per field) costs four
# times as much.
@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    peer_cert: dict[str, Any] | None  # the client certificate that chained to the client CA


class Connection(socketserver.BaseRequestHandler):
    """One client connection: requests in turn until the client closes it, asks to, times out or
    breaks the protocol."""

    server: ConnectionServer

    def handle(self) -> None:
        sock: socket.socket = self.request
        slots = self.server.slots
        # Admitted by the accept loop, before this thread and any TLS handshake began.
        slot = slots.slot(sock)
        if slot is None:  # closed at its deadline before this thread began
            return
        owner = self.server.owner
        try:  # the slot is given back however this ends (a client that has reset fails setsockopt)
            sock.settimeout(owner.request_timeout_seconds)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer_cert = None
            if owner.ssl_context is not None:
                # TLS is set up here, in the connection's own thread: a client that stalls in the
                # handshake holds up only itself, not the accept loop, and no longer than the
                # deadline of its first request.
                sock = slots.wrap_tls(slot, owner.ssl_context)
                sock.do_handshake()
                peer_cert = sock.getpeercert() or None
            self._serve(sock, slot, owner, peer_cert)
        finally:
            slots.release(slot)
            if sock is not self.request:
                sock.close()

    def _serve(
        self, sock: socket.socket, slot: Slot, owner: MetricsHttpServer, peer_cert: dict[str, Any] | None
    ) -> None:
        reader = RequestReader(sock, slot, peer_cert, owner.request_timeout_seconds)
        while True:
            try:
                ready = reader.next_request()
            except Refused as refused:  # answered, then the connection is closed
                slot.replying()
                with contextlib.suppress(OSError):
                    send_reply(sock, Reply(refused.status, refused.body), head_only=False, keep_alive=False)
                return
            except OSError:
                return  # closed, reset or idle past the timeout
            if ready is None:
                return
            request, keep_alive = ready
            slot.working()
            try:
                reply = owner.respond(request)
            except Exception as err:  # one bad request must not end the server's thread silently
                log.error("http request failed", path=request.path, error=f"{type(err).__name__}: {err}")
                reply = Reply(500, b"request failed; see the log\n")
            slot.replying()
            try:
                send_reply(sock, reply, head_only=request.method == "HEAD", keep_alive=keep_alive)
            except OSError:
                return
            slot.working()
            if not keep_alive:
                return  # HTTP/1.0, or the client asked to close


class Refused(Exception):
    """A request answered with an error status, after which the connection is closed."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


_BAD_REQUEST = (400, b"bad request\n")


class RequestReader:
    """One connection's requests, read from its socket and parsed by httptools, whose callbacks
    these methods are. A packet may hold several requests (pipelining) or part of one: the
    complete ones wait in order to be answered. A request that breaks the protocol, or is too big,
    is answered (after those before it) with its error status."""

    __slots__ = (
        "_body_bytes",
        "_ended",
        "_head_bytes",
        "_head_fed_bytes",
        "_headers",
        "_in_head",
        "_keep_alive",
        "_method",
        "_parser",
        "_peer_cert",
        "_ready",
        "_refusal",
        "_request_timeout_seconds",
        "_served",
        "_slot",
        "_sock",
        "_started",
        "_timeout_seconds",
        "_url",
    )

    def __init__(
        self, sock: socket.socket, slot: Slot, peer_cert: dict[str, Any] | None, request_timeout_seconds: float
    ) -> None:
        self._sock = sock
        self._slot = slot
        self._peer_cert = peer_cert
        self._request_timeout_seconds = request_timeout_seconds
        self._timeout_seconds = sock.gettimeout()
        self._parser = httptools.HttpRequestParser(self)
        self._ready: deque[tuple[Request, bool]] = deque()
        self._refusal: tuple[int, bytes] | None = None
        self._ended = False  # the client closed, or upgraded: nothing more is read
        self._served = False
        self._started = False  # some of the next request has come
        self._in_head = True
        self._head_fed_bytes = 0
        self._head_bytes = 0
        self._body_bytes = 0
        self._url = b""
        self._headers: dict[str, str] = {}
        self._method = ""
        self._keep_alive = False

    def next_request(self) -> tuple[Request, bool] | None:
        """The next request and whether the connection stays open after its reply; None when
        the client has closed. ``Refused`` for a request to answer with an error status,
        ``OSError`` (``TimeoutError`` too) when the socket fails or times out."""
        ready = self._ready
        while not ready:
            if self._refusal is not None:
                raise Refused(*self._refusal)
            if self._ended:
                return None
            self._receive()
        self._served = True
        return ready.popleft()

    def _receive(self) -> None:
        # A new connection's first request has the request timeout; a kept-alive one waits for
        # its next request for the idle timeout, then the rest of the request and its reply have
        # the request timeout (a client that stops reading holds its thread no longer than one
        # that stops writing). Set only when it changes (each setting is a system call). That
        # times each receive alone; the slot's deadline bounds the whole request, set at the
        # first receive that waits on more of it (the first request's runs from the accept): a
        # head that comes whole, as every scraper's does, needs none.
        idle = self._served and not self._started
        if idle:
            self._slot.waiting()
        elif self._slot.deadline == math.inf:
            self._slot.reading()
        timeout_seconds = IDLE_TIMEOUT_SECONDS if idle else self._request_timeout_seconds
        if timeout_seconds != self._timeout_seconds:
            self._sock.settimeout(timeout_seconds)
            self._timeout_seconds = timeout_seconds
        data = self._sock.recv(_RECEIVE_BYTES)
        if not data:
            self._ended = True
            return
        if self._timeout_seconds != self._request_timeout_seconds:
            self._sock.settimeout(self._request_timeout_seconds)
            self._timeout_seconds = self._request_timeout_seconds
        # httptools keeps a head's unfinished header itself, with no limit: what is fed while a
        # head is unfinished is counted. Bytes that came in the packet that finished the request
        # before are not (where they start is not known), so at most one receive more gets in.
        if self._in_head:
            self._head_fed_bytes += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            # Nothing here switches protocols: the request is answered as a plain one, and what
            # follows it is no longer HTTP, so the connection is closed after the reply.
            if self._ready and self._refusal is None:  # the last one ready is the upgrade's
                request, _ = self._ready.pop()
                self._ready.append((request, False))
            self._ended = True
        except httptools.HttpParserError:
            self._refuse(*_BAD_REQUEST)
        if self._in_head and self._head_fed_bytes > MAX_REQUEST_HEAD_BYTES:
            self._refuse(431, b"request head too large\n")

    def _refuse(self, status: int, body: bytes) -> None:
        if self._refusal is None:  # the first one is answered; nothing after it is read
            self._refusal = (status, body)

    # ---- httptools' callbacks ----

    def on_message_begin(self) -> None:
        self._started = True
        self._url = b""
        self._headers = {}
        self._head_bytes = 0
        self._body_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._url += url  # a URL split across packets comes in pieces
        self._head_bytes += len(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        # Lower-case names; a repeated header keeps its last value; llhttp leaves trailing blanks.
        self._headers[name.decode("latin-1").lower()] = value.decode("latin-1").rstrip(" \t")
        self._head_bytes += len(name) + len(value) + 4

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._head_fed_bytes = 0
        parser = self._parser
        version = parser.get_http_version()
        self._method = parser.get_method().decode("ascii", "replace")
        # HTTP/1.0 closes after each reply even where it asks for keep-alive, as h11 did.
        self._keep_alive = version == "1.1" and parser.should_keep_alive()
        if self._head_bytes > MAX_REQUEST_HEAD_BYTES:  # a big head that came in one packet
            self._refuse(431, b"request head too large\n")
        elif version not in {"1.1", "1.0"}:
            self._refuse(505, b"HTTP/1.1 or 1.0 only\n")
        elif version == "1.1" and "host" not in self._headers:  # RFC 9112 3.2: a 400
            self._refuse(*_BAD_REQUEST)

    def on_body(self, body: bytes) -> None:
        self._body_bytes += len(body)
        if self._body_bytes > MAX_REQUEST_HEAD_BYTES:  # nothing here reads a body: a big one is refused
            self._refuse(413, b"request body too large\n")

    def on_message_complete(self) -> None:
        self._in_head = True
        self._started = False
        if self._refusal is not None:  # this request or one before it was refused: not answered
            return
        path, _, query = self._url.decode("ascii", "replace").partition("?")
        self._ready.append((Request(self._method, path, query, self._headers, self._peer_cert), self._keep_alive))
