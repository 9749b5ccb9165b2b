"""``nodeagent-collector serve``: the collector itself. Its flags are the top-level keys of
collector.toml; it receives agent streams, stores them and answers queries until SIGTERM or SIGINT.

Only this command's modules load here: the daemon carries none of the demo's, the load
generator's or the query commands' (``tests/collector/cli/test_serve_imports.py``).
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import structlog

from nodeagent.collector.config import CollectorConfigError, load_collector_config
from nodeagent.collector.fleet.config import FleetConfigError
from nodeagent.collector.history.config import DEFAULT_REPORTS_SECONDS, DEFAULT_RETENTION_SECONDS, HistoryConfig
from nodeagent.collector.ingest.clock_bounds import (
    DEFAULT_MAX_CLOCK_AHEAD_SECONDS,
    DEFAULT_MAX_CLOCK_BEHIND_SECONDS,
    ClockBounds,
)
from nodeagent.collector.ingest.node_state import DEFAULT_MAX_NODES
from nodeagent.collector.ingest.retire import DEFAULT_RETIRE_AFTER_SECONDS
from nodeagent.collector.ingest.streams import DEFAULT_HELLO_TIMEOUT_SECONDS, DEFAULT_MAX_STREAMS_PER_SOURCE
from nodeagent.collector.query.bounds import DEFAULT_MAX_QUERIES_PER_CALLER, MAX_QUERIES_IN_FLIGHT, QueryBounds
from nodeagent.collector.remote_write.config import (
    DEFAULT_BATCH_SAMPLES,
    DEFAULT_HANDOVER_BYTES,
    DEFAULT_QUEUE_SAMPLES,
    DEFAULT_RESOLUTION_SECONDS,
    MIN_HANDOVER_BYTES,
    RemoteWriteConfig,
    RemoteWriteConfigError,
)
from nodeagent.collector.service.run import run_server
from nodeagent.collector.service.server_config import DEFAULT_MAX_MESSAGE_BYTES, ServerConfig
from nodeagent.collector.store.database import default_db_path
from nodeagent.core.transport.channel import parse_target
from nodeagent.core.transport.security import SecurityConfigError, ServerSecurity

log = structlog.get_logger("nodeagent.collector")

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_HTTP_LISTEN = "127.0.0.1:9477"


def _listen(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        parse_target(value, any_port=True)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    return value


@click.command()
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, callback=_listen, help="gRPC address (HOST:PORT).")
@click.option(
    "--http-listen", default=DEFAULT_HTTP_LISTEN, show_default=True, callback=_listen,
    help="HTTP address of the fleet page (/, /jobs, /alerts, /ledger), /metrics and /healthz "
    "(HOST:PORT; HTTPS with --tls-cert).",
)  # fmt: skip
@click.option(
    "--db",
    "db_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=(
        "SQLite file (default: collector.db in the state directory: $STATE_DIRECTORY, else "
        "/var/lib/nodeagent as root, else $XDG_STATE_HOME/nodeagent). With --workers N > 1 this is "
        "worker 0's, and worker i makes its own beside it (--db x.db: x.worker1.db, x.worker2.db, ...)."
    ),
)
@click.option(
    "--workers",
    type=click.IntRange(min=1, max=256),
    default=None,
    help="Worker processes (each with its own database and agent port) behind one front; default: the CPUs "
    "this process may use (1: a single collector process, no front and no worker ports; docs/collector.md#workers).",
)
@click.option(
    "--worker-ports",
    "worker_ports",
    type=click.IntRange(min=0, max=65535),
    default=None,
    help="Agent port of worker 0 (worker i: this + i; agents only, queries go to --listen); default: the first "
    "free ports above --listen's, passing over --http-listen's (0: ephemeral ports).",
)
@click.option("--insecure", is_flag=True, help="Allow plaintext on a non-loopback address.")
@click.option("--tls-cert", type=click.Path(path_type=Path), help="Server certificate (PEM).")
@click.option("--tls-key", type=click.Path(path_type=Path), help="Server private key (PEM).")
@click.option("--tls-client-ca", type=click.Path(path_type=Path), help="CA for client certificates: mutual TLS.")
@click.option("--token-file", type=click.Path(path_type=Path), help="File holding the bearer token agents must send.")
@click.option(
    "--operator-identity", "operator_identities", multiple=True, metavar="NAME",
    help="Client certificate name (DNS/URI SAN, else CN) that may query; repeatable; needs --tls-client-ca.",
)  # fmt: skip
@click.option(
    "--operator-token-file", type=click.Path(path_type=Path), help="File holding the bearer token that may query."
)
@click.option(
    "--scrape-identity", "scrape_identities", multiple=True, metavar="NAME",
    help="Client certificate name that may read /metrics; repeatable; needs --tls-client-ca.",
)  # fmt: skip
@click.option(
    "--scrape-token-file", type=click.Path(path_type=Path), help="File holding the bearer token that may read /metrics."
)
@click.option(
    "--max-message-bytes",
    type=click.IntRange(min=4096, max=64 * 1024 * 1024),
    default=DEFAULT_MAX_MESSAGE_BYTES,
    show_default=True,
    help="Largest gRPC message accepted or sent; a bigger report closes its stream (RESOURCE_EXHAUSTED).",
)
@click.option(
    "--flush-seconds", type=click.FloatRange(min=0.001, max=5.0), default=0.05, show_default=True,
    help="How often received reports are committed to the database and acknowledged.",
)  # fmt: skip
@click.option(
    "--max-nodes", type=click.IntRange(min=1, max=10_000_000), default=DEFAULT_MAX_NODES, show_default=True,
    help="Nodes this collector holds; a stream of a node beyond them is refused (RESOURCE_EXHAUSTED).",
)  # fmt: skip
@click.option(
    "--retire-after-seconds", type=click.FloatRange(min=0.0, max=3650 * 86400.0),
    default=DEFAULT_RETIRE_AFTER_SECONDS, show_default=True,
    help="A node silent this long (no stream open) is retired: forgotten as by `forget`, freeing its "
    "--max-nodes slot (0: never).",
)  # fmt: skip
@click.option(
    "--max-clock-ahead-seconds", type=click.FloatRange(min=1.0), default=DEFAULT_MAX_CLOCK_AHEAD_SECONDS,
    show_default=True, help="A report whose time is further ahead of this collector's clock is acked, not stored.",
)  # fmt: skip
@click.option(
    "--max-clock-behind-seconds", type=click.FloatRange(min=1.0), default=DEFAULT_MAX_CLOCK_BEHIND_SECONDS,
    show_default=True, help="A report whose time is further behind is acked, not stored (keep it above the agents' "
    "--spool-max-age).",
)  # fmt: skip
@click.option(
    "--hello-timeout-seconds", type=click.FloatRange(min=0.1, max=600.0), default=DEFAULT_HELLO_TIMEOUT_SECONDS,
    show_default=True, help="A stream that has not said hello by then is closed (DEADLINE_EXCEEDED).",
)  # fmt: skip
@click.option(
    "--max-streams-per-source", type=click.IntRange(min=1, max=1_000_000), default=DEFAULT_MAX_STREAMS_PER_SOURCE,
    show_default=True, help="Streams one peer address may hold at once; more are refused (RESOURCE_EXHAUSTED).",
)  # fmt: skip
@click.option(
    "--max-queries-per-caller", type=click.IntRange(min=1, max=MAX_QUERIES_IN_FLIGHT),
    default=DEFAULT_MAX_QUERIES_PER_CALLER, show_default=True,
    help="Store queries (history, jobs, alerts) one caller may run at once; more are refused (RESOURCE_EXHAUSTED).",
)  # fmt: skip
@click.option(
    "--history/--no-history", default=True, show_default=True,
    help="Keep per-minute rows and recent reports in the store (docs/history.md).",
)  # fmt: skip
@click.option(
    "--history-reports-seconds", type=click.FloatRange(min=0.0, max=7 * 86400.0), default=DEFAULT_REPORTS_SECONDS,
    show_default=True, help="Seconds of full-resolution reports kept per node (0: none).",
)  # fmt: skip
@click.option(
    "--history-retention-seconds", type=click.FloatRange(min=60.0, max=3650 * 86400.0),
    default=DEFAULT_RETENTION_SECONDS, show_default=True, help="Seconds of per-minute rows kept per node.",
)  # fmt: skip
@click.option(
    "--remote-write-url", "remote_write_urls", multiple=True,
    help="Push every node's series to this Prometheus remote-write receiver (repeatable; docs/history.md).",
)  # fmt: skip
@click.option(
    "--remote-write-resolution-seconds", type=click.FloatRange(min=0.0, max=3600.0),
    default=DEFAULT_RESOLUTION_SECONDS, show_default=True,
    help="One sample per series every this many seconds of a node's reports (0: every report).",
)  # fmt: skip
@click.option(
    "--remote-write-queue-samples", type=click.IntRange(min=DEFAULT_BATCH_SAMPLES, max=1_000_000_000),
    default=DEFAULT_QUEUE_SAMPLES, show_default=True,
    help="Samples held per receiver while it is down or slow; beyond them the oldest are dropped (counted).",
)  # fmt: skip
@click.option(
    "--remote-write-handover-bytes", type=click.IntRange(min=MIN_HANDOVER_BYTES, max=1024 * 1024 * 1024),
    default=DEFAULT_HANDOVER_BYTES, show_default=True,
    help="What the remote-write process may fall behind by before reports are dropped (counted).",
)  # fmt: skip
@click.option(
    "--remote-write-bearer-token-file", type=click.Path(path_type=Path), help="Bearer token for the receiver."
)
@click.option("--remote-write-basic-auth-user", default="", help="Basic auth user for the receiver.")
@click.option("--remote-write-basic-auth-password-file", type=click.Path(path_type=Path), help="Its password.")
@click.option("--remote-write-tls-ca", type=click.Path(path_type=Path), help="CA of an https receiver's certificate.")
@click.option("--remote-write-tls-cert", type=click.Path(path_type=Path), help="Client certificate (mutual TLS).")
@click.option("--remote-write-tls-key", type=click.Path(path_type=Path), help="Client key (mutual TLS).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Collector configuration (TOML).")
@click.option("--alertmanager-url", help="Send alerts to this Alertmanager (base URL); overrides [sinks].")
@click.option("--webhook-url", help="POST alert transitions to this URL; overrides [sinks].")
def serve(**flags: Any) -> None:
    """Receive agent streams, store what they say, answer queries."""
    f = ServeFlags(**flags)
    config = server_config(f)
    workers = f.workers if f.workers is not None else len(os.sched_getaffinity(0))
    if workers == 1:
        asyncio.run(run_server(config))
        return
    from nodeagent.collector.workers.serve_front import run_front  # noqa: PLC0415  (N > 1 only)
    from nodeagent.collector.workers.worker_args import pick_worker_ports  # noqa: PLC0415

    try:
        ports = pick_worker_ports(f.listen, f.http_listen, workers, f.worker_ports)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--worker-ports") from err
    log_level = str(click.get_current_context().find_root().params.get("log_level") or "info")
    asyncio.run(run_front(config, workers, ports, log_level))


@dataclass(frozen=True, slots=True)
class ServeFlags:
    """``serve``'s flags as click hands them over, one field per option."""

    listen: str
    http_listen: str
    db_path: Path | None
    workers: int | None
    worker_ports: int | None
    insecure: bool
    tls_cert: Path | None
    tls_key: Path | None
    tls_client_ca: Path | None
    token_file: Path | None
    operator_identities: tuple[str, ...]
    operator_token_file: Path | None
    scrape_identities: tuple[str, ...]
    scrape_token_file: Path | None
    max_message_bytes: int
    flush_seconds: float
    max_nodes: int
    retire_after_seconds: float
    max_clock_ahead_seconds: float
    max_clock_behind_seconds: float
    hello_timeout_seconds: float
    max_streams_per_source: int
    max_queries_per_caller: int
    history: bool
    history_reports_seconds: float
    history_retention_seconds: float
    remote_write_urls: tuple[str, ...]
    remote_write_resolution_seconds: float
    remote_write_queue_samples: int
    remote_write_handover_bytes: int
    remote_write_bearer_token_file: Path | None
    remote_write_basic_auth_user: str
    remote_write_basic_auth_password_file: Path | None
    remote_write_tls_ca: Path | None
    remote_write_tls_cert: Path | None
    remote_write_tls_key: Path | None
    config_path: Path | None
    alertmanager_url: str | None
    webhook_url: str | None


