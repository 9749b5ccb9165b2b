"""``nodeagent-collector demo`` and ``loadgen``: the commands that offer the tools
(``nodeagent.tools``: the demo, the load generator, the simulator's scenarios). The only module of
the collector's command line that imports them (``tests/core/test_layers.py``), and loaded only
when one of these commands is named."""

from __future__ import annotations

import json

import click

from nodeagent.collector.cli.client import DEFAULT_COLLECTOR
from nodeagent.core.transport.channel import parse_target
from nodeagent.tools.demo import DemoPlan, run_demo
from nodeagent.tools.loadgen import LoadSpec, run_load
from nodeagent.tools.simulator import SCENARIOS


@click.command()
@click.option(
    "--seconds", type=click.FloatRange(min=5.0, max=600.0), default=25.0, show_default=True,
    help="How long to watch the fleet.",
)  # fmt: skip
@click.option(
    "--time-scale", type=click.FloatRange(min=1.0, max=1000.0), default=30.0, show_default=True,
    help="Simulated seconds per wall-clock second on the simulated rentals.",
)  # fmt: skip
@click.option(
    "--no-wait", is_flag=True, help="Stop at once after the report instead of keeping the fleet page up until Enter."
)
def demo(seconds: float, time_scale: float, no_wait: bool) -> None:
    """A collector, this machine's agent, two simulated 8-GPU rentals and a simulated 4-node job with a
    straggler: what nodeagent finds."""
    run_demo(DemoPlan(seconds=seconds, time_scale=time_scale, wait=not no_wait))


@click.command()
@click.option("--collector", default=DEFAULT_COLLECTOR, show_default=True, help="Collector HOST:PORT.")
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
        f"{result['streams_failed']} streams failed, {result['streams_reopened']} reopened, "
        f"{result['streams_redirected']} redirected to their owner"
    )
