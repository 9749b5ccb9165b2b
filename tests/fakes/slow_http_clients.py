"""Slow HTTP clients that reconnect, and fresh scrapes among them: the load of issue 35's item 5,
bounded and on loopback, for the /metrics server's test and ``bench/http_slow_clients.py``.

Each trickler connects from one of ``addresses`` loopback addresses (127.0.0.2 and on: 127.0.0.0/8
is all loopback), sends a request head a byte every ``byte_seconds`` (one too long to ever come
whole) and, the moment the server closes it or refuses it, connects again. Meanwhile a fresh
scrape from 127.0.0.1 every ``scrape_every_seconds``, as Prometheus' would: a whole request on a
new connection, ``scrape_timeout_seconds`` for its status line (Prometheus' default 10 s).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

TRICKLE_HEAD = b"GET /metrics HTTP/1.1\r\nHost: x\r\n" + b"X-Slow: 1\r\n" * 1000
SCRAPE = b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"


@dataclass
class Outcome:
    scrapes: int = 0
    answered: int = 0  # 200
    statuses: dict[int, int] = field(default_factory=dict)  # 0: no answer in time, or closed
    trickler_connections: int = 0

    def __str__(self) -> str:
        return (
            f"fresh scrapes answered {self.answered} of {self.scrapes} "
            f"(statuses {dict(sorted(self.statuses.items()))}; trickler connections {self.trickler_connections})"
        )


async def trickle_and_scrape(
    host: str,
    port: int,
    *,
    tricklers: int = 64,
    addresses: int = 8,
    byte_seconds: float = 1.0,
    scrapes: int = 45,
    scrape_every_seconds: float = 1.0,
    scrape_timeout_seconds: float = 10.0,
    warmup_seconds: float = 2.0,
) -> Outcome:
    """The tricklers on, ``warmup_seconds`` for them to take the slots, then the scrapes; every
    trickler closed at the end."""
    outcome = Outcome()
    stop = asyncio.Event()
    tasks = [
        asyncio.create_task(_trickler(host, port, f"127.0.0.{2 + i % addresses}", byte_seconds, stop, outcome))
        for i in range(tricklers)
    ]
    try:
        await asyncio.sleep(warmup_seconds)
        pending = []
        for _ in range(scrapes):
            pending.append(asyncio.create_task(_scrape(host, port, scrape_timeout_seconds, outcome)))
            await asyncio.sleep(scrape_every_seconds)
        await asyncio.gather(*pending)
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return outcome


async def _trickler(host: str, port: int, source: str, byte_seconds: float, stop: asyncio.Event, out: Outcome) -> None:
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port, local_addr=(source, 0))
        except OSError:
            await asyncio.sleep(0.01)
            continue
        out.trickler_connections += 1
        closed = asyncio.create_task(reader.read())  # b"" (or a 503, then b""): the server closed it
        try:
            for byte in TRICKLE_HEAD:
                writer.write(bytes([byte]))
                done, _ = await asyncio.wait({closed}, timeout=byte_seconds)
                if done or stop.is_set():
                    break
        except OSError:
            pass
        finally:
            closed.cancel()
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()


async def _scrape(host: str, port: int, timeout: float, out: Outcome) -> None:
    status = 0
    try:
        async with asyncio.timeout(timeout):
            reader, writer = await asyncio.open_connection(host, port, local_addr=("127.0.0.1", 0))
            try:
                writer.write(SCRAPE)
                line = await reader.readline()
                if line.startswith(b"HTTP/1.1 "):
                    status = int(line.split(b" ", 2)[1])
            finally:
                writer.close()
    except (OSError, TimeoutError, ValueError):
        pass
    out.scrapes += 1
    out.statuses[status] = out.statuses.get(status, 0) + 1
    out.answered += status == 200