def server_config(f: ServeFlags) -> ServerConfig:
    """The server's settings from the flags and the configuration file; ``click`` usage errors,
    in the order the flags are checked, for what is wrong."""
    overrides = {k: v for k, v in (("alertmanager_url", f.alertmanager_url), ("webhook_url", f.webhook_url)) if v}
    try:
        settings = load_collector_config(f.config_path, sink_overrides=overrides)
        settings.fleet.check()
    except (CollectorConfigError, FleetConfigError) as err:
        raise click.UsageError(str(err)) from err
    security, warnings = _server_security(f, settings.tenants.token_files)
    try:
        settings.tenants.read_tokens()  # the files exist: security checked them
    except ValueError as err:
        raise click.UsageError(f"{settings.source}: {err}") from err
    remote_write = _remote_write(f)
    for warning in warnings:
        log.warning(warning)
    return ServerConfig(
        listen=f.listen, db_path=_db_path(f.db_path), security=security, max_message_bytes=f.max_message_bytes,
        flush_seconds=f.flush_seconds, settings=settings, http_listen=f.http_listen, max_nodes=f.max_nodes,
        retire_after_seconds=f.retire_after_seconds,
        clock_bounds=ClockBounds(f.max_clock_ahead_seconds, f.max_clock_behind_seconds),
        hello_timeout_seconds=f.hello_timeout_seconds, max_streams_per_source=f.max_streams_per_source,
        history=HistoryConfig(f.history_reports_seconds, f.history_retention_seconds, enabled=f.history),
        remote_write=remote_write, query=QueryBounds(max_per_caller=f.max_queries_per_caller),
    )  # fmt: skip


