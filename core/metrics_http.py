"""A small HTTP server for ``/metrics`` and ``/healthz``, on its own threads.

The agent and the collector both serve their metrics this way. The server runs beside the work
it reports on (the sampling loop, the collector's event loop): a scrape renders what is in memory
at that moment and never makes the work wait on a slow or stuck scraper. Each connection gets a
thread; the text is gzipped when the client asks, as Prometheus does.

HTTP/1.1 comes from h11 (the protocol state machine behind httpcore and uvicorn) over
socketserver's threads, not from http.server: that one parses every request's headers with the
email package, imports http.client and with it ssl (4.5 MB resident in the agent, which needs
OpenSSL only for HTTPS, and then loads it), and closes the connection after each reply. Here a
scraper keeps its connection between scrapes (keep-alive): a connection is closed when a request
stalls for ``REQUEST_TIMEOUT_SECONDS`` or none comes for ``IDLE_TIMEOUT_SECONDS``, and at most
``MAX_CONNECTIONS`` are served at once.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

import h11
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
_KNOWN_STATUS = frozenset(HTTPStatus)


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str
    query: str
    headers: dict[str, str]  # lower-case names; a repeated header keeps its last value
    peer_cert: dict[str, Any] | None  # the client certificate that chained to the client CA


@dataclass(frozen=True, slots=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = (("Content-Type", _TEXT),)


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
                headers: tuple[tuple[str, str], ...] = (("Content-Type", _TEXT),)
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
            return Reply(200, body, (("Content-Type", TEXT_CONTENT_TYPE), ("Content-Encoding", "gzip")))
        return Reply(200, body, (("Content-Type", TEXT_CONTENT_TYPE),))


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
                    reply = Reply(503, b"too many connections\n", (("Content-Type", _TEXT), ("Connection", "close")))
                    _send(h11.Connection(h11.SERVER), sock, reply, head_only=False)
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
        conn = h11.Connection(h11.SERVER, max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES)
        served = 0
        while True:
            try:
                request = _next_request(conn, sock, peer_cert, owner.request_timeout_seconds, kept_alive=served > 0)
            except h11.RemoteProtocolError as err:
                if conn.our_state in (h11.IDLE, h11.SEND_RESPONSE):  # h11 lets a server answer a broken request
                    _send(conn, sock, Reply(err.error_status_hint, b"bad request\n"), head_only=False)
                return
            except (OSError, TimeoutError):
                return  # closed, reset or idle past the timeout
            if request is None:
                return
            try:
                reply = owner.respond(request)
            except Exception as err:  # one bad request must not end the server's thread silently
                log.error("http request failed", path=request.path, error=f"{type(err).__name__}: {err}")
                reply = Reply(500, b"request failed; see the log\n")
            try:
                _send(conn, sock, reply, head_only=request.method == "HEAD")
            except OSError:
                return
            if conn.our_state is not h11.DONE or conn.their_state is not h11.DONE:
                return  # the client asked to close, or sent a body we did not read
            conn.start_next_cycle()
            served += 1


def _next_request(
    conn: h11.Connection,
    sock: socket.socket,
    peer_cert: dict[str, Any] | None,
    timeout_seconds: float,
    *,
    kept_alive: bool,
) -> Request | None:
    """The next request, its body (if any) read and dropped; None when the client closed. A new
    connection's first request has the request timeout; a kept-alive one waits for its next
    request for the idle timeout, then the request has the request timeout."""
    request: Request | None = None
    body_bytes = 0
    waiting = kept_alive
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            if waiting:
                sock.settimeout(IDLE_TIMEOUT_SECONDS)
            data = sock.recv(_RECEIVE_BYTES)
            if waiting:
                sock.settimeout(timeout_seconds)
                waiting = False
            conn.receive_data(data)
        elif isinstance(event, h11.Request):
            path, _, query = event.target.decode("ascii", "replace").partition("?")
            headers = {name.decode("ascii"): value.decode("latin-1") for name, value in event.headers}
            request = Request(event.method.decode("ascii", "replace"), path, query, headers, peer_cert)
        elif isinstance(event, h11.Data):
            body_bytes += len(event.data)
            if body_bytes > MAX_REQUEST_HEAD_BYTES:  # nothing here reads a body: a big one is refused
                raise h11.RemoteProtocolError("request body too large", error_status_hint=413)
        elif isinstance(event, h11.EndOfMessage):
            return request
        else:  # ConnectionClosed
            return None


def _send(conn: h11.Connection, sock: socket.socket, reply: Reply, *, head_only: bool) -> None:
    headers = [*reply.headers, ("Content-Length", str(len(reply.body)))]
    reason = HTTPStatus(reply.status).phrase.encode() if reply.status in _KNOWN_STATUS else b""
    head = conn.send(h11.Response(status_code=reply.status, headers=headers, reason=reason)) or b""
    body = b""
    if not head_only:  # a HEAD reply has the headers (Content-Length too) without the body
        body = conn.send(h11.Data(data=reply.body)) or b""
    end = conn.send(h11.EndOfMessage()) or b""
    if len(body) < _RECEIVE_BYTES:
        sock.sendall(head + body + end)
    else:  # a big page (the collector's at fleet scale) is not copied to prepend the head
        sock.sendall(head)
        sock.sendall(body)
        if end:
            sock.sendall(end)
