"""``nodeagent-collector``: the collector's command line.

Errors are one line on stderr naming the bad value, exit status 2.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import sys
from pathlib import Path
from typing import NoReturn

import click
import structlog

from nodeagent import __version__
from nodeagent.collector.cli.client import client_options, query
from nodeagent.collector.cli.history import history as history_command
from nodeagent.collector.cli.history import jobs as jobs_command
from nodeagent.collector.cli.replay import replay
from nodeagent.collector.config import TABLES, CollectorConfigError, effective_sections, load_collector_config
from nodeagent.collector.history.rollup import DEFAULT_REPORTS_SECONDS, DEFAULT_RETENTION_SECONDS, HistoryConfig
from nodeagent.collector.ingest.node_state import DEFAULT_MAX_NODES
from nodeagent.collector.ingest.server import (
    DEFAULT_HELLO_TIMEOUT_SECONDS,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MAX_STREAMS_PER_SOURCE,
    CollectorServer,
    HttpListenError,
    ServerConfig,
)
from nodeagent.collector.remote_write.config import (
    DEFAULT_BATCH_SAMPLES,
    DEFAULT_QUEUE_SAMPLES,
    DEFAULT_RESOLUTION_SECONDS,
    RemoteWriteConfig,
    RemoteWriteConfigError,
)
from nodeagent.collector.store.database import default_db_path
from nodeagent.collector.views.fleet_table import alert_rows, iso_time, node_rows, render_fleet
from nodeagent.core.program.command_line import run_cli
from nodeagent.core.program.log import configure_logging
from nodeagent.core.settings.framework import ConfiguredGroup, Layout
from nodeagent.core.settings.show import config_command
from nodeagent.core.transport.channel import parse_target
from nodeagent.core.transport.security import SecurityConfigError, ServerSecurity
from nodeagent.tools.demo import DemoPlan, run_demo
from nodeagent.tools.loadgen import LoadSpec, run_load
from nodeagent.tools.simulator import SCENARIOS

log = structlog.get_logger("nodeagent.collector")

DEFAULT_LISTEN = "127.0.0.1:50051"
DEFAULT_HTTP_LISTEN = "127.0.0.1:9477"

# collector.toml: `serve`'s flags at the top level, other commands in [command.NAME], and the
# [alerts], [detector] and [sinks] tables (the flags that override [sinks] are written there).
COLLECTOR_LAYOUT = Layout(
    default_file=Path("/etc/nodeagent/collector.toml"),
    service="serve",
    sections=frozenset(TABLES),
    check_sections=effective_sections,
    file_forms={"alertmanager_url": "sinks", "webhook_url": "sinks"},
)


@click.group(cls=ConfiguredGroup, layout=COLLECTOR_LAYOUT, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="nodeagent-collector")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
    help="Least severe log level on stderr.",
)  # fmt: skip
def cli(log_level: str) -> None:
    """Fleet collector for nodeagent reports."""
    configure_logging(log_level)


def _listen(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
    try:
        parse_target(value, any_port=True)
    except ValueError as err:
        raise click.BadParameter(str(err)) from err
    return value


@cli.command()
@click.option("--listen", default=DEFAULT_LISTEN, show_default=True, callback=_listen, help="gRPC address (HOST:PORT).")
@click.option(
    "--http-listen", default=DEFAULT_HTTP_LISTEN, show_default=True, callback=_listen,
    help="HTTP address of /metrics and /healthz (HOST:PORT; HTTPS with --tls-cert).",
)  # fmt: skip
@click.option(
    "--db",
    "db_path",
    type=click.Path(path_type=Path, dir_okay=False),
    default=None,
    help=(
        "SQLite file (default: collector.db in the state directory: $STATE_DIRECTORY, else "
        "/var/lib/nodeagent as root, else $XDG_STATE_HOME/nodeagent)."
    ),
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
    "--hello-timeout-seconds", type=click.FloatRange(min=0.1, max=600.0), default=DEFAULT_HELLO_TIMEOUT_SECONDS,
    show_default=True, help="A stream that has not said hello by then is closed (DEADLINE_EXCEEDED).",
)  # fmt: skip
@click.option(
    "--max-streams-per-source", type=click.IntRange(min=1, max=1_000_000), default=DEFAULT_MAX_STREAMS_PER_SOURCE,
    show_default=True, help="Streams one peer address may hold at once; more are refused (RESOURCE_EXHAUSTED).",
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
def serve(
    listen: str,
    http_listen: str,
    db_path: Path | None,
    insecure: bool,
    tls_cert: Path | None,
    tls_key: Path | None,
    tls_client_ca: Path | None,
    token_file: Path | None,
    operator_identities: tuple[str, ...],
    operator_token_file: Path | None,
    scrape_identities: tuple[str, ...],
    scrape_token_file: Path | None,
    max_message_bytes: int,
    flush_seconds: float,
    max_nodes: int,
    hello_timeout_seconds: float,
    max_streams_per_source: int,
    history: bool,
    history_reports_seconds: float,
    history_retention_seconds: float,
    remote_write_urls: tuple[str, ...],
    remote_write_resolution_seconds: float,
    remote_write_queue_samples: int,
    remote_write_bearer_token_file: Path | None,
    remote_write_basic_auth_user: str,
    remote_write_basic_auth_password_file: Path | None,
    remote_write_tls_ca: Path | None,
    remote_write_tls_cert: Path | None,
    remote_write_tls_key: Path | None,
    config_path: Path | None,
    alertmanager_url: str | None,
    webhook_url: str | None,
) -> None:
    """Receive agent streams, store what they say, answer queries."""
    security = ServerSecurity(
        cert_file=tls_cert, key_file=tls_key, client_ca_file=tls_client_ca, token_file=token_file, insecure=insecure,
        operator_identities=operator_identities, operator_token_file=operator_token_file,
        scrape_identities=scrape_identities, scrape_token_file=scrape_token_file,
    )  # fmt: skip
    host, _port = parse_target(listen, any_port=True)
    http_host, _port = parse_target(http_listen, any_port=True)
    try:
        warnings = security.check(host)
    except (SecurityConfigError, ValueError) as err:
        raise click.UsageError(str(err)) from err
    try:
        http_warnings = [w.replace("plaintext", "plain HTTP", 1) for w in security.check(http_host)]
        warnings += [w for w in http_warnings if w not in warnings]  # the role warnings once, not per listener
    except SecurityConfigError as err:
        raise click.BadParameter(str(err), param_hint="--http-listen") from err
    remote_write = tuple(
        RemoteWriteConfig(
            url, resolution_seconds=remote_write_resolution_seconds, queue_samples=remote_write_queue_samples,
            bearer_token_file=remote_write_bearer_token_file, basic_auth_user=remote_write_basic_auth_user,
            basic_auth_password_file=remote_write_basic_auth_password_file, tls_ca=remote_write_tls_ca,
            tls_cert=remote_write_tls_cert, tls_key=remote_write_tls_key,
        )
        for url in remote_write_urls
    )  # fmt: skip
    for rw in remote_write:
        try:
            rw.check()
        except RemoteWriteConfigError as err:
            raise click.BadParameter(str(err), param_hint="--remote-write-url") from err
    overrides = {k: v for k, v in (("alertmanager_url", alertmanager_url), ("webhook_url", webhook_url)) if v}
    try:
        settings = load_collector_config(config_path, sink_overrides=overrides)
    except CollectorConfigError as err:
        raise click.UsageError(str(err)) from err
    for warning in warnings:
        log.warning(warning)
    if db_path is None:
        db_path = default_db_path()
        try:
            db_path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise click.BadParameter(f"cannot create {db_path.parent}: {err.strerror}", param_hint="--db") from err
    if db_path.parent and not db_path.parent.is_dir():
        raise click.BadParameter(f"{db_path.parent}: no such directory", param_hint="--db")
    config = ServerConfig(
        listen=listen, db_path=db_path, security=security, max_message_bytes=max_message_bytes,
        flush_seconds=flush_seconds, settings=settings, http_listen=http_listen, max_nodes=max_nodes,
        hello_timeout_seconds=hello_timeout_seconds, max_streams_per_source=max_streams_per_source,
        history=HistoryConfig(history_reports_seconds, history_retention_seconds, enabled=history),
        remote_write=remote_write,
    )  # fmt: skip
    asyncio.run(_serve(config))


def _bind_error(listen: str) -> str:
    """Why gRPC could not bind ``listen``: it says only "Failed to bind", so ask the OS."""
    host, port = parse_target(listen, any_port=True)
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
    except OSError as err:
        return str(err.strerror or err)
    for family, kind, proto, _name, address in infos:
        with socket.socket(family, kind, proto) as probe:
            try:
                probe.bind(address)
            except OSError as err:
                return str(err.strerror or err).lower()
    return "gRPC could not bind it"


async def _serve(config: ServerConfig) -> None:
    server = CollectorServer(config)
    try:
        port = await server.start()
    except HttpListenError as err:
        raise click.ClickException(str(err)) from err
    except RuntimeError as err:
        raise click.ClickException(f"cannot listen on {config.listen}: {_bind_error(config.listen)}") from err
    host, _ = parse_target(config.listen, any_port=True)
    # One plain line on stdout, so scripts and tests learn the port when --listen asked for :0.
    click.echo(f"listening on {host}:{port}", err=False)
    http = server.http.address if server.http is not None else None
    if http is not None:
        click.echo(f"http on {http}", err=False)
    click.echo(f"database {config.db_path}", err=False)
    sys.stdout.flush()
    log.info("collector serving", listen=f"{host}:{port}", http=http, db=str(config.db_path), tls=config.security.tls)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    waiter = asyncio.create_task(server.wait())
    stopper = asyncio.create_task(stop.wait())
    await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
    log.info("collector stopping")
    await server.stop()
    for task in (waiter, stopper):
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@cli.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
def nodes(as_json: bool, **options: object) -> None:
    """The nodes a running collector knows."""
    response = query(options, "ListNodes")
    rows = node_rows(response)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    click.echo(render_fleet(rows))


@cli.command()
@client_options
@click.option("--json", "as_json", is_flag=True, help="JSON instead of a table.")
@click.option("--all", "include_resolved", is_flag=True, help="Recently resolved alerts too.")
def alerts(as_json: bool, include_resolved: bool, **options: object) -> None:
    """The alerts of a running collector: firing ones (and, with --all, recently resolved)."""
    response = query(options, "ListAlerts", include_resolved=include_resolved)
    rows = alert_rows(response)
    if as_json:
        click.echo(json.dumps(rows, indent=2))
        return
    if not rows:
        click.echo("no alerts" if include_resolved else "no firing alerts")
        return
    click.echo(f"{'ALERT':<20} {'NODE':<20} {'SEVERITY':<9} {'STATE':<9} {'SINCE':<20} SUMMARY")
    for row in rows:
        annotations: dict[str, str] = row["annotations"]
        summary = annotations.get("summary", "")
        click.echo(
            f"{row['name']!s:<20} {row['node_id']!s:<20} {row['severity']!s:<9} {row['state']!s:<9} "
            f"{iso_time(float(str(row['starts_at']))):<20} {summary}"
        )


@cli.command()
@click.option("--collector", default=DEFAULT_LISTEN, show_default=True, help="Collector HOST:PORT.")
@click.option("--nodes", type=click.IntRange(min=1, max=100_000), required=True, help="Simulated 8-GPU nodes.")
@click.option(
    "--rate", type=click.FloatRange(min=0.01, max=100.0), default=1.0, show_default=True, help="Reports/s/node."
)
@click.option("--duration", type=click.FloatRange(min=1.0), default=10.0, show_default=True, help="Seconds of load.")
@click.option(
    "--processes", type=click.IntRange(min=1, max=64), default=2, show_default=True,
    help="Load generator processes the nodes are spread over.",
)  # fmt: skip
@click.option("--scenario", default="healthy", show_default=True, help="Simulator scenario of every node.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of a summary line.")
def loadgen(
    collector: str, nodes: int, rate: float, duration: float, processes: int, scenario: str, as_json: bool
) -> None:
    """Stream simulated nodes to a collector over real gRPC and say what it took."""
    try:
        parse_target(collector)
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--collector") from err
    if scenario not in SCENARIOS:
        raise click.BadParameter(
            f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})", param_hint="--scenario"
        )
    spec = LoadSpec(
        target=collector, nodes=nodes, rate_hz=rate, duration_seconds=duration, processes=processes, scenario=scenario
    )
    result = run_load(spec).to_plain()
    if as_json:
        click.echo(json.dumps(result))
        return
    click.echo(
        f"{result['nodes']} nodes, {result['seconds']:.0f} s: "
        f"sent {result['sent']} ({result['sent_per_second']:.0f}/s), "
        f"acked {result['acked']} ({result['acked_per_second']:.0f}/s), {result['bytes_per_report']:.0f} B/report, "
        f"{result['streams_failed']} streams failed, {result['streams_reopened']} reopened"
    )


cli.add_command(replay)
cli.add_command(history_command)
cli.add_command(jobs_command)
cli.add_command(config_command)


@cli.command()
@click.option(
    "--seconds",
    type=click.FloatRange(min=5.0, max=600.0),
    default=25.0,
    show_default=True,
    help="How long to watch the fleet.",
)
@click.option(
    "--time-scale",
    type=click.FloatRange(min=1.0, max=1000.0),
    default=30.0,
    show_default=True,
    help="Simulated seconds per wall-clock second on the simulated rentals.",
)
@click.option(
    "--no-wait", is_flag=True, help="Stop at once after the report instead of keeping the fleet page up until Enter."
)
def demo(seconds: float, time_scale: float, no_wait: bool) -> None:
    """A collector, this machine's agent and two simulated 8-GPU rentals: what nodeagent finds."""
    run_demo(DemoPlan(seconds=seconds, time_scale=time_scale, wait=not no_wait))


def main() -> NoReturn:
    sys.exit(run_cli(cli, "nodeagent-collector"))
