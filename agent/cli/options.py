"""Options and checks that several commands share (sample, run, diag, record)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from nodeagent.agent.config import AgentConfig, ConfigError, load_config, parse_link_speed_flag
from nodeagent.agent.sources import UnknownSourceError, available, enabled_names


def source_flags(func: Callable[..., Any]) -> Callable[..., Any]:
    """``--collector.NAME / --no-collector.NAME`` for every registered source, and each
    source's own settings, ``--collector.NAME.OPTION VALUE`` (node_exporter's form)."""
    for name, cls in reversed(list(available().items())):
        for option in reversed(cls.options):
            func = click.option(
                f"--collector.{name}.{option.name}",
                _option_param(name, option.name),
                default=None,
                metavar=option.metavar,
                help=option.help,
            )(func)
        default = "on" if cls.default_enabled else "off"
        func = click.option(
            f"--collector.{name}/--no-collector.{name}",
            f"collector_{name}",  # the settings key (and NODEAGENT_COLLECTOR_NAME): kept
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


def enabled_sources(flags: dict[str, bool | str | None]) -> list[str]:
    """Source names from the ``--collector.X/--no-collector.X`` flags of a command."""
    settings = _option_params()
    overrides = {k.removeprefix("collector_"): bool(v) for k, v in flags.items() if v is not None and k not in settings}
    try:
        return enabled_names(overrides)
    except UnknownSourceError as err:
        raise click.UsageError(str(err)) from err


def source_options(flags: dict[str, bool | str | None]) -> dict[str, str]:
    """The sources' own settings that were given ("diskstats.device-include" -> value), each
    checked by its source: one that cannot be used is a usage error (one line, exit 2)."""
    settings = _option_params()
    given = {settings[k]: str(v) for k, v in flags.items() if k in settings and v is not None}
    for cls in available().values():
        try:
            cls.check_options(given)
        except ValueError as err:
            raise click.UsageError(str(err)) from err
    return given


def agent_config(path: Path | None, link_speed: tuple[str, ...]) -> AgentConfig:
    try:
        config = load_config(path) if path is not None else AgentConfig()
        speeds = dict(config.link_speeds)
        speeds.update(parse_link_speed_flag(flag) for flag in link_speed)
    except ConfigError as err:
        raise click.UsageError(str(err)) from err
    # replace: every section the file gave carries through (gpu_power_sample_seconds was lost here before).
    return dataclasses.replace(config, link_speeds=speeds)


def _option_param(source: str, option: str) -> str:
    # The settings framework's key for the flag: `.` and `-` become `_`.
    return f"collector_{source}_{option.replace('-', '_')}"


def _option_params() -> dict[str, str]:
    """Parameter name -> "<source>.<option>" for every source setting."""
    return {
        _option_param(name, option.name): f"{name}.{option.name}"
        for name, cls in available().items()
        for option in cls.options
    }
