"""What the ``/metrics`` server sends back: a reply's status line, headers and body, written into
the socket directly, and the page's gzip.

The status line and headers are written here, as uvicorn does, and the usual ones only once (a
scrape's reply head is a lookup and one format); a small reply goes out in one write with its
head, a big one (the collector's page at fleet scale) in two, so that it is not copied.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from http import HTTPStatus

from isal import igzip

# Prometheus text exposition format 0.0.4: what every Prometheus and compatible scraper reads.
TEXT_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
PLAIN_TEXT_CONTENT_TYPE = "text/plain; charset=utf-8"
# Fast compression: at 10,000 nodes the text is tens of megabytes, and the CPU is the ingest's.
# ISA-L's level 1 compresses as tightly as zlib's level 1 at under half its CPU (an 8-GPU page of
# 79 KB: 0.07 ms against 0.17 ms); the output is plain gzip (RFC 1952), as every scraper reads.
GZIP_LEVEL = 1

# Every reply forbids what none of them needs (MDN's and OWASP's baseline): no content-type
# sniffing (a browser that sniffs a label value as HTML or script runs it), no framing
# (clickjacking) and, unless the reply brings its own policy (the collector's pages: their inline
# script and style by hash), nothing loaded or run at all: a plain-text page needs none of it.
NOSNIFF_HEADER = ("X-Content-Type-Options", "nosniff")
CSP_HEADER_NAME = "Content-Security-Policy"
DEFAULT_CONTENT_SECURITY_POLICY = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

PLAIN_TEXT_HEADERS = (("Content-Type", PLAIN_TEXT_CONTENT_TYPE),)
METRICS_HEADERS = (("Content-Type", TEXT_CONTENT_TYPE),)
METRICS_GZIP_HEADERS = (("Content-Type", TEXT_CONTENT_TYPE), ("Content-Encoding", "gzip"))

# A body shorter than this goes out in one write with its head.
_ONE_WRITE_BYTES = 65536
# Every status line written once, reason phrase and all; a code HTTPStatus lacks gets none.
_STATUS_LINES = {status.value: f"HTTP/1.1 {status.value} {status.phrase}\r\n".encode() for status in HTTPStatus}


def gzip_bytes(body: bytes) -> bytes:
    """``body`` gzipped for a client that sent ``Accept-Encoding: gzip``."""
    return igzip.compress(body, compresslevel=GZIP_LEVEL)


# Made for every request: not frozen, whose __init__ (object.__setattr__ per field) costs four
# times as much.
@dataclass(slots=True)
class Reply:
    status: int
    body: bytes
    headers: tuple[tuple[str, str], ...] = PLAIN_TEXT_HEADERS


def send_reply(sock: socket.socket, reply: Reply, *, head_only: bool, keep_alive: bool) -> None:
    """``reply`` written to ``sock``, with its Content-Length, and ``Connection: close`` unless
    the connection stays open; ``head_only`` (a HEAD request): the headers without the body."""
    body = reply.body
    head = _head(reply, keep_alive)
    if head_only:  # a HEAD reply has the headers (Content-Length too) without the body
        sock.sendall(head)
    elif len(body) < _ONE_WRITE_BYTES:
        sock.sendall(head + body)
    else:  # a big page (the collector's at fleet scale) is not copied to prepend the head
        sock.sendall(head)
        sock.sendall(body)


def reply_bytes(reply: Reply) -> bytes:
    """A small reply whole, head and body, with ``Connection: close``: what the accept loop
    writes to a connection it refuses."""
    return _head(reply, False) + reply.body


def _head(reply: Reply, keep_alive: bool) -> bytes:
    status_line = _STATUS_LINES.get(reply.status) or b"HTTP/1.1 %d \r\n" % reply.status
    lines = _HEADER_LINES.get(reply.headers) or _header_lines(reply.headers)
    end = b"\r\n" if keep_alive else b"Connection: close\r\n\r\n"
    return b"%s%sContent-Length: %d\r\n%s" % (status_line, lines, len(reply.body), end)


def _header_lines(headers: tuple[tuple[str, str], ...]) -> bytes:
    """The reply's own headers, then the ones every reply carries (``NOSNIFF_HEADER`` and the
    default policy where it brings none)."""
    security = [NOSNIFF_HEADER]
    if not any(name == CSP_HEADER_NAME for name, _ in headers):
        security.append((CSP_HEADER_NAME, DEFAULT_CONTENT_SECURITY_POLICY))
    return "".join([f"{name}: {value}\r\n" for name, value in (*headers, *security)]).encode("latin-1")


# The usual replies' headers, written once.
_HEADER_LINES: dict[tuple[tuple[str, str], ...], bytes] = {
    headers: _header_lines(headers) for headers in (PLAIN_TEXT_HEADERS, METRICS_HEADERS, METRICS_GZIP_HEADERS)
}
