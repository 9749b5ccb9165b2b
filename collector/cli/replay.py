"""``nodeagent-collector replay TRACE.jsonl [TRACE.jsonl ...]``: the detector over recorded
traces, and the job roll-up over the nodes of a multi-node job.

Several traces (one node's each, as ``nodeagent record`` writes them, or several nodes' in time
order) are merged in time order. A bad line (not a NodeReport, no node id or time, time not
advancing) is named on stderr and skipped; with ``--strict`` the first one stops the replay: one
line on stderr, exit status 2, nothing on stdout. A trace whose nodes' reports are out of time
order by more than the detector's window (traces joined end to end) is named on stderr: the job
roll-up would see its nodes apart in time; give each node's trace as a file of its own.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any, BinaryIO, cast

import click

from nodeagent.collector.cli.history import Duration
from nodeagent.collector.config import CollectorConfigError, load_collector_config
from nodeagent.collector.replay import Replay, merged
from nodeagent.collector.states.words import cause_word
from nodeagent.collector.store.database import StoreUnreadableError, default_db_path, read_stored_reports
from nodeagent.core.program.safe_text import escape_controls
from nodeagent.core.quantities.units import format_bits
from nodeagent.core.wire.trace import TraceError, TraceProblem, read_trace
from nodeagent.v1 import nodeagent_pb2 as pb

# Problems named one by one before the rest are only counted.
_SHOWN_PROBLEMS = 20


@click.command()
@click.argument("traces", nargs=-1, type=click.Path(exists=True, dir_okay=False, path_type=Path))
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
    traces: tuple[Path, ...], node: str | None, since_seconds: float, db_path: Path | None, as_json: bool,
    config_path: Path | None, strict: bool,
) -> None:  # fmt: skip
    """Run the detector over recorded traces (several nodes' are merged in time order, and the
    job roll-up runs over them), or over a node's stored reports (--node).

    Prints the verdicts per GPU over time, the alerts raised and resolved, and the time share of
    each state and cause per GPU and per node; for multi-node jobs, each job's verdicts over time
    (when it was first slowed, the straggler, the cause). --json: all of it, with the final verdicts."""
    try:
        settings = load_collector_config(config_path)
    except CollectorConfigError as err:
        raise click.UsageError(str(err)) from err
    problems: list[tuple[Path, TraceProblem]] = []

    def skipped(trace: Path, problem: TraceProblem) -> None:
        problems.append((trace, problem))
        if len(problems) <= _SHOWN_PROBLEMS:
            click.echo(f"nodeagent-collector: {trace}:{problem.line}: skipped: {problem.message}", err=True)

    result = Replay(settings.detector, settings.alerts)
    if bool(traces) == (node is not None):
        raise click.UsageError("give TRACE files or --node NODE (one of them)")
    if node is not None:
        _replay_stored(result, node, since_seconds, db_path, as_json)
        return
    counts = dict.fromkeys(traces, 0)
    window = settings.detector.window_seconds
    try:
        with ExitStack() as files:
            streams = [_reports(trace, _opened(files, trace), strict, skipped, counts, window) for trace in traces]
            for report in merged(*streams):
                result.observe(report)
    except _TraceFailure as err:
        raise click.ClickException(str(err)) from err
    if len(problems) > _SHOWN_PROBLEMS:
        click.echo(f"nodeagent-collector: {len(problems) - _SHOWN_PROBLEMS} more bad lines skipped", err=True)
    for trace, count in counts.items():
        if not count:
            # Nothing to replay is not a replay that found nothing: the wrong file, or one broken throughout.
            bad = sum(1 for t, _ in problems if t == trace)
            said = f" ({bad} bad line{'s' if bad != 1 else ''})" if bad else " (empty)"
            raise click.ClickException(f"{trace}: no valid report{said}")
    for trace in traces:
        bad = sum(1 for t, _ in problems if t == trace)
        if bad:
            click.echo(f"nodeagent-collector: {trace}: skipped {bad} bad line(s)", err=True)
    skipped_lines = [{"trace": str(t), "line": p.line, "message": p.message} for t, p in problems]
    plain = {
        "trace": ", ".join(str(t) for t in traces), "traces": [str(t) for t in traces], "skipped_lines": skipped_lines,
        **result.to_plain(),
    }  # fmt: skip
    if as_json:
        sys.stdout.write(json.dumps(plain, indent=2, sort_keys=False) + "\n")
    else:
        sys.stdout.write(render(plain))


class _TraceFailure(Exception):
    """A trace that cannot be read, or a bad line of one read strictly: one line, exit 2."""


def _opened(files: ExitStack, trace: Path) -> BinaryIO:
    """The trace's bytes; a ``.gz`` file (as the lab's dataset ships) read through gzip."""
    try:
        raw = files.enter_context(trace.open("rb"))
        if trace.suffix == ".gz":
            return cast(BinaryIO, files.enter_context(gzip.GzipFile(fileobj=raw, mode="rb")))
        return raw
    except OSError as err:
        raise _TraceFailure(f"{trace}: cannot read: {err.strerror}") from err


def _reports(
    trace: Path, stream: BinaryIO, strict: bool, skipped: Callable[[Path, TraceProblem], None],
    counts: dict[Path, int], window: float,
) -> Iterator[pb.NodeReport]:  # fmt: skip
    """One trace's good reports, counted; a node's report more than ``window`` before another
    node's already read in the same trace is named once (the trace is not in time order)."""
    newest: tuple[float, str] | None = None
    warned = False
    try:
        for line, report in read_trace(stream, strict=strict, on_problem=lambda p: skipped(trace, p)):
            t = report.time_unix_seconds
            if newest is not None and not warned and t < newest[0] - window and report.node_id != newest[1]:
                warned = True
                click.echo(
                    f"nodeagent-collector: {trace}:{line}: node {report.node_id!r} at {t:.3f} is "
                    f"{newest[0] - t:.0f} s before node {newest[1]!r}: the trace is not in time order (joined end "
                    "to end?); the job roll-up sees its nodes apart in time: give each node's trace as its own file",
                    err=True,
                )
            if newest is None or t > newest[0]:
                newest = (t, report.node_id)
            counts[trace] += 1
            yield report
    except TraceError as err:
        raise _TraceFailure(f"{trace}:{err.problem.line}: {err.problem.message}") from err
    except (OSError, EOFError) as err:  # a damaged or cut .gz too
        raise _TraceFailure(f"{trace}: cannot read: {getattr(err, 'strerror', None) or err}") from err


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
    plain = {"trace": f"{path} node {node}", "traces": [], "skipped_lines": [], **result.to_plain()}
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
    jobs = plain.get("jobs") or []
    if jobs:
        start = min(n["first_time_unix_seconds"] for n in nodes)
        lines += ["", f"jobs (times from the trace's start, {_utc(start)})"]
        for job in jobs:
            lines.extend(_job(job, start))
    return "\n".join(map(escape_controls, lines)) + "\n"


