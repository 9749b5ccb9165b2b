"""Fresh scrapes against slow HTTP clients that reconnect (issue 35, item 5), on loopback.

64 tricklers (a byte a second, from 8 addresses 127.0.0.2-9, each connecting again the moment it
is closed) hold the /metrics server's slots; a fresh scrape from 127.0.0.1 every second, each
with 10 s for its answer. Prints how many were answered. Against a server of its own (a
``MetricsHttpServer`` in a child process, as the agent's and the collector's) or ``--target``
(a running agent's or collector's HTTP listener).

    python bench/http_slow_clients.py [--scrapes 45] [--tricklers 64] [--addresses 8] [--target HOST:PORT]
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import subprocess
import sys
import time

from tests.fakes.fleet import free_port, wait_for
from tests.fakes.slow_http_clients import trickle_and_scrape

_SERVER = """
import sys, time
from nodeagent.core.exposition.http_server import MetricsHttpServer
server = MetricsHttpServer(sys.argv[1], lambda: b"m 1\\n" * 2000, health=lambda: (True, "ok"))
server.start()
time.sleep(3600)
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--scrapes", type=int, default=45)
    parser.add_argument("--tricklers", type=int, default=64)
    parser.add_argument("--addresses", type=int, default=8)
    parser.add_argument("--target", default="", help="HOST:PORT of a running listener (default: one of its own)")
    args = parser.parse_args()
    server = None
    if args.target:
        host, _, port_text = args.target.rpartition(":")
        port = int(port_text)
    else:
        host, port = "127.0.0.1", free_port()
        server = subprocess.Popen([sys.executable, "-c", _SERVER, f"{host}:{port}"])
        if not wait_for(lambda: _listening(host, port), 30):
            print("the server did not start", file=sys.stderr)
            return 2
    started = time.monotonic()
    try:
        outcome = asyncio.run(
            trickle_and_scrape(host, port, tricklers=args.tricklers, addresses=args.addresses, scrapes=args.scrapes)
        )
    finally:
        if server is not None:
            server.kill()
            server.wait()
    print(f"{args.tricklers} tricklers from {args.addresses} addresses, {time.monotonic() - started:.0f} s: {outcome}")
    return 0


def _listening(host: str, port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex((host, port)) == 0


if __name__ == "__main__":
    sys.exit(main())
