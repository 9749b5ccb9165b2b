"""systemd's notify protocol, spoken directly: ``READY=1``, ``WATCHDOG=1``, ``STOPPING=1``.

systemd documents the protocol as stable for independent implementations (sd_notify(3)): one
datagram of newline-separated ``KEY=VALUE`` assignments to the ``AF_UNIX`` socket named by
``$NOTIFY_SOCKET``; a name starting with ``@`` is in the abstract namespace. Outside systemd (no
``$NOTIFY_SOCKET``) every call is a no-op that returns ``False``, so the daemon runs the same
under a terminal, a container runtime or a test.

The agent's run loop calls :func:`watchdog` only after a completed sampling tick: a tick stuck in
an NVML call stops the pings and systemd restarts the agent (``WatchdogSec=`` in the unit).
"""

from __future__ import annotations

import os
import socket

__all__ = ["notify", "ready", "stopping", "watchdog", "watchdog_interval_seconds"]

_USEC_PER_SECOND = 1_000_000


def notify(state: str) -> bool:
    """Send ``state`` (e.g. ``"READY=1"`` or ``"STATUS=sampling\\nWATCHDOG=1"``) to systemd.

    Returns True when the datagram was sent, False when there is no ``$NOTIFY_SOCKET`` or the
    socket cannot be reached: supervision is best effort and never stops the daemon.
    """
    address = _socket_address(os.environ.get("NOTIFY_SOCKET", ""))
    if address is None:
        return False
    payload = state.encode()
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC) as sock:
            # Never wait: a receiver whose queue is full (net.unix.max_dgram_qlen, 10 by default)
            # would otherwise block the sampling loop that calls this.
            sock.setblocking(False)
            sock.connect(address)
            sent = sock.send(payload)
    except OSError:
        return False
    return sent == len(payload)


def ready() -> bool:
    """Start-up is complete (``Type=notify`` units count as started from here)."""
    return notify("READY=1")


def watchdog() -> bool:
    """Keep-alive: call after each completed unit of work, never from a timer thread."""
    return notify("WATCHDOG=1")


def stopping() -> bool:
    """Shutdown has begun; systemd shows the unit as deactivating."""
    return notify("STOPPING=1")


def watchdog_interval_seconds() -> float | None:
    """The watchdog timeout systemd expects pings within, or None when no watchdog applies.

    systemd sets ``$WATCHDOG_USEC`` (and ``$WATCHDOG_PID``, the process meant) when the unit has
    ``WatchdogSec=``. Ping at least twice per interval; a variable meant for another process (a
    child that inherited the environment) does not apply here.
    """
    raw_usec = os.environ.get("WATCHDOG_USEC", "")
    raw_pid = os.environ.get("WATCHDOG_PID", "")
    try:
        usec = int(raw_usec)
    except ValueError:
        return None
    if usec <= 0:
        return None
    if raw_pid:
        try:
            if int(raw_pid) != os.getpid():
                return None
        except ValueError:
            return None
    return usec / _USEC_PER_SECOND


def _socket_address(name: str) -> str | bytes | None:
    """``$NOTIFY_SOCKET`` as a connect() address: abstract names ('@...') start with a NUL byte."""
    if name.startswith("@"):
        return b"\0" + name[1:].encode()
    if name.startswith("/"):
        return name
    # Empty, or a form this implementation does not speak (systemd also allows vsock:...).
    return None
