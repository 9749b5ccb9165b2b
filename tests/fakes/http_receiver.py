"""A real HTTP server on 127.0.0.1 that receives alert POSTs, for sink tests.

It can be told to misbehave first: answer some attempts with a status (503) or drop the
connection after reading the request (the sender cannot know whether it arrived). It keeps every
attempt and, like a careful webhook receiver, accepts each ``Idempotency-Key`` once.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

DROP = "drop"


@dataclass
class Attempt:
    path: str
    headers: dict[str, str]
    body: Any
    # What the receiver did: an HTTP status, or DROP.
    outcome: int | str


@dataclass
class Receiver:
    url: str
    # Consumed one per attempt: a status to answer, or DROP; afterwards every attempt gets 200.
    script: list[int | str] = field(default_factory=list)
    attempts: list[Attempt] = field(default_factory=list)
    # Accepted deliveries, deduplicated on the Idempotency-Key header (bodies without one all count).
    accepted: list[Any] = field(default_factory=list)
    seen_keys: set[str] = field(default_factory=set)
    # What a non-2xx answer says (a receiver's reason).
    error_body: str = ""
    lock: threading.Lock = field(default_factory=threading.Lock)
    arrived: threading.Condition = field(init=False)

    def __post_init__(self) -> None:
        self.arrived = threading.Condition(self.lock)

    def wait_accepted(self, count: int, timeout: float = 10.0) -> list[Any]:
        with self.arrived:
            self.arrived.wait_for(lambda: len(self.accepted) >= count, timeout)
            return list(self.accepted)


@contextmanager
def http_receiver(script: list[int | str] | None = None, error_body: str = "") -> Iterator[Receiver]:
    receiver: Receiver | None = None

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            assert receiver is not None
            data = self.rfile.read(int(self.headers.get("Content-Length", "0")))
            headers = {k.lower(): v for k, v in self.headers.items()}
            # JSON (alert sinks) as parsed; anything else (remote write's snappy protobuf) as bytes.
            body: Any = json.loads(data) if headers.get("content-type", "").endswith("json") else data
            with receiver.lock:
                outcome: int | str = receiver.script.pop(0) if receiver.script else 200
                receiver.attempts.append(Attempt(self.path, headers, body, outcome))
                key = headers.get("idempotency-key")
                if outcome == 200 and (key is None or key not in receiver.seen_keys):
                    if key is not None:
                        receiver.seen_keys.add(key)
                    receiver.accepted.append(body)
                receiver.arrived.notify_all()
            if outcome == DROP:
                self.close_connection = True
                self.connection.close()  # read, then hang up without an answer
                return
            assert isinstance(outcome, int)
            reason = receiver.error_body.encode() if outcome >= 300 else b""
            self.send_response(outcome)
            self.send_header("Content-Length", str(len(reason)))
            self.end_headers()
            self.wfile.write(reason)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(
        url=f"http://127.0.0.1:{server.server_address[1]}/hook", script=list(script or []), error_body=error_body
    )
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield receiver
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
