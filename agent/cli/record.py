"""``nodeagent record``: a trace of this node, or of a simulated one in virtual time.

Live, the sampler ticks every ``--interval`` for ``--duration`` seconds. With ``--simulate`` the
simulator steps through the same span of virtual time as fast as the CPU allows; with the same
``--seed`` (and options) the file is the same, byte for byte.
"""

from __future__ import annotations

import contextlib
import math
import platform
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import click

from nodeagent.agent.config import AgentConfig, ConfigError, load_config
from nodeagent.agent.kernel.files import raise_open_file_limit
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots, enabled_names
from nodeagent.core.wire.trace import TraceWriter
from nodeagent.tools.simulator import SCENARIOS, ScenarioError, Simulation
from nodeagent.tools.simulator.scenarios import parse_overrides

_ROOT = click.Path(exists=True, file_okay=False, readable=True)


@click.command()
@click.option(
    "--out", "out", required=True, type=click.Path(dir_okay=False, allow_dash=True), help="Trace file ('-': stdout)."
)
@click.option("--duration", required=True, type=click.FloatRange(min=0, min_open=True), help="Seconds to record.")
@click.option(
    "--interval", type=click.FloatRange(min=0.01), default=1.0, show_default=True, help="Seconds between reports."
)
@click.option("--simulate", "scenario", metavar="SCENARIO", help=f"Record a simulated node: {', '.join(SCENARIOS)}.")
@click.option("--seed", type=int, help="Noise seed of the simulation (default 0).")
@click.option("--set", "overrides", multiple=True, metavar="NAME=VALUE", help="Simulation parameter. Repeatable.")
@click.option("--gpus", type=click.IntRange(1, 64), default=8, show_default=True, help="GPUs of the simulated node.")
@click.option("--node-id", help="Node id (default: the host name; sim-SCENARIO when simulating).")
@click.option("--procfs", default="/proc", show_default=True, type=_ROOT, help="procfs root (live).")
@click.option("--sysfs", default="/sys", show_default=True, type=_ROOT, help="sysfs root (live).")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Agent configuration (TOML, live).")
def record(
    out: str,
    duration: float,
    interval: float,
    scenario: str | None,
    seed: int | None,
    overrides: tuple[str, ...],
    gpus: int,
    node_id: str | None,
    procfs: str,
    sysfs: str,
    config_path: Path | None,
) -> None:
    """Record a trace of this node, or of a simulated one (--simulate).

    One NodeReport per line: JSON Lines in protobuf's JSON mapping with the .proto field names."""
    if scenario is None and (seed is not None or overrides):
        raise click.UsageError("--seed and --set need --simulate")
    if scenario is not None and scenario not in SCENARIOS:
        raise click.BadParameter(
            f"unknown scenario {scenario!r} (known: {', '.join(SCENARIOS)})", param_hint="--simulate"
        )
    if scenario is not None:
        try:
            params = parse_overrides(overrides)
            sim = Simulation(scenario, node_id=node_id or f"sim-{scenario}", seed=seed or 0, gpus=gpus, **params)
        except ScenarioError as err:
            raise click.BadParameter(str(err), param_hint="--set") from err
        with _open(out) as stream:
            writer = TraceWriter(stream)
            _simulate(writer, sim, duration, interval)
    else:
        try:
            config = load_config(config_path) if config_path is not None else AgentConfig()
        except ConfigError as err:
            raise click.UsageError(str(err)) from err
        with _open(out) as stream:
            writer = TraceWriter(stream, flush=True)
            _live(writer, node_id, Roots(procfs, sysfs), config, duration, interval)
    where = "stdout" if out == "-" else out
    click.echo(f"nodeagent: recorded {writer.count} reports to {where}", err=True)


def _simulate(writer: TraceWriter, sim: Simulation, duration: float, interval: float) -> None:
    """Reports at 0, interval, ..., duration of virtual time; the first carries the topology."""
    steps = max(1, math.floor(duration / interval + 1e-9))
    for seq in range(1, steps + 2):
        report = sim.step(0.0 if seq == 1 else interval)
        report.epoch, report.seq = 1, seq
        if seq == 1:
            report.info.CopyFrom(sim.info())
        writer.write(report)


def _live(
    writer: TraceWriter,
    node_id: str | None,
    roots: Roots,
    config: AgentConfig,
    duration: float,
    interval: float,
) -> None:
    raise_open_file_limit()
    sampler = Sampler(enabled_names({}), node_id=node_id or platform.node(), roots=roots, config=config)
    start = time.monotonic()
    try:
        deadline = start
        while True:
            writer.write(sampler.tick())
            deadline += interval
            if deadline - start > duration + 1e-9:
                return
            time.sleep(max(0.0, deadline - time.monotonic()))
    finally:
        sampler.close()


@contextlib.contextmanager
def _open(out: str) -> Iterator[IO[str]]:
    if out == "-":
        yield sys.stdout
        return
    try:
        stream = open(out, "w", encoding="utf-8", newline="\n")  # noqa: SIM115 - closed below
    except OSError as err:
        raise click.BadParameter(f"{out}: {err.strerror}", param_hint="--out") from err
    with stream:
        yield stream
