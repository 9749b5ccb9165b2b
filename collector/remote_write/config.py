"""How to reach a remote-write receiver: ``serve --remote-write-url`` and ``[remote_write]``."""

from __future__ import annotations

import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Final

DEFAULT_QUEUE_SAMPLES: Final = 1_000_000
DEFAULT_BATCH_SAMPLES: Final = 10_000
# One sample per series every this many seconds of report time (0: every report).
DEFAULT_RESOLUTION_SECONDS: Final = 15.0
# The socket the collector hands reports to its process over: what the process may fall behind by
# before reports are dropped (about two seconds of 1,500 reports/s at a few KB each). Above
# net.core.wmem_max only as root.
DEFAULT_HANDOVER_BYTES: Final = 8 * 1024 * 1024
MIN_HANDOVER_BYTES: Final = 64 * 1024


class RemoteWriteConfigError(ValueError):
    """A setting that cannot work; the message names it."""


@dataclass(frozen=True, slots=True)
class RemoteWriteConfig:
    url: str
    resolution_seconds: float = DEFAULT_RESOLUTION_SECONDS
    queue_samples: int = DEFAULT_QUEUE_SAMPLES
    batch_samples: int = DEFAULT_BATCH_SAMPLES
    timeout_seconds: float = 10.0
    backoff_seconds: float = 0.5
    max_backoff_seconds: float = 30.0
    basic_auth_user: str = ""
    basic_auth_password_file: Path | None = None
    bearer_token_file: Path | None = None
    tls_ca: Path | None = None
    tls_cert: Path | None = None
    tls_key: Path | None = None
    handover_bytes: int = DEFAULT_HANDOVER_BYTES

    def check(self) -> None:
        """``RemoteWriteConfigError`` naming the first bad value."""
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise RemoteWriteConfigError(f"remote-write URL {self.url!r}: not an http:// or https:// URL with a host")
        try:
            parts.port  # noqa: B018 - raises on a bad port
        except ValueError as err:
            raise RemoteWriteConfigError(f"remote-write URL {self.url!r}: {err}") from None
        if self.basic_auth_user and self.bearer_token_file is not None:
            raise RemoteWriteConfigError("remote write: basic auth and a bearer token exclude each other")
        if self.basic_auth_user and self.basic_auth_password_file is None:
            raise RemoteWriteConfigError("remote write: basic auth needs a password file")
        for name, path in (
            ("password file", self.basic_auth_password_file), ("bearer token file", self.bearer_token_file),
            ("TLS CA", self.tls_ca), ("TLS certificate", self.tls_cert), ("TLS key", self.tls_key),
        ):  # fmt: skip
            if path is not None and not path.is_file():
                raise RemoteWriteConfigError(f"remote write: {name} {path}: no such file")
        if (self.tls_cert is None) != (self.tls_key is None):
            raise RemoteWriteConfigError(
                "remote write: a TLS client certificate needs its key, and the key its certificate"
            )
        if self.queue_samples < self.batch_samples:
            raise RemoteWriteConfigError(
                f"remote write: queue of {self.queue_samples} samples is smaller than a batch ({self.batch_samples})"
            )
