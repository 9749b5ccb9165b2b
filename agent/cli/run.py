"""``nodeagent run``: the daemon's command line. Its flags, their checks, and what a run prints.

The flags are checked here (one line and exit status 2 for a bad one), the spool is opened and
the source built (this machine's sources, or the simulator with ``--simulate``); the daemon
itself is ``agent/service/daemon.py``. ``--max-reports`` and ``--deadline`` make a run finite, for
tests and for checks of a delivery path: the agent stops sampling after N reports and exits 0
once all are acknowledged, 1 if the deadline passes first, after one JSON line saying what
became of every report.
"""

from __future__ import annotations

import json
import platform
import time
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
import structlog

from nodeagent.agent.cli.options import agent_config, enabled_sources, root_dir, source_flags, source_options
from nodeagent.agent.delivery.spool import DEFAULT_MAX_AGE_SECONDS, DEFAULT_MAX_BYTES, Spool
from nodeagent.agent.exposition.pod_resources import DEFAULT_SOCKET as DEFAULT_POD_RESOURCES_SOCKET
from nodeagent.agent.kernel.files import raise_open_file_limit
from nodeagent.agent.sampling.report_source import ReportSequence, ReportSource
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.service.daemon import DRAIN_SECONDS, DaemonSettings, MetricsListenError, Outcome, run_daemon
from nodeagent.agent.sources import Roots
from nodeagent.core.program.lock_file import LockedError
from nodeagent.core.program.malloc_arenas import limit_malloc_arenas
from nodeagent.core.transport.channel import ClientSecurity, parse_target
from nodeagent.core.transport.security import check_token_transport, is_loopback
from nodeagent.core.wire.identity import check_node_id

if TYPE_CHECKING:
    import ssl  # imported where HTTPS is configured: OpenSSL is megabytes resident

log = structlog.get_logger("nodeagent.run")

EXIT_UNDELIVERED = 1
# dcgm-exporter's port: a scrape config written for it keeps working when the agent replaces it.
DEFAULT_METRICS_PORT = 9400


def _targets(_ctx: click.Context, _param: click.Parameter, value: tuple[str, ...]) -> tuple[str, ...]:
    for target in value:
        try:
            parse_target(target)
        except ValueError as err:
            raise click.BadParameter(str(err)) from err
    return value


