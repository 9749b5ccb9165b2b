"""A small HTTP server for ``/metrics`` and ``/healthz``, on its own threads.

The agent and the collector both serve their metrics this way. The server runs beside the work
it reports on (the sampling loop, the collector's event loop): a scrape renders what is in memory
at that moment and never makes the work wait on a slow or stuck scraper. Each connection gets a
thread (socketserver's), at most ``MAX_CONNECTIONS`` at once and ``MAX_CONNECTIONS_PER_ADDRESS``
from one client, each request and reply within its deadline (``http_slots.py``); the text is
gzipped when the client asks, as Prometheus does.

Four modules, one role each: this one is the server (what each path answers, who may read it,
the listening socket and its accept loop); ``http_slots.py`` the connection slots (admission,
deadlines, which idle connection makes room); ``http_connection.py`` one connection (TLS, its
requests parsed by httptools, keep-alive, pipelining and the timeouts); ``http_reply.py`` what goes
back (status line, headers, body, the gzip). Not http.server: that one parses every request's
headers with the email package, imports http.client and with it ssl (4.5 MB resident in the
agent, which needs OpenSSL only for HTTPS, and then loads it), and closes the connection after
each reply.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from nodeagent.core.exposition.http_connection import Connection, Request
from nodeagent.core.exposition.http_reply import (
    CSP_HEADER_NAME,
    METRICS_GZIP_HEADERS,
    METRICS_HEADERS,
    PLAIN_TEXT_CONTENT_TYPE,
    PLAIN_TEXT_HEADERS,
    Reply,
    gzip_bytes,
    reply_bytes,
)
from nodeagent.core.exposition.http_slots import Slots, first_flight_whole
from nodeagent.core.transport.channel import parse_target

if TYPE_CHECKING:
    import ssl

log = structlog.get_logger("nodeagent.http")

# How long one receive or send waits on a request under way, or on its reply being taken, before
# the connection is closed (the wait for a kept-alive connection's next request:
# IDLE_TIMEOUT_SECONDS in http_connection.py; the whole request's and the whole reply's deadlines,
# and the connection limits: http_slots.py).
REQUEST_TIMEOUT_SECONDS = 30.0
# How long the kernel holds a new connection that has sent nothing before handing it to the
# accept loop anyway (TCP_DEFER_ACCEPT; Linux rounds it up to its SYN-ACK retransmissions).
DEFER_ACCEPT_SECONDS = 1

Health = Callable[[], tuple[bool, str]]
# Who may read /metrics: (bearer token or None, the verified peer certificate or None, the path)
# -> None to serve it, or (401 or 403, why). /healthz and the plain index stay open; `pages` (the
# collector's fleet page) are guarded too, each by its path.
Guard = Callable[[str | None, dict[str, Any] | None, str], tuple[int, str] | None]
# More pages behind the same guard: (path, query string) -> (status line, content type, body), or
# None where the path is none of them (the collector's fleet view).
Pages = Callable[[str, str], tuple[str, str, bytes] | None]


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
        page_policy: str | None = None,
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
        # The Content-Security-Policy of the HTML ``pages`` answer (their inline script and style,
        # by hash); every other reply, and an HTML page without it, gets the default that lets
        # nothing run (http_reply.py).
        self._page_headers: tuple[tuple[str, str], ...] = (
            ((CSP_HEADER_NAME, page_policy),) if page_policy is not None else ()
        )
        self.port = 0
        self._server: ConnectionServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Bind and serve; ``OSError`` when the address cannot be bound. Returns the port."""
        server_class = ConnectionServer6 if ":" in self.host else ConnectionServer
        server = server_class((self.host, self._port), Connection)
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
            return Reply(405, b"use GET\n", (("Content-Type", PLAIN_TEXT_CONTENT_TYPE), ("Allow", "GET, HEAD")))
        path = request.path
        if path == "/metrics":
            refused = self._refused(request)
            if refused is not None:
                code, detail = refused
                headers: tuple[tuple[str, str], ...] = PLAIN_TEXT_HEADERS
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
                headers = (("Content-Type", content_type),)
                if content_type.startswith("text/html"):
                    headers += self._page_headers
                return Reply(int(status.split(" ", 1)[0]), body, headers)
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
        return self.guard(token, request.peer_cert, request.path)

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
            return Reply(200, body, METRICS_GZIP_HEADERS)
        return Reply(200, body, METRICS_HEADERS)


class ConnectionServer(socketserver.ThreadingTCPServer):
    """The listening socket and its accept loop: a slot and a thread per connection admitted,
    a 503 and a close for one refused, and the sweep that closes connections past their deadline."""

    # Connection threads are fire and forget: a stuck scraper cannot hold up a shutdown.
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    # The listen backlog (socketserver's is 5): a burst of connections waits in the kernel for
    # the accept loop, which admits or refuses each in microseconds, where a full queue drops
    # the scraper's SYN and costs it a second's retransmit.
    request_queue_size = 128
    owner: MetricsHttpServer

    def __init__(self, address: tuple[str, int], handler: type[socketserver.BaseRequestHandler]) -> None:
        self.slots = Slots()
        super().__init__(address, handler)

    def server_bind(self) -> None:
        # A connection is accepted once its first data has come (Linux; nginx's `deferred`): the
        # accept loop then sees whether its first flight is whole (http_slots.py), and a client
        # that connects and sends nothing holds no slot, only the kernel's half-open entry.
        defer = getattr(socket, "TCP_DEFER_ACCEPT", None)
        if defer is not None:
            with contextlib.suppress(OSError):
                self.socket.setsockopt(socket.IPPROTO_TCP, defer, DEFER_ACCEPT_SECONDS)
        super().server_bind()

    def verify_request(self, request: Any, client_address: Any) -> bool:
        # In the accept loop, before any thread or TLS handshake: a refused connection costs no
        # thread, and takes no slot from the clients it would crowd out.
        whole = first_flight_whole(request, tls=self.owner.ssl_context is not None)
        refused = self.slots.admit(request, str(client_address[0]), whole=whole)
        if refused is None:
            return True
        log.debug("http connection refused", client=str(client_address), why=refused)
        if self.owner.ssl_context is None:  # over TLS the refusal is the closed socket
            _refuse(request, refused)
        return False

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread to give the slot back: given back here
            slot = self.slots.slot(request)
            if slot is not None:
                self.slots.release(slot)
            raise

    def service_actions(self) -> None:
        # The accept loop wakes at least every poll interval (0.2 s) and after each connection.
        self.slots.sweep()

    def close_connections(self) -> None:
        """Ends the kept-alive connections too: a stopped server answers nobody."""
        self.slots.close_all()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away or fails the TLS handshake is the client's business.
        log.debug("http request failed", client=str(client_address), error=str(sys.exc_info()[1]))


class ConnectionServer6(ConnectionServer):
    address_family = socket.AF_INET6


def _refuse(sock: socket.socket, why: str) -> None:
    """The 503, written without waiting: a new connection's send buffer is empty and takes it whole,
    and a client that reads nothing cannot hold up the accept loop. What has come of its request
    is read first, so that the close after is a FIN, not a reset that could reach the client
    before the 503 does."""
    with contextlib.suppress(OSError):
        sock.recv(65536, socket.MSG_DONTWAIT)
    with contextlib.suppress(OSError):
        sock.send(reply_bytes(Reply(503, f"{why}\n".encode())), socket.MSG_DONTWAIT)
