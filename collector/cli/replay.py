"""``nodeagent-collector replay TRACE.jsonl``: the detector over a recorded trace.

A bad line (not a NodeReport, no node id or time, time not advancing) is named on stderr and
skipped; with ``--strict`` the first one stops the replay: one line on stderr, exit status 2,
nothing on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import click

from nodeagent.collector.cli.history import Duration
from nodeagent.collector.config import CollectorConfigError, load_collector_config
from nodeagent.collector.replay import Replay
from nodeagent.collector.store.database import StoreUnreadableError, default_db_path, read_stored_reports
from nodeagent.core.quantities.units import format_bits
from nodeagent.core.wire.trace import TraceError, TraceProblem, read_trace

# Problems named one by one before the rest are only counted.
_SHOWN_PROBLEMS = 20


@click.command()
@click.argument("trace", required=False, type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--node", help="Replay this node's reports from the collector's store instead of a trace.")
@click.option(
    "--since", "since_seconds", type=Duration(), default="1h", show_default=True,
    help="With --node: how far back from its newest stored report (at most --history-reports-seconds).",
)  # fmt: skip
@click.option(
    "--db", "db_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="With --node: the collector's database (default: serve's).",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="Everything as one JSON document.")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path), help="Collector configuration ([detector], [alerts])."
)
@click.option("--strict", is_flag=True, help="Stop at the first bad line (exit 2) instead of skipping it.")
def replay(
    trace: Path | None, node: str | None, since_seconds: float, db_path: Path | None, as_json: bool,
    config_path: Path | None, strict: bool,
) -> None:  # fmt: skip
    """Run the detector over a recorded trace, or over a node's stored reports (--node).

    Prints the verdicts per GPU over time, the alerts raised and resolved, and the time share of
    each state and cause per GPU and per node (--json: all of it, with the final verdicts)."""
    try:
        settings = load_collector_config(config_path)
    except CollectorConfigError as err:
        raise click.UsageError(str(err)) from err
    problems: list[TraceProblem] = []

    def skipped(problem: TraceProblem) -> None:
        problems.append(problem)
        if len(problems) <= _SHOWN_PROBLEMS:
            click.echo(f"nodeagent-collector: {trace}:{problem.line}: skipped: {problem.message}", err=True)

    result = Replay(settings.detector, settings.alerts)
    if (trace is None) == (node is None):
        raise click.UsageError("give a TRACE file or --node NODE (one of them)")
    if node is not None:
        _replay_stored(result, node, since_seconds, db_path, as_json)
        return
    assert trace is not None
    lines = 0
    try:
        with trace.open("rb") as stream:
            for lines, report in read_trace(stream, strict=strict, on_problem=skipped):  # noqa: B007 - count kept
                result.observe(report)
    except TraceError as err:
        raise click.ClickException(f"{trace}:{err.problem.line}: {err.problem.message}") from err
    except OSError as err:
        raise click.ClickException(f"{trace}: cannot read: {err.strerror}") from err
    if len(problems) > _SHOWN_PROBLEMS:
        click.echo(f"nodeagent-collector: {trace}: {len(problems) - _SHOWN_PROBLEMS} more bad lines skipped", err=True)
    plain = result.to_plain()
    if not any(node["reports"] for node in plain["nodes"]):
        # Nothing to replay is not a replay that found nothing: the wrong file, or one broken throughout.
        bad = f" ({len(problems)} bad line{'s' if len(problems) != 1 else ''})" if problems else " (empty)"
        raise click.ClickException(f"{trace}: no valid report{bad}")
    if problems:
        click.echo(f"nodeagent-collector: {trace}: skipped {len(problems)} bad line(s)", err=True)
    plain = {"trace": str(trace), "skipped_lines": [{"line": p.line, "message": p.message} for p in problems], **plain}
    if as_json:
        sys.stdout.write(json.dumps(plain, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(render(plain))


def _replay_stored(result: Replay, node: str, since_seconds: float, db_path: Path | None, as_json: bool) -> None:
    """The node's full-resolution reports from the store (read-only; a running collector may hold it)."""
    path = db_path or default_db_path()
    try:
        reports = read_stored_reports(path, node, since_seconds)
    except StoreUnreadableError as err:
        raise click.ClickException(f"{path}: cannot read the history: {err}") from err
    if not reports:
        raise click.ClickException(f"{path}: no stored reports of node {node!r}")
    for report in reports:
        result.observe(report)
    plain = {"trace": f"{path} node {node}", "skipped_lines": [], **result.to_plain()}
    if as_json:
        sys.stdout.write(json.dumps(plain, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(render(plain))


# ---- text ------------------------------------------------------------------------------------


def render(plain: dict[str, Any]) -> str:
    nodes = plain["nodes"]
    reports = sum(n["reports"] for n in nodes)
    lines = [f"trace {plain['trace']}: {reports} reports, {len(nodes)} node(s), {len(plain['skipped_lines'])} skipped"]
    for node in nodes:
        lines.extend(_node(node))
    return "\n".join(lines) + "\n"


def _node(node: dict[str, Any]) -> list[str]:
    start = node["first_time_unix_seconds"]
    span = node["last_time_unix_seconds"] - start
    lines = ["", f"node {node['node_id']}  {_utc(start)} + {_clock(span)}", "  verdicts"]
    for when, gpus, change in _grouped(node["timeline"]):
        lines.append(f"    +{_clock(when - start)}  GPU {_ranges(gpus):<9} {change}")
    no_gpu = not node["shares"]["gpus"]
    if not node["timeline"]:
        lines.append("    none: no GPU in this trace" if no_gpu else "    no verdict changes")
    lines.append("  alerts")
    for alert in node["alerts"] or []:
        labels = " ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
        ratio = alert["annotations"].get("starvation_ratio", "")
        lines.append(
            f"    +{_clock(alert['time_unix_seconds'] - start)}  {alert['status']:<8} {alert['name']} "
            f"{alert['severity']}  {labels}" + (f"  ratio {ratio}" if ratio and alert["status"] != "resolved" else "")
        )
    if not node["alerts"]:
        lines.append("    none")
    if no_gpu:  # nothing can wait for data: no state shares, no verdict (as the fleet table's no-gpu)
        lines.append("  at the end: no-gpu")
        return lines
    lines.extend(_shares(node["shares"]))
    final = node["final_verdict"]
    summary = f"  at the end: {final['state']}"
    if final["cause"]:
        summary += f" ({final['cause']}, {final['tier']})"
    if final["starvation_ratio"] is not None:
        summary += f", starvation {final['starvation_ratio']:.3f}, interconnect {final['interconnect_ratio']:.3f}"
    summary += f", {final['gpu_seconds_lost'] / 3600:.2f} GPU-hours lost"
    if final["needed_ingest_bytes_per_second"]:
        summary += f", ingest needed {format_bits(final['needed_ingest_bytes_per_second'])}"
    lines.append(summary)
    return lines


def _grouped(timeline: list[dict[str, Any]]) -> list[tuple[float, list[int], str]]:
    """Changes at the same time to the same verdict, one line per group of GPUs (mean ratios)."""
    groups: dict[tuple[float, str, str | None, str | None], list[dict[str, Any]]] = {}
    for c in timeline:
        groups.setdefault((c["time_unix_seconds"], c["state"], c["cause"], c["tier"]), []).append(c)
    out = []
    for (when, state, cause, tier), changes in groups.items():
        text = state
        if state == "starved":
            text += f" ({cause}, {tier})"
            data = [c["starvation_ratio"] for c in changes if c["starvation_ratio"] is not None]
            sync = [c["interconnect_ratio"] for c in changes if c["interconnect_ratio"] is not None]
            if data and sync:
                text += f"  data {sum(data) / len(data):.3f}  interconnect {sum(sync) / len(sync):.3f}"
        out.append((when, [c["gpu"] for c in changes], text))
    return out


def _shares(shares: dict[str, Any]) -> list[str]:
    states = [s for s, v in shares["node"]["state_ratios"].items() if v > 0] or ["busy"]
    rows = [("node", shares["node"])] + [(f"GPU {g['index']}", g) for g in shares["gpus"]]
    causes = sorted({c for _, row in rows for c, v in row["cause_ratios"].items() if v > 0})
    # "time starved", not "starved": the share of the trace in that state, which is not the
    # starvation ratio (the share of GPU time lost to data) printed at the end.
    header = "    " + f"{'':<7}" + "".join(f"{'time ' + s:>14}" for s in states) + "".join(f"{c:>13}" for c in causes)
    lines = ["  share of time in each state (and per cause while starved)", header]
    for name, row in rows:
        cells = "".join(f"{row['state_ratios'][s]:>14.3f}" for s in states)
        cells += "".join(f"{row['cause_ratios'][c]:>13.3f}" for c in causes)
        lines.append(f"    {name:<7}{cells}")
    return lines


def _ranges(indexes: list[int]) -> str:
    """``[0, 1, 2, 5]`` as ``0-2,5``."""
    runs: list[list[int]] = []
    for i in sorted(indexes):
        if runs and runs[-1][1] == i - 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ",".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def _clock(seconds: float) -> str:
    whole = max(0, round(seconds))
    return f"{whole // 3600}:{whole % 3600 // 60:02d}:{whole % 60:02d}"


def _utc(unix: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(unix))
