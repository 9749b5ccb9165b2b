"""Who may talk to the collector: loopback by default, TLS or mTLS beyond it, and a bearer token.

With mutual TLS the node a stream speaks for must be named in the client certificate (a DNS or
URI subject alternative name, or the common name), so one node's credentials cannot send another
node's reports.
"""

from __future__ import annotations

import hmac
import ipaddress
import ssl
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import grpc

from nodeagent.core.transport.channel import read_token


class SecurityConfigError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class ServerSecurity:
    cert_file: Path | None = None
    key_file: Path | None = None
    # CA that client certificates must chain to; setting it turns on mutual TLS.
    client_ca_file: Path | None = None
    token_file: Path | None = None
    insecure: bool = False

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    def check(self, listen_host: str) -> list[str]:
        """Raise for an unusable setup; return warnings to log."""
        if (self.cert_file is None) != (self.key_file is None):
            raise SecurityConfigError("--tls-cert and --tls-key go together")
        if self.client_ca_file is not None and not self.tls:
            raise SecurityConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        for path in (self.cert_file, self.key_file, self.client_ca_file, self.token_file):
            if path is not None and not path.is_file():
                raise SecurityConfigError(f"{path}: no such file")
        if self.token_file is not None:
            read_token(self.token_file)
        if self.tls or is_loopback(listen_host):
            return []
        if not self.insecure:
            raise SecurityConfigError(
                f"refusing plaintext on non-loopback address {listen_host}: give --tls-cert/--tls-key, or --insecure"
            )
        return [f"serving plaintext on {listen_host} (--insecure): anyone who can reach it can send reports"]

    def credentials(self) -> grpc.ServerCredentials:
        assert self.cert_file is not None
        assert self.key_file is not None
        return grpc.ssl_server_credentials(
            [(self.key_file.read_bytes(), self.cert_file.read_bytes())],
            root_certificates=self.client_ca_file.read_bytes() if self.client_ca_file else None,
            require_client_auth=self.mutual,
        )

    def http_ssl_context(self) -> ssl.SSLContext | None:
        """HTTPS for /metrics and /healthz with the server's certificate, when TLS is configured.

        No client certificate is asked for, even with mutual TLS on gRPC: kubelet probes and most
        scrapers present none, and the endpoint only reads (it takes no reports).
        """
        if self.cert_file is None or self.key_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.load_cert_chain(self.cert_file, self.key_file)
        return context

    def token(self) -> str | None:
        return read_token(self.token_file) if self.token_file is not None else None


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def token_ok(expected: str | None, metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
    if expected is None:
        return True
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, given = value.partition(" ")
            return scheme.lower() == "bearer" and hmac.compare_digest(given.encode(), expected.encode())
    return False


def certificate_names(auth_context: Mapping[str, Iterable[bytes]]) -> set[str]:
    """Identities in the peer's certificate: SANs and common name."""
    names = {v.decode(errors="replace") for v in auth_context.get("x509_subject_alternative_name", [])}
    names.update(v.decode(errors="replace") for v in auth_context.get("x509_common_name", []))
    return names
