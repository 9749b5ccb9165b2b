"""A small HTTP server for ``/metrics`` and ``/healthz``, on its own threads.

The agent and the collector both serve their metrics this way. The server runs beside the work
it reports on (the sampling loop, the collector's event loop): a scrape renders what is in memory
at that moment and never makes the work wait on a slow or stuck scraper. Each connection gets a
thread (a client silent for ``REQUEST_TIMEOUT_SECONDS`` is dropped) and is kept alive for the
next scrape; the text is gzipped when the client asks, as Prometheus does.
"""

from __future__ import annotations

import gzip
import queue
import socket
import socketserver
import ssl
import threading
import urllib.parse
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from nodeagent.core.transport.channel import parse_target

log = structlog.get_logger("nodeagent.http")

# Prometheus text exposition format 0.0.4: what every Prometheus and compatible scraper reads.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_SECONDS = 30.0
# Fast compression: at 10,000 nodes the text is tens of megabytes, and the CPU is the ingest's.
GZIP_LEVEL = 1
# How long a request thread that has answered waits for the next connection (see _Server).
IDLE_THREAD_SECONDS = 60.0

Health = Callable[[], tuple[bool, str]]
# Who may read /metrics: (bearer token or None, the verified peer certificate or None) -> None to
# serve it, or (401 or 403, why). /healthz and the plain index stay open; `pages` (the collector's
# fleet page) are guarded like /metrics.
Guard = Callable[[str | None, dict[str, Any] | None], tuple[int, str] | None]
_STATUS_LINES = {401: "401 Unauthorized", 403: "403 Forbidden"}
# More pages behind the same guard: (path, query string) -> (status line, content type, body), or
# None where the path is none of them (the collector's fleet view).
Pages = Callable[[str, str], tuple[str, str, bytes] | None]
# What a request gets: (status line, headers but Content-Length, body).
Reply = tuple[str, list[tuple[str, str]], bytes]
_PLAIN = [("Content-Type", "text/plain; charset=utf-8")]


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
        self.metrics = metrics
        # The page already gzipped, where its owner keeps one (the agent's changes once a tick).
        self.metrics_gzip = metrics_gzip
        self.health = health
        self.ssl_context = ssl_context
        self.name = name
        self.guard = guard
        self.pages = pages
        self.request_timeout_seconds = request_timeout_seconds
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
        server = server_class((self.host, self._port), _Handler)
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
            self._server = None
        if self._thread is not None:
            self._thread.join(5.0)
            self._thread = None

    # ---- requests (one thread each) ----

    def route(self, path: str, query: str, request: _Handler) -> Reply:
        if path == "/metrics":
            refused = self._refused(request)
            if refused is not None:
                code, detail = refused
                headers = list(_PLAIN)
                if code == 401:
                    headers.append(("WWW-Authenticate", 'Bearer realm="nodeagent"'))
                return _STATUS_LINES[code], headers, f"{detail}\n".encode()
            return self._metrics(request)
        if path == "/healthz" and self.health is not None:
            try:
                ok, detail = self.health()
            except Exception as err:  # a failing check is an unhealthy process, not a 500
                ok, detail = False, f"health check failed: {type(err).__name__}: {err}"
            return ("200 OK" if ok else "503 Service Unavailable"), _PLAIN, f"{detail}\n".encode()
        if self.pages is not None:
            refused = self._refused(request)
            if refused is not None:
                return _STATUS_LINES[refused[0]], _PLAIN, f"{refused[1]}\n".encode()
            try:
                found = self.pages(path, query)
            except Exception as err:
                log.error("page failed", path=path, error=f"{type(err).__name__}: {err}")
                return "500 Internal Server Error", _PLAIN, b"page failed; see the log\n"
            if found is not None:
                status, content_type, body = found
                return status, [("Content-Type", content_type)], body
        if path == "/":
            links = "/metrics\n/healthz\n" if self.health is not None else "/metrics\n"
            return "200 OK", _PLAIN, f"{self.name}\n{links}".encode()
        return "404 Not Found", _PLAIN, b"not found\n"

    def _refused(self, request: _Handler) -> tuple[int, str] | None:
        if self.guard is None:
            return None
        token: str | None = None
        authorization = request.headers.get("Authorization")
        if authorization is not None:
            scheme, _, given = str(authorization).partition(" ")
            token = given.strip() if scheme.lower() == "bearer" else ""
        return self.guard(token, request.peer_cert())

    def _metrics(self, request: _Handler) -> Reply:
        wants_gzip = "gzip" in request.headers.get("Accept-Encoding", "")
        try:
            if wants_gzip and self.metrics_gzip is not None:
                body = self.metrics_gzip()
            else:
                body = self.metrics()
                if wants_gzip:
                    body = gzip.compress(body, compresslevel=GZIP_LEVEL)
        except Exception as err:
            log.error("metrics failed", error=f"{type(err).__name__}: {err}")
            return "500 Internal Server Error", _PLAIN, b"metrics failed; see the log\n"
        headers = [("Content-Type", TEXT_CONTENT_TYPE)]
        if wants_gzip:
            headers.append(("Content-Encoding", "gzip"))
        return "200 OK", headers, body


