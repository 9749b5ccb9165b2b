"""A small HTTP server for ``/metrics`` and ``/healthz``, on its own threads.

The agent and the collector both serve their metrics this way. The server runs beside the work
it reports on (the sampling loop, the collector's event loop): a scrape renders what is in memory
at that moment and never makes the work wait on a slow or stuck scraper. Each connection gets a
thread; the text is gzipped when the client asks, as Prometheus does.

Requests are parsed by httptools (the llhttp C parser, as uvicorn uses it) over socketserver's
threads, and the reply's status line and headers are written here, as uvicorn does: a request
costs under 10 microseconds of parsing where h11's pure-Python state machine took over 100,
and the agent's scrape has a CPU budget. Not http.server: that one parses every request's
headers with the email package, imports http.client and with it ssl (4.5 MB resident in the
agent, which needs OpenSSL only for HTTPS, and then loads it), and closes the connection after
each reply. Here a scraper keeps its connection between scrapes (keep-alive; HTTP/1.0 clients
and ``Connection: close`` get theirs closed after the reply), pipelined requests are answered
in order, a connection is closed when a request stalls for ``REQUEST_TIMEOUT_SECONDS`` or none
comes for ``IDLE_TIMEOUT_SECONDS``, and at most ``MAX_CONNECTIONS`` are served at once.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import httptools
import structlog
from isal import igzip

from nodeagent.core.transport.channel import parse_target

if TYPE_CHECKING:
    import ssl

log = structlog.get_logger("nodeagent.http")

# Prometheus text exposition format 0.0.4: what every Prometheus and compatible scraper reads.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_SECONDS = 30.0
# A kept-alive connection waits this long for its next request: longer than any scrape interval
# (Prometheus keeps idle connections for 5 minutes), so each scrape reuses its connection.
IDLE_TIMEOUT_SECONDS = 300.0
# Connections served at once (a thread each); beyond it a client gets 503 and a closed socket.
MAX_CONNECTIONS = 64
# Fast compression: at 10,000 nodes the text is tens of megabytes, and the CPU is the ingest's.
# ISA-L's level 1 compresses as tightly as zlib's level 1 at under half its CPU (an 8-GPU page of
# 79 KB: 0.07 ms against 0.17 ms); the output is plain gzip (RFC 1952), as every scraper reads.
GZIP_LEVEL = 1


def gzip_bytes(body: bytes) -> bytes:
    """``body`` gzipped for a client that sent ``Accept-Encoding: gzip``."""
    return igzip.compress(body, compresslevel=GZIP_LEVEL)


# A request's line and headers together; scrapers send a few hundred bytes.
MAX_REQUEST_HEAD_BYTES = 16 * 1024
_RECEIVE_BYTES = 65536

Health = Callable[[], tuple[bool, str]]
# Who may read /metrics: (bearer token or None, the verified peer certificate or None) -> None to
# serve it, or (401 or 403, why). /healthz and the plain index stay open; `pages` (the collector's
# fleet page) are guarded like /metrics.
Guard = Callable[[str | None, dict[str, Any] | None], tuple[int, str] | None]
# More pages behind the same guard: (path, query string) -> (status line, content type, body), or
# None where the path is none of them (the collector's fleet view).
Pages = Callable[[str, str], tuple[str, str, bytes] | None]
_TEXT = "text/plain; charset=utf-8"
_TEXT_HEADERS = (("Content-Type", _TEXT),)
_METRICS_HEADERS = (("Content-Type", TEXT_CONTENT_TYPE),)
_METRICS_GZIP_HEADERS = (("Content-Type", TEXT_CONTENT_TYPE), ("Content-Encoding", "gzip"))
# Every status line written once, reason phrase and all; a code HTTPStatus lacks gets none.
_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in HTTPStatus}


# Request and Reply are made for every request: not frozen, whose __init__ (object.__setattr__
# per field) costs four times as much.
@dataclass(slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    peer_cert: dict[str, Any] | None  # the client certificate that chained to the client CA


@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = _TEXT_HEADERS


class MetricsHttpServer:
    """``GET /metrics`` -> ``metrics()``; ``GET /healthz`` -> 200 or 503 by ``health()``."""

    def __init__(
        self,
        listen: str,
        metrics: Callable[[], bytes],
        *,
        health: Health | None = None,
        ssl_context: ssl.SSLContext | None = None,
        name: str = "nodeagent",
        guard: Guard | None = None,
        metrics_gzip: Callable[[], bytes] | None = None,
        pages: Pages | None = None,
        request_timeout_seconds: float = REQUEST_TIMEOUT_SECONDS,
    ) -> None:
        self.host, self._port = parse_target(listen, any_port=True)
        self.request_timeout_seconds = request_timeout_seconds
        self.metrics = metrics
        # The page already gzipped, where its owner keeps one (the agent's changes once a tick).
        self.metrics_gzip = metrics_gzip
        self.health = health
        self.ssl_context = ssl_context
        self.name = name
        self.guard = guard
        self.pages = pages
        self.port = 0
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Bind and serve; ``OSError`` when the address cannot be bound. Returns the port."""
        server_class = _Server6 if ":" in self.host else _Server
        server = server_class((self.host, self._port), _Connection)
        server.owner = self
        self.port = int(server.server_address[1])
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.2}, name=f"{self.name}-http", daemon=True
        )
        self._thread.start()
        return self.port

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server.close_connections()
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    # ---- requests (one thread per connection) ----

    def respond(self, request: Request) -> Reply:
        if request.method not in ("GET", "HEAD"):
            return Reply(405, b"use GET\n", (("Content-Type", _TEXT), ("Allow", "GET, HEAD")))
        path = request.path
        if path == "/metrics":
            refused = self._refused(request)
            if refused is not None:
                code, detail = refused
                headers: tuple[tuple[str, str], ...] = _TEXT_HEADERS
                if code == 401:
                    headers += (("WWW-Authenticate", 'Bearer realm="nodeagent"'),)
                return Reply(code, f"{detail}\n".encode(), headers)
            return self._metrics(request)
        if path == "/healthz" and self.health is not None:
            try:
                ok, detail = self.health()
            except Exception as err:  # a failing check is an unhealthy process, not a 500
                ok, detail = False, f"health check failed: {type(err).__name__}: {err}"
            return Reply(200 if ok else 503, f"{detail}\n".encode())
        if self.pages is not None:
            refused = self._refused(request)
            if refused is not None:
                return Reply(refused[0], f"{refused[1]}\n".encode())
            try:
                found = self.pages(path, request.query)
            except Exception as err:
                log.error("page failed", path=path, error=f"{type(err).__name__}: {err}")
                return Reply(500, b"page failed; see the log\n")
            if found is not None:
                status, content_type, body = found
                return Reply(int(status.split(" ", 1)[0]), body, (("Content-Type", content_type),))
        if path == "/":
            links = "/metrics\n/healthz\n" if self.health is not None else "/metrics\n"
            return Reply(200, f"{self.name}\n{links}".encode())
        return Reply(404, b"not found\n")

    def _refused(self, request: Request) -> tuple[int, str] | None:
        if self.guard is None:
            return None
        token: str | None = None
        authorization = request.headers.get("authorization")
        if authorization is not None:
            scheme, _, given = authorization.partition(" ")
            token = given.strip() if scheme.lower() == "bearer" else ""
        return self.guard(token, request.peer_cert)

    def _metrics(self, request: Request) -> Reply:
        wants_gzip = "gzip" in request.headers.get("accept-encoding", "")
        try:
            if wants_gzip and self.metrics_gzip is not None:
                body = self.metrics_gzip()
            else:
                body = self.metrics()
                if wants_gzip:
                    body = gzip_bytes(body)
        except Exception as err:
            log.error("metrics failed", error=f"{type(err).__name__}: {err}")
            return Reply(500, b"metrics failed; see the log\n")
        if wants_gzip:
            return Reply(200, body, _METRICS_GZIP_HEADERS)
        return Reply(200, body, _METRICS_HEADERS)


