"""``nodeagent-collector demo``: a small fleet on this machine, and what nodeagent finds in it.

Starts a collector (the default ``serve``: a front and a worker per core) on a SQLite file in a temporary directory, an
agent sampling this very machine, two simulated 8-GPU training nodes, the two environments of the
design's reference comparison (CLIP, 100M pairs, same code on both):

- ``rental-10g-pcie``: a 10 Gb/s public link and all-reduce over PCIe (``ordinary-cloud``);
- ``rental-50g-nvlink``: 50 Gb/s, NVLink and an RDMA volume (``fast-cloud``);

and one simulated 4-node job (``torch/clip-4node``, ranks 0-3, charged to the Slurm account
``clip``): three nodes on ``fast-cloud`` and ``clip-node-3`` on ``ordinary-cloud``, which holds
the whole job back.

The simulated nodes run ``--time-scale`` times faster than the wall clock, so a short demo shows
several minutes of training: their clocks start that many minutes back and all meet the wall
clock at one moment (``--time-scale-anchor``), when the report is printed (the collector refuses
reports from the future), then run at 1x; the job's nodes read the same simulated time, so the
collector compares them step by step. Once every simulated clock is within 2 s of the wall clock
(it waits 10 s at most), it prints the fleet table, the alerts and the jobs (as
``nodeagent-collector jobs`` does), explains each node and the job in a sentence or two, prints
the fleet page's address and keeps it up until Enter (``--no-wait``: at once), and stops
every process it started.
"""

from __future__ import annotations

import contextlib
import platform
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from nodeagent.collector.cli.client import fetch_whole
from nodeagent.collector.cli.jobs import job_rows, render_jobs, verdict_of
from nodeagent.collector.views.fleet_table import alert_rows, node_rows, render_fleet
from nodeagent.core.quantities.units import format_bits
from nodeagent.core.transport.channel import ClientSecurity
from nodeagent.core.wire.identity import NODE_ID_RE

DAY_SECONDS = 86_400.0

# The rentals' prices, and the highway the payoff is also predicted at (the design's better rental).
DEMO_CONFIG = """\
[prices]
currency = "USD"
default_per_gpu_hour = 2.0
[prices.nodes]
"rental-10g-*" = 1.10
"rental-50g-*" = 2.40
[payoff]
targets = ["50G + nvlink"]
"""
SIMULATED = (("rental-10g-pcie", "ordinary-cloud"), ("rental-50g-nvlink", "fast-cloud"))
# One 4-node training job (the same job key, ranks 0..3): three nodes on the fast cloud, one on
# the 10 Gb/s link, which holds the whole job back.
JOB = "torch/clip-4node"
JOB_ACCOUNT = "clip"  # the Slurm account its processes carry (what a ledger by account bills)
JOB_NODES = (
    ("clip-node-0", "fast-cloud"), ("clip-node-1", "fast-cloud"), ("clip-node-2", "fast-cloud"),
    ("clip-node-3", "ordinary-cloud"),
)  # fmt: skip
# A simulated clock this close behind the collector's has caught up (it then runs at 1x); the
# demo waits at most this long more for the simulated nodes to get there.
CAUGHT_UP_SECONDS = 2.0
CATCH_UP_WAIT_SECONDS = 20.0  # ends as soon as they have: on a machine this busy, 10 s once left one 5 s behind


@dataclass(frozen=True, slots=True)
class DemoPlan:
    seconds: float = 25.0
    time_scale: float = 30.0
    interval: float = 0.1
    # Keep the fleet page up after the report until Enter (or the end of standard input).
    wait: bool = True