def _metrics_listen(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str | None:
    """``HOST:PORT``, or a bare ``HOST`` (``[V6]``) for dcgm-exporter's port, 9400."""
    if value is None:
        return None
    try:
        parse_target(value, any_port=True)
        return value
    except ValueError as err:
        with_port = f"{value}:{DEFAULT_METRICS_PORT}"
        if value.count(":") != 0 and not (value.startswith("[") and value.endswith("]")):
            raise click.BadParameter(str(err)) from err
        try:
            parse_target(with_port, any_port=True)
        except ValueError:
            raise click.BadParameter(str(err)) from err
        return with_port


def _check_metrics_listen(listen: str | None, *, insecure: bool, tls: bool = False) -> None:
    # The same stance as the collector's listeners: loopback, or TLS, unless the operator says otherwise.
    if listen is None:
        return
    host, _port = parse_target(listen, any_port=True)
    if is_loopback(host) or tls:
        return
    if not insecure:
        raise ValueError(
            f"refusing /metrics on non-loopback address {host} without --metrics-insecure"
            " (or --metrics-tls-cert/--metrics-tls-key for HTTPS)"
        )
    log.warning("serving /metrics on a non-loopback address over plain HTTP (--metrics-insecure)", listen=listen)


def _metrics_tls(cert: Path | None, key: Path | None) -> ssl.SSLContext | None:
    if cert is None and key is None:
        return None
    if cert is None or key is None:
        raise ValueError("--metrics-tls-cert and --metrics-tls-key go together")
    import ssl  # noqa: PLC0415  (OpenSSL only where HTTPS is configured)

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as err:
        raise ValueError(f"cannot load --metrics-tls-cert {cert} / --metrics-tls-key {key}: {err}") from err
    return context


def _node_id(_ctx: click.Context, _param: click.Parameter, value: str | None) -> str:
    try:
        return check_node_id(value if value is not None else platform.node())
    except ValueError as err:
        raise click.BadParameter(str(err)) from err


@click.command()
@click.option(
    "--collector", "collectors", multiple=True, required=True, callback=_targets, metavar="HOST:PORT",
    help="Collector to stream to; repeat for failover (picked by rendezvous hashing of the node id).",
)  # fmt: skip
@click.option("--node-id", callback=_node_id, help="Node identity (default: the host name).")
@click.option("--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds per report.")
@click.option("--spool-dir", type=click.Path(path_type=Path, file_okay=False), help="Keep unsent reports on disk here.")
@click.option(
    "--spool-max-bytes", type=click.IntRange(min=64 * 1024), default=DEFAULT_MAX_BYTES, show_default=True,
    help="Most bytes of unsent reports kept; past it the oldest are dropped (and counted).",
)  # fmt: skip
@click.option(
    "--spool-max-age", type=click.FloatRange(min=1.0), default=DEFAULT_MAX_AGE_SECONDS, show_default=True,
    help="Seconds a report may wait before it is dropped.",
)  # fmt: skip
@click.option(
    "--simulate", "scenario", metavar="SCENARIO",
    help="Simulated node instead of this machine's sources. Its GPU processes run a Slurm job of its own, a "
    "4-digit id made from --node-id (sim-1: job 6613, as jobs and ledger show it), unless --set job_key "
    "names its job (docs/jobs.md#a-simulated-job).",
)  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the simulation.")
@click.option(
    "--set", "overrides", multiple=True, metavar="NAME=VALUE",
    help="With --simulate: a simulation parameter, e.g. job_key=torch/run-1 (docs/detector.md). Repeatable.",
)  # fmt: skip
@click.option(
    "--time-scale", type=click.FloatRange(min=0.01, max=10_000), default=1.0, show_default=True,
    help="With --simulate: simulated seconds per wall-clock second (a demo can show an hour in a minute); "
    "the simulated clock starts in the past so that it never runs ahead of the wall clock.",
)  # fmt: skip
@click.option(
    "--time-scale-seconds", type=click.FloatRange(min=1.0),
    help="With --time-scale: wall-clock seconds the sped-up run lasts; its clock starts that far back, times the "
    "scale, and runs at 1x once it reaches now (default: --deadline, else --max-reports intervals, else 120).",
)  # fmt: skip
@click.option(
    "--time-scale-anchor", type=float, metavar="UNIX_SECONDS",
    help="With --time-scale: the wall-clock moment the simulated clock meets the wall clock (a sped-up run's "
    "end, instead of --time-scale-seconds from its start). Nodes of one simulated job given the same scale and "
    "anchor read the same time at the same moment, which the collector needs to compare them (docs/jobs.md).",
)  # fmt: skip
@click.option("--max-reports", type=click.IntRange(min=1), help="Stop after N reports; exit 0 once all are acked.")
@click.option(
    "--deadline", type=click.FloatRange(min=0.1), help="Seconds to run at most (exit 1 if reports are unacked)."
)
@click.option("--procfs", default="/proc", show_default=True, callback=root_dir("--procfs"), help="procfs root.")
@click.option("--sysfs", default="/sys", show_default=True, callback=root_dir("--sysfs"), help="sysfs root.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Agent configuration (TOML).")
@click.option("--link-speed", multiple=True, metavar="IFACE=RATE", help="Link speed of an interface, e.g. eth0=50G.")
@click.option("--tls-ca", type=click.Path(path_type=Path), help="CA of the collector's certificate: use TLS.")
@click.option("--tls-cert", type=click.Path(path_type=Path), help="Client certificate naming this node (mutual TLS).")
@click.option("--tls-key", type=click.Path(path_type=Path), help="Client private key (mutual TLS).")
@click.option("--tls-server-name", help="Name to check the collector's certificate against.")
@click.option("--token-file", type=click.Path(path_type=Path), help="File holding the collector's bearer token.")
@click.option(
    "--insecure", is_flag=True,
    help="Send the bearer token to a non-loopback collector without TLS (logs a warning; a trusted network only).",
)  # fmt: skip
@click.option(
    "--metrics-listen", callback=_metrics_listen, metavar="HOST:PORT",
    help="Serve the agent's own /metrics and /healthz here (default: off; loopback unless --metrics-insecure).",
)  # fmt: skip
@click.option(
    "--metrics-insecure", is_flag=True,
    help="Allow --metrics-listen on a non-loopback address (plain HTTP: anyone who reaches it reads the node's load).",
)  # fmt: skip
@click.option(
    "--metrics-tls-cert", type=click.Path(path_type=Path), help="Serve /metrics over HTTPS with this certificate."
)
@click.option("--metrics-tls-key", type=click.Path(path_type=Path), help="Private key of --metrics-tls-cert.")
@click.option("--metrics-gpu/--no-metrics-gpu", default=True, show_default=True, help="dcgm-exporter's GPU families.")
@click.option(
    "--metrics-nvlink/--no-metrics-nvlink", default=False, show_default=True,
    help="nodeagent's per-link NVLink families (bytes, errors, state; dcgm-exporter has none by default). "
    "Three quarters of an 8-GPU page and of its scrape's CPU.",
)  # fmt: skip
@click.option(
    "--metrics-node/--no-metrics-node", default=True, show_default=True,
    help="node_exporter's network, InfiniBand, disk, pressure, CPU and memory families.",
)  # fmt: skip
@click.option(
    "--metrics-agent/--no-metrics-agent", default=True, show_default=True,
    help="nodeagent's own families (health, delivery, highways, process).",
)  # fmt: skip
@click.option(
    "--metrics-xid-count/--no-metrics-xid-count", default=False, show_default=True,
    help="dcgm-exporter's opt-in DCGM_EXP_XID_ERRORS_COUNT: Xids per GPU and number in the last 5 minutes.",
)  # fmt: skip
@click.option(
    "--pod-resources-socket", default=DEFAULT_POD_RESOURCES_SOCKET, show_default=True, metavar="PATH",
    help="The kubelet's pod-resources socket: each report's GPU processes get their pod's namespace, and the "
    "GPU families pod, namespace and container labels (read every 10 s; off while the file does not exist, "
    "or with an empty value).",
)  # fmt: skip
@source_flags
def run(**flags: Any) -> None:
    """Sample this node (or a simulated one) and stream reports to a collector."""
    started = time.monotonic()
    limit_malloc_arenas()  # first, before the GPU readers, the sender and gRPC start threads
    known = {field.name for field in fields(RunFlags)}
    f = RunFlags(**{k: v for k, v in flags.items() if k in known})
    switches = {k: v for k, v in flags.items() if k not in known}  # the sources' own flags
    security, metrics_tls = _checked_security(f)
    if f.overrides and f.scenario is None:
        raise click.UsageError("--set needs --simulate")
    config = agent_config(f.config_path, f.link_speed)
    names = enabled_sources(switches)
    options = source_options(switches)
    raise_open_file_limit()
    spool = _open_spool(f)
    # The source stamps the reports; it carries on where the spool (and its disk segments) left off.
    sequence = ReportSequence(spool.epoch, spool.next_seq)
    source: ReportSource
    if f.scenario is not None:
        source = _simulated_source(f, f.scenario, sequence)
    else:
        source = Sampler(
            names, node_id=f.node_id, roots=Roots(procfs=f.procfs, sysfs=f.sysfs), config=config, sequence=sequence,
            options=options,
        )  # fmt: skip
    chosen = (
        ("gpu", f.metrics_gpu), ("nvlink", f.metrics_nvlink), ("node", f.metrics_node), ("agent", f.metrics_agent),
        ("xid_count", f.metrics_xid_count),
    )  # fmt: skip
    settings = DaemonSettings(
        node_id=f.node_id, interval_seconds=f.interval, collectors=f.collectors, security=security,
        max_reports=f.max_reports, stop_at=started + f.deadline if f.deadline is not None else None,
        metrics_listen=f.metrics_listen, metrics_tls=metrics_tls,
        metrics_groups=tuple(group for group, on in chosen if on), pod_resources_socket=f.pod_resources_socket,
    )  # fmt: skip
    try:
        outcome = run_daemon(source, spool, settings)
    except MetricsListenError as err:
        raise click.BadParameter(str(err), param_hint="--metrics-listen") from err
    _say_outcome(f, spool, outcome)


@dataclass(frozen=True, slots=True)
class RunFlags:
    """``run``'s flags as click hands them over, one field per option (the sources' own
    ``--collector.X`` flags aside)."""

    collectors: tuple[str, ...]
    node_id: str
    interval: float
    spool_dir: Path | None
    spool_max_bytes: int
    spool_max_age: float
    scenario: str | None
    seed: int
    overrides: tuple[str, ...]
    time_scale: float
    time_scale_seconds: float | None
    time_scale_anchor: float | None
    max_reports: int | None
    deadline: float | None
    procfs: str
    sysfs: str
    config_path: Path | None
    link_speed: tuple[str, ...]
    tls_ca: Path | None
    tls_cert: Path | None
    tls_key: Path | None
    tls_server_name: str | None
    token_file: Path | None
    insecure: bool
    metrics_listen: str | None
    metrics_insecure: bool
    metrics_tls_cert: Path | None
    metrics_tls_key: Path | None
    metrics_gpu: bool
    metrics_nvlink: bool
    metrics_node: bool
    metrics_agent: bool
    metrics_xid_count: bool
    pod_resources_socket: str


def _checked_security(f: RunFlags) -> tuple[ClientSecurity, ssl.SSLContext | None]:
    """The stream's credentials and the metrics page's TLS, checked: a usage error when wrong."""
    security = ClientSecurity(
        ca_file=f.tls_ca, cert_file=f.tls_cert, key_file=f.tls_key, token_file=f.token_file,
        server_name=f.tls_server_name,
    )  # fmt: skip
    try:
        security.check()
        check_token_transport(f.collectors, security, insecure=f.insecure)
        metrics_tls = _metrics_tls(f.metrics_tls_cert, f.metrics_tls_key)
        _check_metrics_listen(f.metrics_listen, insecure=f.metrics_insecure, tls=metrics_tls is not None)
    except ValueError as err:
        raise click.UsageError(str(err)) from err
    return security, metrics_tls


def _open_spool(f: RunFlags) -> Spool:
    try:
        return Spool(max_bytes=f.spool_max_bytes, max_age_seconds=f.spool_max_age, directory=f.spool_dir)
    except OSError as err:
        raise click.BadParameter(f"{f.spool_dir}: {err.strerror}", param_hint="--spool-dir") from err
    except LockedError as err:
        raise click.BadParameter(str(err), param_hint="--spool-dir") from err


def _simulated_source(f: RunFlags, scenario: str, sequence: ReportSequence) -> ReportSource:
    """``--simulate``: the scenario's sampler on its own (scaled) clock."""
    # Imported here: a live agent never loads the simulator (about 1 MB of its RSS).
    from nodeagent.tools.simulator import ScenarioError, UnknownScenarioError  # noqa: PLC0415
    from nodeagent.tools.simulator.scenarios import parse_overrides  # noqa: PLC0415
    from nodeagent.tools.simulator.source import (  # noqa: PLC0415
        JOB_ALIGN_SECONDS,
        SimulatedSampler,
        scaled_clock,
    )

    time_scale_seconds = f.time_scale_seconds
    if time_scale_seconds is None:
        # The run ends at its deadline or after its reports, whichever comes first.
        ends = [s for s in (f.deadline, f.max_reports * f.interval if f.max_reports else None) if s is not None]
        time_scale_seconds = min(ends, default=None)
    try:
        params = parse_overrides(f.overrides)
        # A node of a multi-node job: its clock meets the wall clock at a whole minute, which
        # the job's other nodes, started with it, share (an anchor makes it certain).
        align = JOB_ALIGN_SECONDS if params.get("job_nodes", 1) != 1 else 0.0
        clock = scaled_clock(f.time_scale, time_scale_seconds, anchor=f.time_scale_anchor, align_seconds=align)
    except ScenarioError as err:
        raise click.BadParameter(str(err), param_hint="--set") from err
    except ValueError as err:
        raise click.BadParameter(str(err), param_hint="--time-scale-anchor") from err
    try:
        return SimulatedSampler(scenario, node_id=f.node_id, sequence=sequence, seed=f.seed, clock=clock, **params)
    except UnknownScenarioError as err:
        raise click.BadParameter(str(err), param_hint="--simulate") from err
    except ScenarioError as err:
        raise click.BadParameter(str(err), param_hint="--set") from err


def _say_outcome(f: RunFlags, spool: Spool, outcome: Outcome) -> None:
    """A finite run ends with one JSON line saying what became of every report, and fails
    (``EXIT_UNDELIVERED``) when some were not delivered."""
    if f.max_reports is None and f.deadline is None:
        return
    produced = outcome.produced
    stats = spool.stats()
    summary = {
        "node_id": f.node_id, "epoch": spool.epoch, "produced": produced, "last_seq": stats.last_seq,
        "acked_seq": stats.acked_seq, "unacked": stats.reports, "dropped_total": stats.dropped_total,
        "dropped_unresolved": stats.dropped_unresolved, "reports_resent_total": outcome.reports_resent_total,
    }  # fmt: skip
    click.echo(json.dumps(summary))
    if not outcome.delivered:
        # `--deadline` alone samples until it passes, then drains: what is still unacknowledged
        # after the drain fails the run as it does with `--max-reports`.
        click.echo(
            f"nodeagent: error: {undelivered_words(stats.reports, produced, outcome, f.deadline, f.spool_dir)}",
            err=True,
        )
        raise click.exceptions.Exit(EXIT_UNDELIVERED)


def undelivered_words(
    unacked: int, produced: int, outcome: Outcome, deadline: float | None, spool_dir: Path | None
) -> str:
    """Why a finite run ends with reports unacknowledged, in one line: what ended it (a signal,
    after the short drain, or the deadline), how many, and where they are now. The spool may hold
    an earlier run's reports too, so the count is not "N of the reports made"."""
    plural = "report" if unacked == 1 else "reports"
    if outcome.signalled:
        why = f"stopped by a signal with {unacked} {plural} not acknowledged (after a {DRAIN_SECONDS:g} s drain)"
    else:
        given = f" (--deadline {deadline:g} s)" if deadline is not None else ""
        why = f"{unacked} {plural} not acknowledged by the deadline{given}"
    if unacked > produced:
        why += f", at least {unacked - produced} of them from an earlier run"
    if spool_dir is not None:
        return f"{why}; they stay in {spool_dir} for the next run"
    return f"{why}; without --spool-dir they are lost"
