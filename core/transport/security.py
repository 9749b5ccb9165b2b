"""Who may talk to the collector: loopback by default, TLS or mTLS beyond it, bearer tokens, roles.

Three roles. A *node* streams its own reports: with mutual TLS the node a stream speaks for must
be named in its client certificate, and with ``--token-file`` it sends the node token. An
*operator* reads: the Query service and reflection need an operator credential, a client
certificate naming one of ``--operator-identity`` or the token of ``--operator-token-file``. A
*scraper* reads ``/metrics``: a certificate naming one of ``--scrape-identity`` or the token of
``--scrape-token-file`` (an operator credential works there too). A node's credentials never
read: they are refused with PERMISSION_DENIED, no credential at all with UNAUTHENTICATED.

When no client credential is configured at all (no client CA, no token file), nothing is
asked of anyone: the collector then listens on loopback only (or plaintext by --insecure), as
it always did. gRPC health and ``/healthz`` stay open in every setup: they say only whether the
collector serves.

The name a certificate gives (RFC 6125): its DNS and URI subject alternative names when it has
any, and its common name only when it has none.
"""

from __future__ import annotations

import enum
import hmac
import ipaddress
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import grpc
import structlog

from nodeagent.core.transport.channel import ClientSecurity, parse_target, read_token

if TYPE_CHECKING:
    import ssl  # imported where HTTPS is configured: OpenSSL is megabytes resident

