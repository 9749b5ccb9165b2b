"""One HTTP POST over urllib, and what its answer means: accepted, retry, or refused.

The alert sinks (JSON to a webhook or Alertmanager) and remote write (snappy protobuf to a
Prometheus receiver) both send through ``post``, each with its own retry loop around it: a sink
gives up after a few attempts, remote write keeps its batch queued until the receiver takes it.
Which answers are worth another attempt is the same for both, and is what Prometheus' remote-write
spec asks of a sender: no answer (refused, DNS, a timeout, a connection dropped before the answer),
5xx and 429 are retried; any other status (4xx) is the receiver refusing the content, and the same
content would be refused again.
"""

from __future__ import annotations

import http.client
import ssl
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from nodeagent import __version__

USER_AGENT: Final = f"nodeagent-collector/{__version__}"
# How much of a refusal's body is read for its reason (its first line is kept).
REASON_BYTES: Final = 300


@dataclass(frozen=True, slots=True)
class Answer:
    """What one attempt got back."""

    # The HTTP status; 0 when no answer came back.
    status: int
    # One line for logs and errors: "HTTP 400: out of order sample", "ConnectionRefusedError: ...".
    detail: str

    @property
    def accepted(self) -> bool:
        return 200 <= self.status < 300

    @property
    def retry(self) -> bool:
        """Worth another attempt: no answer, a 5xx or a 429. Neither this nor ``accepted``: refused."""
        return self.status in (0, 429) or self.status >= 500


def post(
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    timeout_seconds: float,
    context: ssl.SSLContext | None = None,
) -> Answer:
    """POST ``body`` once (``headers`` after the User-Agent) and say what came back; never raises
    for what the network or the receiver does."""
    request = urllib.request.Request(url, data=body, method="POST")
    request.add_header("User-Agent", USER_AGENT)
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=timeout_seconds, context=context) as response:
            response.read()
            return Answer(int(response.status), f"HTTP {response.status}")
    except urllib.error.HTTPError as err:
        return Answer(err.code, f"HTTP {err.code}" + _reason(err))
    except (OSError, http.client.HTTPException) as err:
        # URLError (refused, DNS), timeouts, a connection dropped before the answer.
        cause = err.reason if isinstance(err, urllib.error.URLError) else err
        return Answer(0, f"{type(cause).__name__}: {cause}".rstrip(": "))


def _reason(err: urllib.error.HTTPError) -> str:
    """ ": " and the first line of the receiver's reason, or nothing."""
    try:
        lines = err.read(REASON_BYTES).decode(errors="replace").strip().splitlines()
    except (OSError, http.client.HTTPException):  # the status came and the body did not: the status decides
        return ""
    return f": {lines[0]}" if lines else ""