class _Server(socketserver.ThreadingTCPServer):
    # Connection threads are fire and forget: a stuck scraper cannot hold up a shutdown.
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    owner: MetricsHttpServer

    def __init__(self, address: tuple[str, int], handler: type[socketserver.BaseRequestHandler]) -> None:
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, handler)

    def track(self, sock: socket.socket, is_open: bool) -> bool:
        """Counts the connection in (False: there are too many) or out."""
        with self._open_lock:
            if not is_open:
                self._open.discard(sock)
            elif len(self._open) >= MAX_CONNECTIONS:
                return False
            else:
                self._open.add(sock)
            return True

    def replace(self, old: socket.socket, new: socket.socket) -> None:
        """The connection's TLS socket in place of the plain one it wraps (and detaches)."""
        with self._open_lock:
            self._open.discard(old)
            self._open.add(new)

    def close_connections(self) -> None:
        """Ends the kept-alive connections too: a stopped server answers nobody."""
        with self._open_lock:
            open_now = list(self._open)
        for sock in open_now:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away or fails the TLS handshake is the client's business.
        log.debug("http request failed", client=str(client_address), error=str(sys.exc_info()[1]))


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Connection(socketserver.BaseRequestHandler):
    """One client connection: requests in turn until the client closes it, asks to, times out or
    breaks the protocol."""

    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        sock.settimeout(self.server.owner.request_timeout_seconds)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        owner = self.server.owner
        # Counted before any TLS handshake: clients that only open connections (or stall in the
        # handshake) take at most MAX_CONNECTIONS threads.
        if not self.server.track(sock, True):
            if owner.ssl_context is None:  # over TLS the refusal is the closed socket
                with contextlib.suppress(OSError):
                    _send(sock, Reply(503, b"too many connections\n"), head_only=False, keep_alive=False)
            return
        tracked = sock
        try:
            peer_cert = None
            if owner.ssl_context is not None:
                # TLS is set up here, in the connection's own thread: a client that stalls in the
                # handshake holds up only itself, not the accept loop.
                tls = owner.ssl_context.wrap_socket(sock, server_side=True)
                self.server.replace(sock, tls)
                tracked = sock = tls
                peer_cert = tls.getpeercert() or None
            self._serve(sock, owner, peer_cert)
        finally:
            self.server.track(tracked, False)
            if sock is not self.request:
                sock.close()

    def _serve(self, sock: socket.socket, owner: MetricsHttpServer, peer_cert: dict[str, Any] | None) -> None:
        reader = _RequestReader(sock, peer_cert, owner.request_timeout_seconds)
        while True:
            try:
                ready = reader.next_request()
            except _Refused as refused:  # answered, then the connection is closed
                with contextlib.suppress(OSError):
                    _send(sock, Reply(refused.status, refused.body), head_only=False, keep_alive=False)
                return
            except OSError:
                return  # closed, reset or idle past the timeout
            if ready is None:
                return
            request, keep_alive = ready
            try:
                reply = owner.respond(request)
            except Exception as err:  # one bad request must not end the server's thread silently
                log.error("http request failed", path=request.path, error=f"{type(err).__name__}: {err}")
                reply = Reply(500, b"request failed; see the log\n")
            try:
                _send(sock, reply, head_only=request.method == "HEAD", keep_alive=keep_alive)
            except OSError:
                return
            if not keep_alive:
                return  # HTTP/1.0, or the client asked to close