def _job(job: dict[str, Any], start: float) -> list[str]:
    final = job["final_verdict"]
    lines = [
        "",
        f"job {job['job']}  {final['source']}, {len(final['nodes'])} node(s), {final['gpus']} GPUs "
        f"({final['ranks_reported']} of {final['world_size'] or '?'} ranks)",
        "  verdicts",
    ]
    for change in job["timeline"]:
        lines.append(f"    +{_clock(change['time_unix_seconds'] - start)}  {_job_state(change)}")
    slowed = job["first_slowed"]
    if slowed is None:
        lines.append("  never slowed")
    else:
        lines.append(f"  first slowed at +{_clock(slowed['time_unix_seconds'] - start)}: {_held(slowed)}")
    lines.extend(_alert_lines(job["alerts"], start, "wait_ratio", "wait"))
    summary = f"  at the end: {_job_state(final)}, {final['gpu_hours_lost']:.2f} GPU-hours lost"
    if final["needed_bytes_per_second"]:
        summary += f", the straggler needs {format_bits(final['needed_bytes_per_second'])}"
    lines.append(summary)
    for note in final["notes"]:
        lines.append(f"  note: {note}")
    return lines


def _job_state(v: dict[str, Any]) -> str:
    text = str(v["state"])
    if v["state"] == "slowed":
        text += f"  {_held(v)}"
    if v["wait_ratio"] is not None:
        text += f"  wait {v['wait_ratio']:.3f}"
    return text


def _held(v: dict[str, Any]) -> str:
    """Who holds a slowed job back, and why."""
    cause = cause_word(v["cause"])
    if v["job_wide"] or not v["straggler_nodes"]:
        return f"job-wide ({cause})"
    return f"straggler {','.join(v['straggler_nodes'])} ({cause})"


def _node(node: dict[str, Any]) -> list[str]:
    start = node["first_time_unix_seconds"]
    span = node["last_time_unix_seconds"] - start
    lines = ["", f"node {node['node_id']}  {_utc(start)} + {_clock(span)}", "  verdicts"]
    for when, gpus, change in _grouped(node["timeline"]):
        lines.append(f"    +{_clock(when - start)}  GPU {_ranges(gpus):<9} {change}")
    no_gpu = not node["shares"]["gpus"]
    if not node["timeline"]:
        lines.append("    none: no GPU in this trace" if no_gpu else "    no verdict changes")
    lines.extend(_alert_lines(node["alerts"] or [], start, "starvation_ratio", "ratio"))
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


def _alert_lines(alerts: list[dict[str, Any]], start: float, annotation: str, word: str) -> list[str]:
    """The alerts of a node or a job, one line each, with the ratio ``annotation`` while not resolved."""
    lines = ["  alerts"]
    for alert in alerts:
        labels = " ".join(f"{k}={v}" for k, v in sorted(alert["labels"].items()))
        ratio = alert["annotations"].get(annotation, "")
        lines.append(
            f"    +{_clock(alert['time_unix_seconds'] - start)}  {alert['status']:<8} {alert['name']} "
            f"{alert['severity']}  {labels}" + (f"  {word} {ratio}" if ratio and alert["status"] != "resolved" else "")
        )
    if not alerts:
        lines.append("    none")
    return lines
