"""A small HTTP server for ``/metrics`` and ``/healthz``, on its own threads.

The agent and the collector both serve their metrics this way. The server runs beside the work
it reports on (the sampling loop, the collector's event loop): a scrape renders what is in memory
at that moment and never makes the work wait on a slow or stuck scraper. Each request gets a
thread (requests time out after ``REQUEST_TIMEOUT_SECONDS``); the text is gzipped when the
client asks, as Prometheus does.
"""

from __future__ import annotations

import gzip
import socket
import socketserver
import ssl
import threading
from collections.abc import Callable, Iterable
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

import structlog

from nodeagent.core.transport.channel import parse_target

log = structlog.get_logger("nodeagent.http")

# Prometheus text exposition format 0.0.4: what every Prometheus and compatible scraper reads.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
REQUEST_TIMEOUT_SECONDS = 30.0
# Fast compression: at 10,000 nodes the text is tens of megabytes, and the CPU is the ingest's.
GZIP_LEVEL = 1

Health = Callable[[], tuple[bool, str]]
# Who may read /metrics: (bearer token or None, the verified peer certificate or None) -> None to
# serve it, or (401 or 403, why). /healthz and the plain index stay open; `pages` (the collector's
# fleet page) are guarded like /metrics.
Guard = Callable[[str | None, dict[str, Any] | None], tuple[int, str] | None]
PEER_CERT_KEY = "nodeagent.peer_cert"
_STATUS_LINES = {401: "401 Unauthorized", 403: "403 Forbidden"}
StartResponse = Callable[[str, list[tuple[str, str]]], Any]
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
        self.port = 0
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self) -> int:
        """Bind and serve; ``OSError`` when the address cannot be bound. Returns the port."""
        server_class = _Server6 if ":" in self.host else _Server
        server = server_class((self.host, self._port), _QuietHandler)
        server.set_app(self._app)
        server.ssl_context = self.ssl_context
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

    def _app(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            return _reply(start_response, "405 Method Not Allowed", b"use GET\n", [("Allow", "GET, HEAD")])
        body = self._route(environ, start_response)
        return [b""] if method == "HEAD" else body  # the headers (Content-Length too) without the body

    def _route(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            refused = self._refused(environ)
            if refused is not None:
                code, detail = refused
                headers = [("Content-Type", "text/plain; charset=utf-8")]
                if code == 401:
                    headers.append(("WWW-Authenticate", 'Bearer realm="nodeagent"'))
                return _reply(start_response, _STATUS_LINES[code], f"{detail}\n".encode(), headers)
            return self._metrics(environ, start_response)
        if path == "/healthz" and self.health is not None:
            try:
                ok, detail = self.health()
            except Exception as err:  # a failing check is an unhealthy process, not a 500
                ok, detail = False, f"health check failed: {type(err).__name__}: {err}"
            status = "200 OK" if ok else "503 Service Unavailable"
            return _reply(start_response, status, f"{detail}\n".encode())
        if self.pages is not None:
            refused = self._refused(environ)
            if refused is not None:
                return _reply(start_response, _STATUS_LINES[refused[0]], f"{refused[1]}\n".encode())
            try:
                found = self.pages(path, environ.get("QUERY_STRING", ""))
            except Exception as err:
                log.error("page failed", path=path, error=f"{type(err).__name__}: {err}")
                return _reply(start_response, "500 Internal Server Error", b"page failed; see the log\n")
            if found is not None:
                status, content_type, body = found
                return _reply(start_response, status, body, [("Content-Type", content_type)])
        if path == "/":
            links = "/metrics\n/healthz\n" if self.health is not None else "/metrics\n"
            return _reply(start_response, "200 OK", f"{self.name}\n{links}".encode())
        return _reply(start_response, "404 Not Found", b"not found\n")

    def _refused(self, environ: dict[str, Any]) -> tuple[int, str] | None:
        if self.guard is None:
            return None
        token: str | None = None
        authorization = environ.get("HTTP_AUTHORIZATION")
        if authorization is not None:
            scheme, _, given = str(authorization).partition(" ")
            token = given.strip() if scheme.lower() == "bearer" else ""
        return self.guard(token, environ.get(PEER_CERT_KEY))

    def _metrics(self, environ: dict[str, Any], start_response: StartResponse) -> list[bytes]:
        wants_gzip = "gzip" in environ.get("HTTP_ACCEPT_ENCODING", "")
        try:
            if wants_gzip and self.metrics_gzip is not None:
                body = self.metrics_gzip()
            else:
                body = self.metrics()
                if wants_gzip:
                    body = gzip.compress(body, compresslevel=GZIP_LEVEL)
        except Exception as err:
            log.error("metrics failed", error=f"{type(err).__name__}: {err}")
            return _reply(start_response, "500 Internal Server Error", b"metrics failed; see the log\n")
        headers = [("Content-Type", TEXT_CONTENT_TYPE)]
        if wants_gzip:
            headers.append(("Content-Encoding", "gzip"))
        return _reply(start_response, "200 OK", body, headers)


def _reply(
    start_response: StartResponse, status: str, body: bytes, headers: list[tuple[str, str]] | None = None
) -> list[bytes]:
    headers = headers or [("Content-Type", "text/plain; charset=utf-8")]
    start_response(status, [*headers, ("Content-Length", str(len(body)))])
    return [body]


class _Server(socketserver.ThreadingMixIn, WSGIServer):
    # Request threads are fire and forget: a stuck scraper cannot hold up a shutdown.
    daemon_threads = True
    allow_reuse_address = True
    ssl_context: ssl.SSLContext | None = None

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host's FQDN, which can wait on DNS; nothing here needs it.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), int(port)
        self.setup_environ()

    def finish_request(self, request: Any, client_address: Any) -> None:
        # TLS is set up here, in the request's own thread: a client that stalls in the
        # handshake holds up only itself, not the accept loop.
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(REQUEST_TIMEOUT_SECONDS)
        with self.ssl_context.wrap_socket(request, server_side=True) as tls:
            super().finish_request(tls, client_address)

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that goes away or fails the TLS handshake is the client's business.
        log.debug("http request failed", client=str(client_address))


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT_SECONDS

    def get_environ(self) -> dict[str, Any]:
        environ = super().get_environ()
        if isinstance(self.connection, ssl.SSLSocket):
            # The client certificate, when it sent one that chains to the client CA.
            environ[PEER_CERT_KEY] = self.connection.getpeercert() or None
        return environ

    def log_message(self, format: str, *args: Any) -> None:
        """Scrapes are routine: no line per request."""