def run_demo(plan: DemoPlan) -> None:
    with tempfile.TemporaryDirectory(prefix="nodeagent-demo-") as tmp, _processes() as started:
        db = Path(tmp) / "collector.db"
        config = Path(tmp) / "collector.toml"
        config.write_text(DEMO_CONFIG)
        collector = _spawn(
            # The default serve, as users run it: the job's nodes live on the workers their node ids
            # own, and the job is judged by the worker its key owns (ports 0: any free ones).
            ["nodeagent-collector", "--log-level", "warning", "serve", "--listen", "127.0.0.1:0",
             "--worker-ports", "0", "--http-listen", "127.0.0.1:0", "--db", str(db), "--config", str(config)],
            Path(tmp) / "collector.log", started, pipe=True,
        )  # fmt: skip
        address = _listening(collector, Path(tmp) / "collector.log")
        assert collector.stdout is not None
        http = collector.stdout.readline().split()[-1]
        click.echo(f"collector  {address}, SQLite at {db}, metrics at http://{http}/metrics")
        page = f"http://{http}/"
        this_node = _this_node()
        _spawn(
            ["nodeagent", "run", "--collector", address, "--node-id", this_node, "--interval", "1"],
            Path(tmp) / f"{this_node}.log", started,
        )  # fmt: skip
        click.echo(f"agent      {this_node} (this machine, sampled every second)")
        # Every simulated clock meets the wall clock at the same moment, when the report is printed:
        # the job's nodes read the same simulated time, which the collector needs to compare them.
        anchor = time.time() + plan.seconds
        sped_up = ["--time-scale", f"{plan.time_scale:g}", "--time-scale-anchor", f"{anchor:.3f}",
                   "--interval", f"{plan.interval:g}"]  # fmt: skip
        for node, scenario in SIMULATED:
            _spawn(
                ["nodeagent", "run", "--collector", address, "--node-id", node, "--simulate", scenario, *sped_up],
                Path(tmp) / f"{node}.log", started,
            )  # fmt: skip
            click.echo(f"simulated  {node} ({scenario}: 8 GPUs, {plan.time_scale:g}x real time)")
        for rank, (node, scenario) in enumerate(JOB_NODES):
            job = ["--set", f"job_key={JOB}", "--set", f"job_nodes={len(JOB_NODES)}", "--set", f"job_node_rank={rank}",
                   "--set", f"job_account={JOB_ACCOUNT}"]  # fmt: skip
            _spawn(
                ["nodeagent", "run", "--collector", address, "--node-id", node, "--simulate", scenario, *job, *sped_up],
                Path(tmp) / f"{node}.log", started,
            )  # fmt: skip
        *fast, (slow, slow_scenario) = JOB_NODES
        click.echo(
            f"simulated  job {JOB} (8 GPUs a node, ranks 0-{len(JOB_NODES) - 1}): {fast[0][0]} to {fast[-1][0]} "
            f"({fast[0][1]}), {slow} ({slow_scenario})"
        )
        _wait_with_progress(plan.seconds)
        rows = _caught_up_rows(address, [node for node, _scenario in (*SIMULATED, *JOB_NODES)])
        firing = alert_rows(fetch_whole(address, ClientSecurity(), "StreamAlerts"))
        live = [verdict_of(v) for v in fetch_whole(address, ClientSecurity(), "StreamJobs").jobs]
        jobs = job_rows(live, fetch_whole(address, ClientSecurity(), "StreamJobTotals", last_seconds=DAY_SECONDS))
        click.echo(_report(rows, firing, jobs, plan))
        click.echo(
            f"\nThe fleet page: {page}  (the starved node: {page}node/{SIMULATED[0][0]}; the job: "
            f"{page}job/{urllib.parse.quote(JOB, safe='')}; every live job: {page}jobs)"
        )
        if plan.wait:
            click.echo("It stays up, live, until you press Enter.")
            with contextlib.suppress(EOFError, KeyboardInterrupt):
                input()


def _report(
    rows: list[dict[str, Any]], firing: list[dict[str, Any]], jobs: list[dict[str, Any]], plan: DemoPlan
) -> str:
    simulated_minutes = plan.seconds * plan.time_scale / 60
    out = [
        "",
        f"Fleet after {plan.seconds:.0f} s ({simulated_minutes:.0f} simulated minutes on the simulated nodes):",
        "",
        render_fleet(rows),
        "",
    ]
    if firing:
        out.append("Alerts:")
        for alert in firing:
            summary = alert["annotations"].get("summary", "")
            out.append(f"  {alert['name']} [{alert['severity']}] {alert['node_id']}: {summary}")
    else:
        out.append("Alerts: none firing")
    out += ["", "Jobs (`nodeagent-collector jobs`; the live ones are the fleet page's /jobs):", ""]
    out.append(render_jobs(jobs, DAY_SECONDS))
    out.append("")
    out.append("Why:")
    for row in rows:
        out.append("  " + _why(row))
    for job in jobs:
        if job["live"]:
            out.append("  " + _job_why(job))
    return "\n".join(out)


def _job_why(job: dict[str, Any]) -> str:
    """One live job in a sentence: who holds it back and what the wait costs every GPU of it."""
    name, nodes, gpus = job["job"], len(job["nodes"]), job["gpus"]
    if job["state"] != "slowed":
        return f"{name}: {nodes} nodes, {gpus} GPUs, {job['state']}: no node holds the job back."
    wait = job["wait_ratio"] or 0.0
    if job["job_wide"]:
        held = f"every node alike ({job['cause']}): no one node to blame"
    else:
        held = f"{', '.join(job['straggler_nodes'])} holds it back ({job['cause']})"
    text = (
        f"{name}: {nodes} nodes, {gpus} GPUs, slowed: {held}; the job's GPUs spend {wait:.0%} of their time"
        " waiting for it (JobStraggler)."
    )
    fixed = job.get("if_fixed")
    if fixed and fixed["speedup"] is not None:
        text += f"\n    Lifting it: {fixed['speedup']:.2f}x the job's steps"
        if fixed["money_per_day"] is not None:
            text += (
                f", {fixed['gpu_hours_per_day']:.0f} GPU-hours ({fixed['money_per_day']:.2f} {fixed['currency']}) a day"
            )
        text += "."
    return text