log = structlog.get_logger("nodeagent.security")


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
    # The reader roles: certificate names (mutual TLS) and token files.
    operator_identities: tuple[str, ...] = ()
    operator_token_file: Path | None = None
    scrape_identities: tuple[str, ...] = ()
    scrape_token_file: Path | None = None
    # Node tokens of tenants (``[tenants]`` of collector.toml): each streams like the node token.
    tenant_token_files: tuple[Path, ...] = ()

    @property
    def tls(self) -> bool:
        return self.cert_file is not None

    @property
    def mutual(self) -> bool:
        return self.client_ca_file is not None

    @property
    def client_auth(self) -> bool:
        """Some client credential is configured: then every reader must present its own."""
        tokens = (self.token_file, self.operator_token_file, self.scrape_token_file, *self.tenant_token_files)
        return self.mutual or any(path is not None for path in tokens)

    def check(self, listen_host: str) -> list[str]:
        """Raise for an unusable setup; return warnings to log."""
        if (self.cert_file is None) != (self.key_file is None):
            raise SecurityConfigError("--tls-cert and --tls-key go together")
        if self.client_ca_file is not None and not self.tls:
            raise SecurityConfigError("--tls-client-ca needs --tls-cert and --tls-key")
        identities = {"--operator-identity": self.operator_identities, "--scrape-identity": self.scrape_identities}
        for flag, names in identities.items():
            if names and not self.mutual:
                raise SecurityConfigError(f"{flag} needs --tls-client-ca (names are read from client certificates)")
        token_files = {
            "--token-file": self.token_file, "--operator-token-file": self.operator_token_file,
            "--scrape-token-file": self.scrape_token_file,
        }  # fmt: skip
        for path in (
            self.cert_file, self.key_file, self.client_ca_file, *token_files.values(), *self.tenant_token_files,
        ):  # fmt: skip
            if path is not None and not path.is_file():
                raise SecurityConfigError(f"{path}: no such file")
        if self.cert_file is not None and self.key_file is not None:
            check_key_pair(self.cert_file, self.key_file, self.client_ca_file)
        self._check_tokens(token_files)
        warnings = []
        if self.client_auth and not (self.operator_identities or self.operator_token_file):
            warnings.append(
                "client credentials are configured but no operator (--operator-identity, --operator-token-file): "
                "every query is refused"
            )
        if self.tls or is_loopback(listen_host):
            return warnings
        if not self.insecure:
            raise SecurityConfigError(
                f"refusing plaintext on non-loopback address {listen_host}: give --tls-cert/--tls-key, or --insecure"
            )
        return [*warnings, f"serving plaintext on {listen_host} (--insecure): anyone who can reach it can send reports"]

    def _check_tokens(self, token_files: Mapping[str, Path | None]) -> None:
        """A reader's token is none of the nodes' (the node token, a tenant's), and no tenant's is the node token."""
        tokens = {flag: read_token(path) for flag, path in token_files.items() if path is not None}
        node_token = tokens.pop("--token-file", None)
        tenant_tokens = {read_token(path) for path in self.tenant_token_files}
        if node_token in tenant_tokens:
            raise SecurityConfigError("a tenant's token ([tenants]) is the node token (--token-file): give it its own")
        for flag, token in tokens.items():
            if token == node_token or token in tenant_tokens:
                which = "the node token (--token-file)" if token == node_token else "a tenant's node token ([tenants])"
                raise SecurityConfigError(f"{flag} holds {which}: a reader needs its own token")

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

        With mutual TLS a client certificate is asked for but not required: a scraper proves
        itself with one (checked against the client CA only, not the system's CAs), while a
        kubelet probe of /healthz presents none. ``/metrics`` then checks who it is.
        """
        if self.cert_file is None or self.key_file is None:
            return None
        import ssl  # noqa: PLC0415  (OpenSSL only where HTTPS is configured)

        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if self.client_ca_file is not None:
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(cafile=str(self.client_ca_file))
        return context

    def token(self) -> str | None:
        return read_token(self.token_file) if self.token_file is not None else None

    def node_tokens(self) -> tuple[str, ...]:
        """Every token a node may stream with: the node token and the tenants'; () asks none."""
        paths = (self.token_file, *self.tenant_token_files) if self.token_file else self.tenant_token_files
        return tuple(read_token(path) for path in paths)


def check_key_pair(
    cert_file: Path, key_file: Path, ca_file: Path | None = None, *, ca_flag: str = "--tls-client-ca"
) -> None:
    """``SecurityConfigError`` with the reason in one line when the certificate and key do not
    make a pair, or a file is not what its flag says (``ca_flag``: the CA's, ``--tls-ca`` for a
    client): gRPC would only fail to bind the port, or a client retry its handshake for ever."""
    import ssl  # noqa: PLC0415  (OpenSSL only where TLS is configured)

    for flag, path, marker, what in (
        ("--tls-cert", cert_file, "-----BEGIN CERTIFICATE-----", "PEM certificate"),
        ("--tls-key", key_file, "PRIVATE KEY-----", "PEM private key"),
        (ca_flag, ca_file, "-----BEGIN CERTIFICATE-----", "PEM CA certificate"),
    ):
        if path is None:
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError as err:
            raise SecurityConfigError(f"{flag} {path}: cannot read: {err.strerror or err}") from err
        if marker not in text:
            raise SecurityConfigError(f"{flag} {path}: not a {what}")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(cert_file, key_file)
    except ssl.SSLError as err:
        if "KEY_VALUES_MISMATCH" in str(err.reason or err):
            raise SecurityConfigError(
                f"--tls-key {key_file} is not the key of --tls-cert {cert_file} (they do not make a pair)"
            ) from err
        raise SecurityConfigError(f"--tls-cert {cert_file} with --tls-key {key_file}: unusable ({err})") from err
    if ca_file is not None:
        try:
            context.load_verify_locations(cafile=str(ca_file))
        except ssl.SSLError as err:
            raise SecurityConfigError(f"{ca_flag} {ca_file}: unusable ({err})") from err


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def peer_source(peer: str) -> str:
    """The address of a gRPC peer without its port: ``ipv4:10.0.0.7:5123`` -> ``ipv4:10.0.0.7``."""
    if peer.startswith(("ipv4:", "ipv6:")):
        return peer.rpartition(":")[0]
    return peer  # unix sockets and the like: the whole name


def token_ok(expected: Sequence[str], metadata: Iterable[tuple[str, str | bytes]] | None) -> bool:
    """The caller sent one of ``expected`` as its bearer token (any caller passes when it is empty)."""
    if not expected:
        return True
    for key, value in metadata or ():
        if key == "authorization" and isinstance(value, str):
            scheme, _, given = value.partition(" ")
            # Every token compared, in constant time each: which one matched is not timed.
            matched = [hmac.compare_digest(given.encode(), token.encode()) for token in expected]
            return scheme.lower() == "bearer" and any(matched)
    return False


def presented_token(metadata: Iterable[tuple[str, str | bytes]] | None) -> str | None:
    """The bearer token a caller sent; ``""`` for an authorization that is not a bearer token."""
    for key, value in metadata or ():
        if key == "authorization":
            scheme, _, given = (value if isinstance(value, str) else "").partition(" ")
            return given.strip() if scheme.lower() == "bearer" else ""
    return None


def certificate_names(auth_context: Mapping[str, Iterable[bytes]]) -> frozenset[str]:
    """The names a gRPC peer's certificate gives: DNS and URI SANs; the common name only without them."""
    sans = [*auth_context.get("peer_dns", []), *auth_context.get("peer_uri", [])]
    chosen = sans or list(auth_context.get("x509_common_name", []))
    return frozenset(v.decode(errors="replace") for v in chosen)


def http_certificate_names(peer: Mapping[str, Any] | None) -> frozenset[str]:
    """The same rule over ``ssl.SSLSocket.getpeercert()`` (empty: no verified certificate)."""
    if not peer:
        return frozenset()
    sans = [value for kind, value in peer.get("subjectAltName", ()) if kind in ("DNS", "URI")]
    if sans:
        return frozenset(sans)
    return frozenset(value for rdn in peer.get("subject", ()) for key, value in rdn if key == "commonName")


class Access(enum.Enum):
    ALLOWED = "allowed"
    UNAUTHENTICATED = "unauthenticated"  # no credential, or a wrong one
    DENIED = "permission denied"  # a real credential of a role that may not do this


@dataclass(frozen=True, slots=True)
class Decision:
    access: Access
    detail: str = ""


_ALLOWED = Decision(Access.ALLOWED)


class AccessPolicy:
    """Who may read: the operator role (queries, reflection) and the scraper role (/metrics).

    Tokens are read once, at start, like the node token."""

    def __init__(self, security: ServerSecurity) -> None:
        self.enabled = security.client_auth
        self.node_tokens = security.node_tokens()
        self.operator_token = _token(security.operator_token_file)
        self.scrape_token = _token(security.scrape_token_file)
        self.operator_names = frozenset(security.operator_identities)
        self.scrape_names = frozenset(security.scrape_identities)

    def is_reader(self, names: frozenset[str]) -> bool:
        """A certificate of a reader role: it may not stream reports."""
        return bool(names & (self.operator_names | self.scrape_names))

    def query(self, token: str | None, names: frozenset[str]) -> Decision:
        """The Query service and reflection: operators only."""
        return self._decide(token, names, [self.operator_token], self.operator_names, "an operator")

    def scrape(self, token: str | None, names: frozenset[str]) -> Decision:
        """``/metrics``: scrapers and operators."""
        return self._decide(
            token, names, [self.scrape_token, self.operator_token], self.scrape_names | self.operator_names,
            "a scraper or operator",
        )  # fmt: skip

    def http_guard(
        self, operator_paths: Container[str] = ()
    ) -> Callable[[str | None, dict[str, Any] | None, str], tuple[int, str] | None]:
        """The HTTP listener's guard (``MetricsHttpServer``'s ``Guard``): ``/metrics`` and the pages
        for scrapers and operators, ``operator_paths`` (the money: prices and costs) for operators."""

        def guard(token: str | None, peer: dict[str, Any] | None, path: str) -> tuple[int, str] | None:
            return self.http_scrape(token, peer, operators_only=path in operator_paths)

        return guard

    def http_scrape(
        self, token: str | None, peer: dict[str, Any] | None, *, operators_only: bool = False
    ) -> tuple[int, str] | None:
        """None to serve, else (401 or 403, why)."""
        names = http_certificate_names(peer)
        decision = self.query(token, names) if operators_only else self.scrape(token, names)
        if decision.access is Access.ALLOWED:
            return None
        return (401 if decision.access is Access.UNAUTHENTICATED else 403), decision.detail

    def _decide(
        self, token: str | None, names: frozenset[str], tokens: list[str | None], allowed: frozenset[str], role: str
    ) -> Decision:
        if not self.enabled:
            return _ALLOWED
        if token is not None:
            if any(_same(token, t) for t in tokens):
                return _ALLOWED
            if not any(_same(token, t) for t in (*self.node_tokens, self.operator_token, self.scrape_token)):
                return Decision(Access.UNAUTHENTICATED, "wrong bearer token")
        if names & allowed:
            return _ALLOWED
        if token is None and not names:
            return Decision(Access.UNAUTHENTICATED, f"needs the credential of {role}")
        # A real credential of another role (a node's, most often): known, and not allowed this.
        given = f"client certificate {sorted(names)}" if names else "this bearer token"
        return Decision(Access.DENIED, f"{given} is not {role}'s credential")


def _token(path: Path | None) -> str | None:
    return read_token(path) if path is not None else None


def _same(given: str, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given.encode(), expected.encode())


def check_token_transport(targets: Iterable[str], security: ClientSecurity, *, insecure: bool) -> None:
    """A bearer token goes in plaintext only to loopback, or with ``--insecure`` (then with a warning).

    ``ValueError`` naming the first other target."""
    if security.token_file is None or security.tls:
        return
    exposed = [target for target in targets if not is_loopback(parse_target(target)[0])]
    if not exposed:
        return
    if not insecure:
        raise ValueError(
            f"refusing to send the bearer token in plaintext to {exposed[0]}: give --tls-ca (TLS), or --insecure"
        )
    log.warning("sending the bearer token without TLS (--insecure): anyone on the path can read it", collectors=exposed)
