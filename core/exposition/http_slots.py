"""The ``/metrics`` server's connection slots: how many connections it serves at once and from one
address, how long each may take over its request and its reply, and which one is closed to make
room for a new one.

A connection holds a slot (and a thread) from its accept to its close. It is admitted in the
accept loop, before its thread starts and before any TLS handshake, so a refused connection costs
the accept and a 503, not a thread. Each slot carries the deadline of what its connection is
waiting on: a request, ``HEAD_TIMEOUT_SECONDS`` from its first byte (from the accept for a
connection's first request, its TLS handshake included), or its reply being taken,
``REPLY_TIMEOUT_SECONDS`` for the whole reply. The accept loop's sweep shuts down every connection
past its deadline, which its thread then sees as a closed socket: a client that trickles its
request a byte at a time, or takes its reply a few bytes at a time, holds its slot no longer than
that, however each single receive or send is timed. While the server writes the page no deadline
runs: that time is the server's, not the client's.

When every slot is taken, the connection that has waited longest for its next request (kept
alive, no byte of a request under way) is closed to make room, as Go's http.Server and browsers
close idle connections. Where none is idle, a new connection whose first flight is already whole
(its request head, or over TLS its ClientHello: a scraper's, which comes in one packet, and
which the listener waits for before the accept, ``TCP_DEFER_ACCEPT``) takes the slot of the
connection whose request head is least complete for its age: the one that has been under way
longest without coming whole, a trickler's. Any other new connection is refused (503); it does
not close another for a place, so tricklers that reconnect at once cannot close each other, nor
the scrape among them, in a loop. However many addresses trickle, a scrape gets in. An address
holds at most ``MAX_CONNECTIONS_PER_ADDRESS`` slots (beyond it, its own longest-idle connection
makes room, or for a whole first flight its own oldest unfinished head, or it is refused): one
noisy host cannot take the slots the scrapers need.
"""

from __future__ import annotations

import contextlib
import math
import socket
import threading
import time
from dataclasses import dataclass
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import ssl

# Connections served at once, a thread each.
MAX_CONNECTIONS = 64
# Connections from one client address: a quarter of the slots, so that one host (a loop of curl,
# a load test, a client that leaks kept-alive connections) leaves the rest to the scrapers.
# Prometheus keeps one connection per target, a browser six per host.
MAX_CONNECTIONS_PER_ADDRESS = 16
# A request must be in, head and body (nothing here reads a body, and one over 16 KiB is refused),
# within this of its first byte, or of the accept for a connection's first request: Go's
# http.Server ReadHeaderTimeout. A scraper's request is a few hundred bytes in one packet, its TLS
# handshake a few round trips; a client that trickles its head holds a slot this long at most.
HEAD_TIMEOUT_SECONDS = 10.0
# A reply must be taken, whole, within this of its first write. As long as a stalled request may
# wait (the server's request timeout, 30 s): the collector's fleet JSON is megabytes at 10,000
# nodes, which a browser on a slow link takes seconds over, and Prometheus itself gives up at its
# scrape timeout and closes. It bounds the reply as one: the socket's timeout bounds each send
# call on its own, and a big reply is two (its head, its body).
REPLY_TIMEOUT_SECONDS = 30.0
# How often the accept loop looks for connections past their deadline.
SWEEP_SECONDS = 0.1
# What the accept loop looks at of a new connection's first flight (a scraper's head is a few
# hundred bytes; a ClientHello under 2 KB).
FIRST_FLIGHT_PEEK_BYTES = 16 * 1024
_TLS_HANDSHAKE_RECORD = 0x16


@dataclass(slots=True, eq=False)
class Slot:
    """One connection's place: its socket (the TLS one once wrapped), its client's address, the
    deadline of what it waits on, and since when it has waited for its next request."""

    sock: socket.socket
    fd: int  # the key in the table: the same for the plain socket and the TLS one that takes it over
    address: str
    deadline: float  # time.monotonic(); inf while the server has the next move
    idle_since: float | None = None  # kept alive, waiting for its next request with no byte of it yet
    # A request head (or the TLS handshake before the first) under way and not whole, since when.
    head_since: float | None = None

    def reading(self) -> None:
        """A request under way waits on more of itself: it must be in within
        ``HEAD_TIMEOUT_SECONDS``."""
        self.idle_since = None
        self.head_since = time.monotonic()
        self.deadline = self.head_since + HEAD_TIMEOUT_SECONDS

    def waiting(self) -> None:
        """Kept alive, waiting for the next request (as long as the idle timeout of its socket):
        the first to be closed when the slots run out."""
        self.deadline = math.inf
        self.head_since = None
        self.idle_since = time.monotonic()

    def working(self) -> None:
        """The server has the next move (a request has come, its page is being written): no
        deadline runs, and the connection is not idle."""
        self.idle_since = self.head_since = None
        self.deadline = math.inf

    def replying(self) -> None:
        """The reply is being written: it must be taken within ``REPLY_TIMEOUT_SECONDS``."""
        self.idle_since = self.head_since = None
        self.deadline = time.monotonic() + REPLY_TIMEOUT_SECONDS