class _Refused(Exception):
    """A request answered with an error status, after which the connection is closed."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__(status)
        self.status = status
        self.body = body


_BAD_REQUEST = (400, b"bad request\n")


class _RequestReader:
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
        "_sock",
        "_started",
        "_timeout_seconds",
        "_url",
    )

    def __init__(self, sock: socket.socket, peer_cert: dict[str, Any] | None, request_timeout_seconds: float) -> None:
        self._sock = sock
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
        the client has closed. ``_Refused`` for a request to answer with an error status,
        ``OSError`` (``TimeoutError`` too) when the socket fails or times out."""
        ready = self._ready
        while not ready:
            if self._refusal is not None:
                raise _Refused(*self._refusal)
            if self._ended:
                return None
            self._receive()
        self._served = True
        return ready.popleft()

    def _receive(self) -> None:
        # A new connection's first request has the request timeout; a kept-alive one waits for
        # its next request for the idle timeout, then the rest of the request and its reply have
        # the request timeout (a client that stops reading holds its thread no longer than one
        # that stops writing). Set only when it changes (each setting is a system call).
        timeout_seconds = IDLE_TIMEOUT_SECONDS if self._served and not self._started else self._request_timeout_seconds
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


def _send(sock: socket.socket, reply: Reply, *, head_only: bool, keep_alive: bool) -> None:
    body = reply.body
    status_line = _STATUS_LINES.get(reply.status) or b"HTTP/1.1 %d \r\n" % reply.status
    lines = _HEADER_LINES.get(reply.headers) or _header_lines(reply.headers)
    end = b"\r\n" if keep_alive else b"Connection: close\r\n\r\n"
    head = b"%s%sContent-Length: %d\r\n%s" % (status_line, lines, len(body), end)
    if head_only:  # a HEAD reply has the headers (Content-Length too) without the body
        sock.sendall(head)
    elif len(body) < _RECEIVE_BYTES:
        sock.sendall(head + body)
    else:  # a big page (the collector's at fleet scale) is not copied to prepend the head
        sock.sendall(head)
        sock.sendall(body)


def _header_lines(headers: tuple[tuple[str, str], ...]) -> bytes:
    return "".join([f"{name}: {value}\r\n" for name, value in headers]).encode("latin-1")


# The usual replies' headers, written once.
_HEADER_LINES: dict[tuple[tuple[str, str], ...], bytes] = {
    headers: _header_lines(headers) for headers in (_TEXT_HEADERS, _METRICS_HEADERS, _METRICS_GZIP_HEADERS)
}