def _why(row: dict[str, Any]) -> str:
    node, state, cause = row["node_id"], row["state"], row["cause"]
    gpus = row["gpu_count"]
    if not gpus:
        return f"{node}: no NVIDIA GPU here; its NICs, disks and CPUs are sampled all the same (`nodeagent sample`)."
    ratio = row["starvation_ratio"] or 0.0
    interconnect = row["interconnect_ratio"] or 0.0
    if state == "waiting":
        on = ", ".join(row.get("waiting_on") or []) or "another node"
        return (
            f"{node}: {gpus} GPUs waiting on {on}, the slow node of their job {row.get('waiting_job') or ''}; "
            "the wait counts as their GPU time lost."
        )
    if state != "starved":
        return (
            f"{node}: {gpus} GPUs kept busy; waiting for data {ratio:.1%} and for the all-reduce "
            f"{interconnect:.1%} of their time (starved counts from 5% waiting for data)."
        )
    evidence = row.get("evidence", {})
    lost_per_hour = ratio * gpus
    text = (
        f"{node}: {gpus} GPUs wait for data {ratio:.0%} of their time (cause: {cause}), plus "
        f"{interconnect:.0%} waiting for the all-reduce; that is {lost_per_hour:.1f} GPU-hours lost per hour."
    )
    if cause == "network" and "network_rx_link_ratio" in evidence:
        link = evidence.get("network_link", "the NIC")
        rx = float(evidence.get("network_rx_bytes_per_second", 0.0))
        text += (
            f"\n    {link} receives {format_bits(rx)}, {float(evidence['network_rx_link_ratio']):.0%} of its link:"
            " the network into the node is the bottleneck."
        )
    if row["needed_ingest_bytes_per_second"]:
        needed = format_bits(row["needed_ingest_bytes_per_second"])
        text += f"\n    Keeping the GPUs busy needs about {needed} of ingest."
    fixed = row.get("if_fixed")
    if fixed and fixed["speedup"] is not None:
        text += f"\n    Lifting it: {fixed['speedup']:.2f}x the steps"
        if fixed["money_per_day"] is not None:
            text += (
                f", {fixed['gpu_hours_per_day']:.0f} GPU-hours ({fixed['money_per_day']:.2f} {fixed['currency']}) a day"
            )
        text += f"; {fixed['notes'][-1]}."
    return text


def _this_node() -> str:
    name = platform.node() or "this-node"
    return name if NODE_ID_RE.fullmatch(name) else "this-node"


def _spawn(
    args: list[str], log: Path, started: list[subprocess.Popen[str]], *, pipe: bool = False
) -> subprocess.Popen[str]:
    program, *rest = args
    module = {"nodeagent": "nodeagent.agent", "nodeagent-collector": "nodeagent.collector"}[program]
    with log.open("w") as handle:
        process = subprocess.Popen(
            [sys.executable, "-m", module, *rest],
            stdout=subprocess.PIPE if pipe else subprocess.DEVNULL, stderr=handle, text=True,
        )  # fmt: skip
    started.append(process)
    return process


def _listening(collector: subprocess.Popen[str], log: Path) -> str:
    assert collector.stdout is not None
    line = collector.stdout.readline()
    if not line.startswith("listening on"):
        raise click.ClickException(f"the collector did not start: {log.read_text().strip()[-500:]}")
    return line.split()[-1]


def _caught_up_rows(address: str, simulated: list[str]) -> list[dict[str, Any]]:
    """The fleet once the simulated clocks have caught up with the wall clock. They were started
    to reach it after ``--seconds`` of their own, but each agent starts a little after the demo's
    count begins, and every second of that is ``time_scale - 1`` seconds of lag (half a minute
    behind, printed as the rentals' SKEW); at ``time_scale`` times the wall clock, it is made up
    within a second or so. Bounded: a slow machine prints what it has."""
    end = time.monotonic() + CATCH_UP_WAIT_SECONDS
    while True:
        rows = node_rows(fetch_whole(address, ClientSecurity(), "StreamNodes"))
        skews = [row.get("clock_skew_seconds") for row in rows if row["node_id"] in simulated]
        caught_up = len(skews) == len(simulated) and all(s is not None and s >= -CAUGHT_UP_SECONDS for s in skews)
        if caught_up or time.monotonic() >= end:
            return rows
        time.sleep(0.2)


def _wait_with_progress(seconds: float) -> None:
    if not sys.stderr.isatty():
        time.sleep(seconds)
        return
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        click.echo(f"\rwatching the fleet... {left:4.0f} s ", nl=False, err=True)
        time.sleep(min(1.0, left))
    click.echo("\r" + " " * 40 + "\r", nl=False, err=True)


def _exit_on_signal(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)  # unwinds through _processes' cleanup, as Enter or Ctrl-C does


@contextlib.contextmanager
def _processes() -> Iterator[list[subprocess.Popen[str]]]:
    """The demo's processes, stopped however it ends: Enter, Ctrl-C, an error, or a SIGTERM or
    SIGHUP (a ``kill``, a closed terminal), which by default would end the demo at once and leave
    its collector and agents running."""
    started: list[subprocess.Popen[str]] = []
    previous = {sig: signal.signal(sig, _exit_on_signal) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield started
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        # Agents first (they flush to the collector), then the collector.
        for process in reversed(started):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(started):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
