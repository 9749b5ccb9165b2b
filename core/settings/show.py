"""``config show``: the effective configuration of a command, and where each value came from.

Shared by ``nodeagent`` and ``nodeagent-collector`` (each adds ``config_command`` to its root
group). The text output is laid out as the file is, one ``# source`` comment per value; secrets
are never printed: a setting named like a token, password or secret shows as ``<redacted>``, a
URL only as its scheme, host and port (credentials and webhook paths stay out of terminals and
tickets). Token and key files are named, never read.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from nodeagent.core.settings.framework import (
    COMMAND_TABLE,
    CONFIG_ENV,
    ENV_PREFIX,
    ConfiguredGroup,
    Origin,
    Resolved,
    WholeHelpGroup,
    env_name,
    resolve,
    settable,
    subcommands,
)
from nodeagent.core.settings.values import toml_key, toml_literal

PRECEDENCE = ("flag", "env", "file", "default")
_SECRET_NAME = re.compile(r"token|password|passwd|secret|credential|api_key", re.IGNORECASE)
_NAMES_A_FILE = ("_file", "_path", "_dir")
_FILE_SOURCES = {
    "flag": "--config",
    "env": f"${CONFIG_ENV}",
    "default": "the default location",
}


@dataclass(frozen=True, slots=True)
class Entry:
    table: str  # "" for top-level keys, else "command.sample", "link_speeds", "alerts"
    key: str
    value: object  # None: not set
    source: str  # one of PRECEDENCE
    where: str = ""  # the flag, the variable or "FILE: KEY"

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.key}" if self.table else self.key


@click.group("config", cls=WholeHelpGroup)
def config_command() -> None:
    """The configuration: file, NODEAGENT_* variables and defaults, and what they add up to."""


@config_command.command(
    "show", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON object instead of the annotated TOML.")
@click.option(
    "--config", "config_path", type=click.Path(path_type=Path, dir_okay=False),
    help=f"Configuration file (default: ${CONFIG_ENV}, else the program's file under /etc/nodeagent/ if present).",
)  # fmt: skip
@click.argument("command_args", nargs=-1, type=click.UNPROCESSED, metavar="[COMMAND [ARGS]...]")
def show(as_json: bool, config_path: Path | None, command_args: tuple[str, ...]) -> None:
    """What COMMAND (default: the service command) would run with, given ARGS, the file and the
    environment; each value with its source (flag > env > file > default)."""
    ctx = click.get_current_context()
    root_ctx = ctx.find_root()
    root = root_ctx.command
    if not isinstance(root, ConfiguredGroup):
        raise click.UsageError("config show needs a program whose commands read a configuration file")
    args = list(command_args) or [root.layout.service]
    resolved = resolve(root, root_ctx, args, fallback_file=config_path)
    entries = [*_command_entries(root, root_ctx, args, resolved), *_section_entries(resolved)]
    ignored = _unknown_variables(root, root_ctx)
    prog = root_ctx.info_name or root.name or ""
    if as_json:
        click.echo(json.dumps(_as_json(prog, resolved, entries, ignored), indent=2))
    else:
        click.echo(_as_text(prog, resolved, entries, ignored), nl=False)


def redact(key: str, value: object) -> object:
    """What may be printed of a setting's value."""
    if isinstance(value, Mapping):
        return {k: redact(str(k), v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact(key, v) for v in value]
    if value and _SECRET_NAME.search(key) and not key.endswith(_NAMES_A_FILE):
        return "<redacted>"
    if isinstance(value, str) and re.match(r"[a-z][a-z0-9+.-]*://", value, re.IGNORECASE):
        return _bare_url(value)
    return value


# ---- what is in force ---------------------------------------------------------------------------


def _command_entries(
    root: ConfiguredGroup, root_ctx: click.Context, args: list[str], resolved: Resolved
) -> Iterator[Entry]:
    """The program's options, then those of every command on the path ``args`` names."""
    yield from _entries(root, root_ctx, "", resolved.origins.get((), {}))
    parent, rest = _shadow(root_ctx, resolved), args
    group: click.Group = root
    names: tuple[str, ...] = ()
    while rest:
        name, cmd, rest = group.resolve_command(parent, rest)
        if cmd is None or name is None:
            raise click.UsageError(f"no such command {args[len(names)]!r}")
        names = (*names, name)
        sub_ctx = cmd.make_context(name, list(rest), parent=parent, resilient_parsing=True)
        table = "" if names == (root.layout.service,) else ".".join((COMMAND_TABLE, *names))
        yield from _entries(cmd, sub_ctx, table, resolved.origins.get(names, {}))
        if not isinstance(cmd, click.Group):
            return
        parent, group, rest = sub_ctx, cmd, [*sub_ctx._protected_args, *sub_ctx.args]


def _shadow(root_ctx: click.Context, resolved: Resolved) -> click.Context:
    """A context of the program that parses the shown command's flags without running anything."""
    return click.Context(
        root_ctx.command, info_name=root_ctx.info_name, default_map=resolved.default_map, resilient_parsing=True
    )


def _entries(cmd: click.Command, ctx: click.Context, table: str, origins: Mapping[str, Origin]) -> Iterator[Entry]:
    for key, param in settable(cmd).items():
        name = param.name or key
        value = ctx.params.get(name)
        source = ctx.get_parameter_source(name)
        if source is ParameterSource.COMMANDLINE:
            yield Entry(table, key, value, "flag", param.opts[0])
        elif source is ParameterSource.DEFAULT_MAP and name in origins:
            yield Entry(table, key, value, origins[name].source, origins[name].where)
        else:
            yield Entry(table, key, value, "default")


def _section_entries(resolved: Resolved) -> Iterator[Entry]:
    """The program's own sections: the file's value where it has one (as written), else the default."""
    source = str(resolved.file)
    for section, effective in resolved.sections.items():
        given = resolved.raw.get(section)
        if not isinstance(effective, Mapping):
            in_file = given is not None
            yield Entry("", section, given if in_file else effective, "file" if in_file else "default",
                        f"{source}: {section}" if in_file else "")  # fmt: skip
            continue
        written = given if isinstance(given, Mapping) else {}
        if not effective and not written:
            yield Entry("", section, {}, "default")  # an empty table: `link_speeds = {}`
            continue
        for key in dict.fromkeys([*effective, *written]):
            if key in written:
                yield Entry(section, str(key), written[key], "file", f"{source}: {section}.{key}")
            else:
                yield Entry(section, str(key), effective[key], "default")


def _unknown_variables(root: ConfiguredGroup, ctx: click.Context) -> list[str]:
    """NODEAGENT_* variables no option of the program reads (a typo, or the other program's)."""
    known = {CONFIG_ENV}

    def collect(cmd: click.Command) -> None:
        known.update(env_name(key) for key in settable(cmd))
        if isinstance(cmd, click.Group):
            for _name, sub in subcommands(cmd, ctx):
                collect(sub)

    collect(root)
    return sorted(var for var in os.environ if var.startswith(ENV_PREFIX) and var not in known)


# ---- output -------------------------------------------------------------------------------------


def _as_text(prog: str, resolved: Resolved, entries: list[Entry], ignored: list[str]) -> str:
    command = " ".join((prog, *resolved.command))
    lines = [
        f"# {command}: effective configuration; precedence: flag > env (NODEAGENT_*) > file > default",
        f"# file: {_file_line(resolved)}",
        *(f"# ignored: ${var} (no option of {prog} reads it)" for var in ignored),
    ]
    body: list[tuple[str, str]] = []
    table = ""
    for entry in sorted(entries, key=lambda e: (e.table != "", e.table)):
        if entry.table != table:
            table = entry.table
            body.append(("", ""))
            body.append((f"[{table}]", ""))
        shown = redact(entry.key, entry.value)
        if entry.value is None or entry.value == ():
            line = f"# {toml_key(entry.key)} (not set)"
        else:
            line = f"{toml_key(entry.key)} = {toml_literal(shown)}"
        note = entry.source if entry.source in ("default", "file") else f"{entry.source} {entry.where}"
        body.append((line, note))
    width = min(max((len(line) for line, note in body if note), default=0), 60)
    lines.extend(f"{line:<{width}}  # {note}" if note else line for line, note in body)
    return "\n".join(lines) + "\n"


def _as_json(prog: str, resolved: Resolved, entries: list[Entry], ignored: list[str]) -> dict[str, Any]:
    settings: dict[str, Any] = {}
    for entry in entries:
        item: dict[str, Any] = {"value": _plain(redact(entry.key, entry.value)), "source": entry.source}
        if entry.where:
            item["from"] = entry.where
        settings[entry.dotted] = item
    return {
        "program": prog,
        "command": " ".join(resolved.command),
        "file": str(resolved.file) if resolved.file is not None else None,
        "file_source": resolved.file_source,
        "precedence": list(PRECEDENCE),
        "settings": settings,
        "ignored_env": [f"{var}" for var in ignored],
    }


def _file_line(resolved: Resolved) -> str:
    if resolved.file is None:
        return f"none (no --config, no ${CONFIG_ENV}, nothing at the default location)"
    return f"{resolved.file} (from {_FILE_SOURCES[resolved.file_source]})"


def _plain(value: object) -> object:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def _bare_url(url: str) -> str:
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:
        port = ""
    rest = "/…" if (parts.path.strip("/") or parts.query or parts.fragment or parts.username) else "/"
    return f"{parts.scheme}://{host}{port}{rest}"
