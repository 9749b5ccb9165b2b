"""``nodeagent-collector``: the collector's command line.

Errors are one line on stderr naming the bad value, exit status 2.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

from nodeagent import __version__
from nodeagent.collector.config import TABLES, effective_sections
from nodeagent.core.program.command_line import run_cli
from nodeagent.core.program.log import configure_logging
from nodeagent.core.settings.framework import ConfiguredGroup, Layout

# collector.toml: `serve`'s flags at the top level, other commands in [command.NAME], and the
# [alerts], [detector] and [sinks] tables (the flags that override [sinks] are written there).
COLLECTOR_LAYOUT = Layout(
    default_file=Path("/etc/nodeagent/collector.toml"),
    service="serve",
    sections=frozenset(TABLES),
    check_sections=effective_sections,
    file_forms={"alertmanager_url": "sinks", "webhook_url": "sinks"},
)

# Each command's modules are imported when the command line names it: `serve`, the daemon, then
# holds none of the demo's, the load generator's and the simulator's (nodeagent.tools), nor the
# query commands' or replay's.
COMMANDS = {
    "alerts": "nodeagent.collector.cli.nodes:alerts",
    "config": "nodeagent.core.settings.show:config_command",
    "demo": "nodeagent.collector.cli.demo:demo",
    "forget": "nodeagent.collector.cli.nodes:forget",
    "history": "nodeagent.collector.cli.history:history",
    "jobs": "nodeagent.collector.cli.jobs:jobs",
    "ledger": "nodeagent.collector.cli.ledger:ledger",
    "loadgen": "nodeagent.collector.cli.demo:loadgen",
    "nodes": "nodeagent.collector.cli.nodes:nodes",
    "replay": "nodeagent.collector.cli.replay:replay",
    "reset-history": "nodeagent.collector.cli.history:reset_history",
    "serve": "nodeagent.collector.cli.serve:serve",
}


@click.group(cls=ConfiguredGroup, layout=COLLECTOR_LAYOUT, lazy_commands=COMMANDS)
@click.version_option(__version__, prog_name="nodeagent-collector")
@click.option(
    "--log-level", type=click.Choice(["debug", "info", "warning", "error"]), default="info", show_default=True,
    help="Least severe log level on stderr.",
)  # fmt: skip
def cli(log_level: str) -> None:
    """Fleet collector for nodeagent reports."""
    configure_logging(log_level)


def main() -> NoReturn:
    sys.exit(run_cli(cli, "nodeagent-collector"))