class Slots:
    """The slots of one server, shared by the accept loop (admit, sweep) and the connections'
    threads (each gives its slot back when it ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # By file descriptor, which a connection keeps from its accept to its close: a closed
        # slot is forgotten before its thread closes the socket, so a reused descriptor is a new slot.
        self._slots: dict[int, Slot] = {}
        self._per_address: dict[str, int] = {}
        self._next_sweep = 0.0

    def __len__(self) -> int:
        """The connections that hold a slot now."""
        return len(self._slots)

    def admit(self, sock: socket.socket, address: str, *, whole: bool = False) -> str | None:
        """A slot for the connection just accepted (None), where need be by closing the
        longest-idle connection (its address's own where that address is at its cap), or for one
        whose first flight is ``whole`` the oldest unfinished head; or why not."""
        with self._lock:
            if self._per_address.get(address, 0) >= MAX_CONNECTIONS_PER_ADDRESS:
                victim = self._victim(address, whole)
                if victim is None:
                    return "too many connections from this address"
                self._close(victim)
            elif len(self._slots) >= MAX_CONNECTIONS:
                victim = self._victim(None, whole)
                if victim is None:
                    return "too many connections"
                self._close(victim)
            fd = sock.fileno()
            now = time.monotonic()
            # A whole first flight is not an unfinished head: until its thread reads it, it must
            # not be the one closed for the next whole one (a scraper closing a scraper).
            head_since = None if whole else now
            self._slots[fd] = Slot(sock, fd, address, now + HEAD_TIMEOUT_SECONDS, head_since=head_since)
            self._per_address[address] = self._per_address.get(address, 0) + 1
            return None

    def slot(self, sock: socket.socket) -> Slot | None:
        """The slot of an admitted connection; None where it was closed before its thread began."""
        return self._slots.get(sock.fileno())

    def wrap_tls(self, slot: Slot, context: ssl.SSLContext) -> ssl.SSLSocket:
        """The connection's TLS socket, in place of the plain one it takes over; the handshake is
        the caller's, within the slot's deadline. Under the lock: the plain socket gives up its
        descriptor, and a sweep in between would find nothing to shut down."""
        with self._lock:
            tls = context.wrap_socket(slot.sock, server_side=True, do_handshake_on_connect=False)
            slot.sock = tls
        return tls

    def release(self, slot: Slot) -> None:
        """The connection has ended (where a sweep or a new connection has not already closed it)."""
        with self._lock:
            if self._slots.get(slot.fd) is slot:
                self._forget(slot)

    def sweep(self) -> None:
        """Closes the connections past their deadline; from the accept loop, as often as
        ``SWEEP_SECONDS``."""
        now = time.monotonic()
        if now < self._next_sweep:
            return
        self._next_sweep = now + SWEEP_SECONDS
        with self._lock:
            for slot in [slot for slot in self._slots.values() if slot.deadline <= now]:
                self._close(slot)

    def close_all(self) -> None:
        """Every connection closed, the kept-alive ones too: a stopped server answers nobody."""
        with self._lock:
            for slot in list(self._slots.values()):
                self._close(slot)

    def _victim(self, address: str | None, whole: bool) -> Slot | None:
        """The connection closed for a new one (of ``address``'s own, where given): the
        longest-idle; else, for a new one whose first flight is whole, the oldest unfinished head."""
        mine = [slot for slot in self._slots.values() if address is None or slot.address == address]
        idle = min((slot for slot in mine if slot.idle_since is not None), key=attrgetter("idle_since"), default=None)
        if idle is not None or not whole:
            return idle
        return min((slot for slot in mine if slot.head_since is not None), key=attrgetter("head_since"), default=None)

    def _close(self, slot: Slot) -> None:
        # Shut down, not closed: its thread, woken in its receive or send, ends and closes it.
        # socket.socket's own shutdown: an SSLSocket's drops its TLS state under that thread.
        with contextlib.suppress(OSError):
            socket.socket.shutdown(slot.sock, socket.SHUT_RDWR)
        self._forget(slot)

    def _forget(self, slot: Slot) -> None:
        del self._slots[slot.fd]
        held = self._per_address[slot.address] - 1
        if held:
            self._per_address[slot.address] = held
        else:
            del self._per_address[slot.address]


def first_flight_whole(sock: socket.socket, *, tls: bool) -> bool:
    """Whether what a new connection has sent so far is a whole first flight: a request head
    (its blank line) or, over TLS, a whole handshake record (the ClientHello). Looked at without
    taking it (``MSG_PEEK``) and without waiting."""
    try:
        data = sock.recv(FIRST_FLIGHT_PEEK_BYTES, socket.MSG_PEEK | socket.MSG_DONTWAIT)
    except OSError:
        return False
    if not tls:
        return b"\r\n\r\n" in data
    return len(data) >= 5 and data[0] == _TLS_HANDSHAKE_RECORD and len(data) >= 5 + int.from_bytes(data[3:5], "big")
