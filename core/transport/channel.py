"""Client side of the gRPC transport: targets, TLS, token and keepalive in one place.

The agent's sender and the collector's query commands open their channels here, so both speak
to a collector the same way.
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc

# Reports are about 1-2 KB; anything near this is an error, not data.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024

# A dead peer (cable pulled, namespace link down) is noticed within about 15 s even when no
# report is waiting; the collector permits pings this often.
KEEPALIVE_OPTIONS: list[tuple[str, int]] = [
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.max_pings_without_data", 0),
]


@dataclass(frozen=True, slots=True)
class ClientSecurity:
    """How to reach a collector: plaintext by default; TLS when a CA (or a client cert) is given."""

    ca_file: Path | None = None
    cert_file: Path | None = None
    key_file: Path | None = None
    token_file: Path | None = None
    # Name to check the server certificate against, when it differs from the target host.
    server_name: str | None = None

    @property
    def tls(self) -> bool:
        return self.ca_file is not None or self.cert_file is not None

    def metadata(self) -> tuple[tuple[str, str], ...]:
        if self.token_file is None:
            return ()
        return (("authorization", f"Bearer {read_token(self.token_file)}"),)

    def check(self) -> None:
        """Raise ``ValueError`` naming the first unusable setting, the client key and certificate
        that do not make a pair included."""
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("--tls-cert and --tls-key go together")
        for path in (self.ca_file, self.cert_file, self.key_file, self.token_file):
            if path is not None and not path.is_file():
                raise ValueError(f"{path}: no such file")
        if self.token_file is not None:
            read_token(self.token_file)
        if self.cert_file is not None and self.key_file is not None:
            # A key that is not the certificate's: gRPC would log "Invalid private key" at every
            # handshake and retry for ever. Imported here: security.py imports this module, and
            # the check loads OpenSSL, which only a TLS client needs.
            from nodeagent.core.transport.security import check_key_pair  # noqa: PLC0415

            check_key_pair(self.cert_file, self.key_file, self.ca_file, ca_flag="--tls-ca")


def read_token(path: Path) -> str:
    token = path.read_text().strip()
    if not token or any(c.isspace() for c in token):
        raise ValueError(f"{path}: the token must be one word on one line")
    return token


def parse_target(text: str, *, any_port: bool = False) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port); ``ValueError`` naming the text.

    ``any_port`` admits port 0 (a listener that lets the kernel choose). A URL
    (``http://host:50051``) is refused at once, saying what to give instead: gRPC would take it
    for a host name and fail later with "Misformatted domain name"."""
    scheme, sep, rest = text.partition("://")
    if sep:
        bare = rest.split("/", 1)[0]
        raise ValueError(f"{text!r} is not HOST:PORT: give {bare!r}, without {scheme}:// (gRPC, not a URL)")
    host, sep, port_text = text.rpartition(":")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
        valid_host = _is_ipv6(host)
    else:
        valid_host = _HOST.fullmatch(host) is not None
    if not sep or not valid_host or not port_text.isdigit() or not (0 if any_port else 1) <= int(port_text) < 65536:
        raise ValueError(f"{text!r} is not HOST:PORT")
    return host, int(port_text)


def bind_problem(host: str, port: int) -> str:
    """Why a listener could not bind ``host:port`` now, in the OS's words ("" when it could).
    Asked as gRPC binds (SO_REUSEADDR: a port some closed connection still waits on is free),
    before gRPC is asked: its own failure is a C-core line on stderr and "Failed to bind"."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except OSError:
        return ""  # a host that does not resolve: gRPC's own error says so
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                probe.bind(address)
            except OSError as err:
                return str(err.strerror or err).lower()
    return ""


# A host name or an IPv4 address; an IPv6 address goes in brackets.
_HOST = re.compile(r"[A-Za-z0-9_.-]+")


def _is_ipv6(text: str) -> bool:
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def open_channel(
    target: str, security: ClientSecurity, extra_options: Sequence[tuple[str, int | str]] = ()
) -> grpc.aio.Channel:
    """A channel to ``target`` (``extra_options``: more gRPC channel arguments, after these)."""
    options: list[tuple[str, int | str]] = [
        *KEEPALIVE_OPTIONS,
        ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
        ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
        # Reconnecting is the sender's job (with its own backoff and failover); a channel is one try.
        ("grpc.enable_retries", 0),
        *extra_options,
    ]
    if not security.tls:
        return grpc.aio.insecure_channel(target, options=options)
    if security.server_name:
        options.append(("grpc.ssl_target_name_override", security.server_name))
    credentials = grpc.ssl_channel_credentials(
        root_certificates=_read(security.ca_file),
        private_key=_read(security.key_file),
        certificate_chain=_read(security.cert_file),
    )
    return grpc.aio.secure_channel(target, credentials, options=options)


def _read(path: Path | None) -> bytes | None:
    return path.read_bytes() if path is not None else None
