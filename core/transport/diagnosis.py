"""Why a collector cannot be reached, in one line: the reason gRPC's transport message buries.

gRPC says "Socket closed" whether the collector wants TLS from a plaintext client or a client
certificate that was not given, and a page of HTTP/2 parsing when the address is the collector's
HTTP port. ``unreachable_reason`` turns what it can into the operator's next step. With ``probe``
it may ask the port itself: a TLS handshake (Python's ssl, so OpenSSL; the query commands probe,
the agent, which keeps OpenSSL out of its memory, does not) says whether the port speaks TLS and
what the collector thought of the client certificate.
"""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Final

from nodeagent.core.transport.channel import ClientSecurity, parse_target

if TYPE_CHECKING:
    import ssl

PROBE_SECONDS: Final = 3.0
GRPC_PORT_HINT: Final = "the collector's gRPC port is its --listen (50051 by default)"


def unreachable_reason(target: str, security: ClientSecurity, details: str, *, probe: bool) -> str | None:
    """What follows "cannot reach the collector at TARGET: " for a connection that failed with
    gRPC's ``details``; None when gRPC's own words are the best there is (a refused connection
    says it plainly)."""
    if "http1.x server" in details:
        return f"that is an HTTP port (an HTTP/1 server answered), not gRPC: {GRPC_PORT_HINT}"
    if "missing selected ALPN property" in details:
        return f"that is an HTTPS port (TLS without HTTP/2), not gRPC: {GRPC_PORT_HINT}"
    if "Hostname Verification Check failed" in details:
        host = parse_target(target)[0]
        return (
            f"its certificate does not name {host} in its subject alternative names (RFC 6125: never its "
            "common name): reach it by a name it has, or give --tls-server-name"
        )
    if "CERTIFICATE_VERIFY_FAILED" in details:
        why = details.rsplit("CERTIFICATE_VERIFY_FAILED:", 1)[-1].split(":", 1)[0].strip()
        return f"its certificate is not signed by --tls-ca {security.ca_file} ({why})"
    if "Socket closed" not in details and "Connection reset" not in details:
        return None
    return _closed(target, security, probe)


def _closed(target: str, security: ClientSecurity, probe: bool) -> str:
    """The collector closed the connection as soon as it opened: TLS without --tls-ca, or mutual
    TLS without (or with a refused) client certificate."""
    if not security.tls:
        if not probe or _speaks_tls(target):
            return "it closed the connection: it serves TLS; give --tls-ca (the CA of its certificate)"
        return "it closed the connection at once"
    if security.cert_file is None:
        if not probe or _client_certificate_refused(target, security) is not None:
            return "it requires a client certificate (mutual TLS): give --tls-cert and --tls-key"
        return "it closed the TLS connection"
    if not probe or _client_certificate_refused(target, security) is not None:
        return (
            f"it refused the client certificate --tls-cert {security.cert_file}: is it signed by the collector's "
            "--tls-client-ca?"
        )
    return "it closed the TLS connection"


def _context(security: ClientSecurity | None) -> ssl.SSLContext:
    import ssl  # noqa: PLC0415  (only when a failure is being explained)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    # The question is what the collector thinks of us, not whether we trust it (gRPC said that).
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    context.set_alpn_protocols(["h2"])
    if security is not None and security.cert_file is not None and security.key_file is not None:
        context.load_cert_chain(security.cert_file, security.key_file)
    return context


def _handshake(target: str, security: ClientSecurity | None) -> str | None:
    """None when a TLS session with ``target`` got as far as the collector's first bytes;
    ``closed`` when the collector closed it right after the handshake (what a gRPC server does
    to a client certificate it refuses, or to none where it requires one: under TLS 1.3 its
    verdict comes after the handshake, without an alert); else OpenSSL's reason
    (``WRONG_VERSION_NUMBER``: not TLS at all)."""
    import ssl  # noqa: PLC0415

    host, port = parse_target(target)
    try:
        with (
            socket.create_connection((host, port), timeout=PROBE_SECONDS) as raw,
            _context(security).wrap_socket(raw, server_hostname=host) as tls,
        ):
            return None if tls.recv(1) else "closed"
    except ssl.SSLEOFError:
        return "closed"
    except ssl.SSLError as err:
        return str(err.reason or err)
    except OSError as err:
        return type(err).__name__


def _speaks_tls(target: str) -> bool:
    return _handshake(target, None) in (None, "closed")


def _client_certificate_refused(target: str, security: ClientSecurity) -> str | None:
    """How the collector refused the client certificate given (or its absence); None when it
    took it, or the port says nothing of it."""
    reason = _handshake(target, security)
    return "it closed the connection after the TLS handshake" if reason == "closed" else None
