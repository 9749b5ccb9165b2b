"""``[fleet]`` of ``collector.toml``: the collectors of the fleet, and how to reach them.

``collectors`` is every collector of the fleet, the same list on every machine (as the agents'
``--collector`` list): a collector leaves itself out (``others``), the query commands ask them
all. The TLS and token keys are the operator's credentials for the others' query service (the
``Page`` RPC is operators only); ``timeout_seconds`` bounds the fleet page's wait for each.
"""

from __future__ import annotations

import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from nodeagent.collector.fleet.fanout import Shard
from nodeagent.core.settings.tables import check_table
from nodeagent.core.transport.channel import ClientSecurity, parse_target
from nodeagent.core.transport.security import check_token_transport

DEFAULT_TIMEOUT_SECONDS = 2.0

FLEET_KEYS: dict[str, tuple[type, object]] = {
    "collectors": (object, []),
    "timeout_seconds": (float, DEFAULT_TIMEOUT_SECONDS),
    "tls_ca": (str, ""),
    "tls_cert": (str, ""),
    "tls_key": (str, ""),
    "tls_server_name": (str, ""),
    "token_file": (str, ""),
    "insecure": (bool, False),
}


class FleetConfigError(ValueError):
    """One line naming the file and the key."""


@dataclass(frozen=True, slots=True)
class FleetConfig:
    collectors: tuple[str, ...] = ()
    timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS
    security: ClientSecurity = field(default_factory=ClientSecurity)
    insecure: bool = False
    source: str = "<defaults>"

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any], *, source: str) -> FleetConfig:
        values = check_table(raw, FLEET_KEYS, source=source, table="fleet", error=FleetConfigError)
        where = f"{source}: fleet"
        collectors = values["collectors"]
        if not isinstance(collectors, list) or not all(isinstance(c, str) for c in collectors):
            raise FleetConfigError(f"{where}.collectors: expected a list of HOST:PORT strings, got {collectors!r}")
        if values["timeout_seconds"] <= 0:
            raise FleetConfigError(
                f"{where}.timeout_seconds: expected a number above 0, got {values['timeout_seconds']!r}"
            )

        def path(key: str) -> Path | None:
            return Path(values[key]) if values[key] else None

        security = ClientSecurity(
            ca_file=path("tls_ca"), cert_file=path("tls_cert"), key_file=path("tls_key"),
            token_file=path("token_file"), server_name=values["tls_server_name"] or None,
        )  # fmt: skip
        try:
            for target in collectors:
                parse_target(target)
            check_token_transport(collectors, security, insecure=values["insecure"])
        except ValueError as err:
            raise FleetConfigError(f"{where}: {err}") from err
        return cls(tuple(dict.fromkeys(collectors)), values["timeout_seconds"], security, values["insecure"], source)

    def check(self) -> None:
        """The files it names can be read (at start-up, not when the file is shown):
        ``FleetConfigError`` naming the first that cannot."""
        if not self.collectors:
            return
        try:
            self.security.check()
        except ValueError as err:
            raise FleetConfigError(f"{self.source}: fleet: {err}") from err

    def to_plain(self) -> dict[str, Any]:
        """The table with every key, as ``config show`` prints it."""
        s = self.security
        return {
            "collectors": list(self.collectors), "timeout_seconds": self.timeout_seconds,
            "tls_ca": str(s.ca_file or ""), "tls_cert": str(s.cert_file or ""), "tls_key": str(s.key_file or ""),
            "tls_server_name": s.server_name or "", "token_file": str(s.token_file or ""), "insecure": self.insecure,
        }  # fmt: skip

    def shards(self, targets: tuple[str, ...] | None = None) -> list[Shard]:
        return [Shard(t, t, self.security) for t in (self.collectors if targets is None else targets)]

    def others(self, listen: str, port: int) -> tuple[str, ...]:
        """The collectors of the list that are not this one (listening on ``listen``, bound to ``port``)."""
        return tuple(t for t in self.collectors if not is_this_collector(t, listen, port))


def is_this_collector(target: str, listen: str, port: int) -> bool:
    """``target`` names this collector: it is its ``--listen`` as written, or its port on a host
    that resolves to the address it listens on (any address of this machine for a wildcard)."""
    if target == listen:
        return True
    host, target_port = parse_target(target)
    if target_port != port:
        return False
    listen_host = parse_target(listen, any_port=True)[0]
    reached = _addresses(host)
    if listen_host in ("0.0.0.0", "::", ""):
        return any(_is_local(address) for address in reached)
    return bool(reached & _addresses(listen_host))


def _addresses(host: str) -> set[str]:
    try:
        return {str(info[4][0]) for info in socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)}
    except OSError:
        return set()


def _is_local(address: str) -> bool:
    """An address of this machine: a socket can bind it."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError:
        return False
    return True
