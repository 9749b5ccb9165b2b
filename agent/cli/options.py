"""Options and checks that several commands share (sample, run, diag, record)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from nodeagent.agent.config import AgentConfig, ConfigError, load_config, parse_link_speed_flag
from nodeagent.agent.sources import UnknownSourceError, available, enabled_names


def collector_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--collector.NAME / --no-collector.NAME`` for every registered collector."""
    for name, cls in reversed(list(available().items())):
        default = "on" if cls.default_enabled else "off"
        func = click.option(
            f"--collector.{name}/--no-collector.{name}",
            f"collector_{name}",
            default=None,
            help=f"{cls.help} (default {default})",
        )(func)
    return func


def root_dir(option: str) -> Callable[[click.Context, click.Parameter, str], str]:
    def check(_ctx: click.Context, _param: click.Parameter, value: str) -> str:
        if not os.path.isdir(value) or not os.access(value, os.R_OK | os.X_OK):
            raise click.BadParameter(f"{value}: not a readable directory", param_hint=option)
        return value

    return check


def enabled_collectors(flags: dict[str, bool | None]) -> list[str]:
    """Collector names from the ``--collector.X/--no-collector.X`` flags of a command."""
    overrides = {k.removeprefix("collector_"): v for k, v in flags.items() if v is not None}
    try:
        return enabled_names(overrides)
    except UnknownSourceError as err:
        raise click.UsageError(str(err)) from err


def agent_config(path: Path | None, link_speed: tuple[str, ...]) -> AgentConfig:
    try:
        config = load_config(path) if path is not None else AgentConfig()
        speeds = dict(config.link_speeds)
        speeds.update(parse_link_speed_flag(flag) for flag in link_speed)
    except ConfigError as err:
        raise click.UsageError(str(err)) from err
    return AgentConfig(link_speeds=speeds, rescan_seconds=config.rescan_seconds)