def _server_security(f: ServeFlags, tenant_token_files: tuple[Path, ...]) -> tuple[ServerSecurity, list[str]]:
    """The TLS and credential flags (and the tenants' node tokens), checked for both listeners;
    the warnings to log."""
    security = ServerSecurity(
        cert_file=f.tls_cert, key_file=f.tls_key, client_ca_file=f.tls_client_ca, token_file=f.token_file,
        insecure=f.insecure, operator_identities=f.operator_identities, operator_token_file=f.operator_token_file,
        scrape_identities=f.scrape_identities, scrape_token_file=f.scrape_token_file,
        tenant_token_files=tenant_token_files,
    )  # fmt: skip
    host, _port = parse_target(f.listen, any_port=True)
    http_host, _port = parse_target(f.http_listen, any_port=True)
    try:
        warnings = security.check(host)
    except (SecurityConfigError, ValueError) as err:
        raise click.UsageError(str(err)) from err
    try:
        http_warnings = [w.replace("plaintext", "plain HTTP", 1) for w in security.check(http_host)]
        warnings += [w for w in http_warnings if w not in warnings]  # the role warnings once, not per listener
    except SecurityConfigError as err:
        raise click.BadParameter(str(err), param_hint="--http-listen") from err
    return security, warnings


def _remote_write(f: ServeFlags) -> tuple[RemoteWriteConfig, ...]:
    remote_write = tuple(
        RemoteWriteConfig(
            url, resolution_seconds=f.remote_write_resolution_seconds, queue_samples=f.remote_write_queue_samples,
            bearer_token_file=f.remote_write_bearer_token_file, basic_auth_user=f.remote_write_basic_auth_user,
            basic_auth_password_file=f.remote_write_basic_auth_password_file, tls_ca=f.remote_write_tls_ca,
            tls_cert=f.remote_write_tls_cert, tls_key=f.remote_write_tls_key,
            handover_bytes=f.remote_write_handover_bytes,
        )
        for url in f.remote_write_urls
    )  # fmt: skip
    for rw in remote_write:
        try:
            rw.check()
        except RemoteWriteConfigError as err:
            raise click.BadParameter(str(err), param_hint="--remote-write-url") from err
    return remote_write


def _db_path(db_path: Path | None) -> Path:
    """``--db``, or the default one with its directory made."""
    if db_path is None:
        db_path = default_db_path()
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise click.BadParameter(f"cannot create {db_path.parent}: {err.strerror}", param_hint="--db") from err
    if db_path.parent and not db_path.parent.is_dir():
        raise click.BadParameter(f"{db_path.parent}: no such directory", param_hint="--db")
    return db_path
