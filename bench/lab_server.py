"""The bottleneck lab's remote store: HTTP range reads of one in-memory object.

    python bench/lab_server.py HOST PORT OBJECT_BYTES

Prints ``serving`` once listening. ``GET /data`` with ``Range: bytes=A-B`` answers 206 with
those bytes (the object is random bytes made at start, so nothing compresses or caches).
"""

from __future__ import annotations

import os
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(host: str, port: int, size: int) -> None:
    blob = os.urandom(size)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            spec = self.headers.get("Range", "")
            try:
                first, last = (int(x) for x in spec.removeprefix("bytes=").split("-"))
            except ValueError:
                first, last = 0, size - 1
            body = memoryview(blob)[max(0, first) : min(size, last + 1)]
            self.send_response(206)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((host, port), Handler)
    server.daemon_threads = True
    print("serving", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    serve(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