class _Server(ThreadingHTTPServer):
    """Each connection on a thread of its own, as ThreadingHTTPServer does, but a thread that has
    answered waits ``IDLE_THREAD_SECONDS`` for the next connection before it ends: starting a
    thread costs more CPU than the rest of a cached scrape. The threads are daemons (a stuck
    scraper cannot hold up a shutdown, which concurrent.futures' joined workers would) and there is
    no cap (a stalled client holds only its own thread, never a scrape that comes after it)."""

    allow_reuse_address = True
    owner: MetricsHttpServer

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        # Before binding: a bind that fails calls server_close, which reads them.
        self._waiting: queue.SimpleQueue[tuple[Any, Any] | None] = queue.SimpleQueue()  # None: end
        self._idle_threads = 0
        self._idle_lock = threading.Lock()
        self._closed = False
        super().__init__(address, handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._idle_lock:
            if self._idle_threads:  # an idle thread takes it (under the lock: it cannot time out now)
                self._idle_threads -= 1
                self._waiting.put((request, client_address))
                return
        threading.Thread(target=self._serve, args=(request, client_address), daemon=True).start()

    def _serve(self, request: Any, client_address: Any) -> None:
        while True:
            self.process_request_thread(request, client_address)  # answers, closes, never raises
            with self._idle_lock:
                if self._closed:
                    return
                self._idle_threads += 1
            try:
                handed = self._waiting.get(timeout=IDLE_THREAD_SECONDS)
            except queue.Empty:
                with self._idle_lock:
                    try:  # handed one between the timeout and the lock
                        handed = self._waiting.get_nowait()
                    except queue.Empty:
                        self._idle_threads -= 1
                        return
            if handed is None:
                return
            request, client_address = handed

    def server_close(self) -> None:
        super().server_close()
        with self._idle_lock:  # the idle threads end now, not after their wait
            self._closed = True
            for _ in range(self._idle_threads):
                self._waiting.put(None)
            self._idle_threads = 0

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can wait on DNS; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # TLS is set up here, in the request's own thread: a client that stalls in the
        # handshake holds up only itself, not the accept loop.
        context = self.owner.ssl_context
        if context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(self.owner.request_timeout_seconds)
        with context.wrap_socket(request, server_side=True) as tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away or fails the TLS handshake is the client's business.
        log.debug("http request failed", client=str(client_address))


class _Server6(_Server):
    address_family = socket.AF_INET6


class _Handler(BaseHTTPRequestHandler):
    """A connection's requests, answered by the owner's ``route``. HTTP/1.1 keeps the connection
    open for the next request (Prometheus scrapes over one kept-alive connection: no connect, no
    thread hand-over per scrape) until the client closes it, asks to, or stays silent for the
    request timeout."""

    server: _Server
    protocol_version = "HTTP/1.1"
    # The headers and a body of up to 64 KiB (a gzipped page) leave in one send; a larger body
    # is a second write, which must not wait for the client to ACK the first.
    wbufsize = 64 * 1024
    disable_nagle_algorithm = True

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(self.server.owner.request_timeout_seconds)  # a client that stalls is dropped

    def parse_request(self) -> bool:
        if not super().parse_request():
            return False  # a malformed request: answered 400 by http.server
        if self.headers.get("Content-Length", "0") != "0" or "Transfer-Encoding" in self.headers:
            self.close_connection = True  # a body is never read: the connection cannot carry another request
        if self.command not in ("GET", "HEAD"):
            self.close_connection = True
            self._send(("405 Method Not Allowed", [*_PLAIN, ("Allow", "GET, HEAD")], b"use GET\n"))
            return False
        return True

    def do_GET(self) -> None:
        self._send(self._reply())

    def do_HEAD(self) -> None:
        self._send(self._reply(), body=False)  # the headers (Content-Length too) without the body

    def _reply(self) -> Reply:
        path, _, query = self.path.partition("?")
        try:
            return self.server.owner.route(urllib.parse.unquote(path, "iso-8859-1"), query, self)
        except Exception as err:  # a failing guard: an answer, not a dropped connection
            log.error("request failed", path=path, error=f"{type(err).__name__}: {err}")
            return "500 Internal Server Error", _PLAIN, b"request failed; see the log\n"

    def _send(self, reply: Reply, body: bool = True) -> None:
        status, headers, content = reply
        code, _, reason = status.partition(" ")
        self.send_response(int(code), reason)
        for name, value in headers:
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(content)))
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        if body:
            self.wfile.write(content)

    def peer_cert(self) -> dict[str, Any] | None:
        """The client certificate, when it sent one that chains to the client CA."""
        if isinstance(self.connection, ssl.SSLSocket):
            return self.connection.getpeercert() or None
        return None

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are routine: no line per request."""
