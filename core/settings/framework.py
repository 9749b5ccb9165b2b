"""Every flag of every command, settable in a TOML file and through ``NODEAGENT_*`` variables.

Precedence, highest first: a flag on the command line, an environment variable, the file, the
built-in default. The settable keys are derived from each command's click options, so a new flag
needs no entry anywhere: ``--spool-max-bytes`` is the file key ``spool_max_bytes`` and the
variable ``NODEAGENT_SPOOL_MAX_BYTES``; ``--collector.gpu/--no-collector.gpu`` is ``collector_gpu``.

One file per program: ``--config PATH`` (on commands that have it), else ``$NODEAGENT_CONFIG``,
else the program's default (``/etc/nodeagent/agent.toml``) when it exists. Its layout:

- top-level keys: the options of the program itself (``log_level``) and of its service command
  (``run`` for the agent, ``serve`` for the collector);
- ``[command.NAME]`` tables: the options of the other commands (``[command.sample]``);
- the program's sections (``[link_speeds]``, ``[detector]`` ...), checked by the modules that own them.

File and environment values go through the option's click type and its check, as a flag would,
and reach click as ``ctx.default_map``, which a flag on the command line overrides. A value that
cannot be used stops start-up with one line naming the file (or the variable), the key and what
was expected.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from nodeagent.core.settings.readers import read_toml
from nodeagent.core.settings.values import SettingsError, from_env, from_file, shown

ENV_PREFIX = "NODEAGENT_"
CONFIG_ENV = "NODEAGENT_CONFIG"
COMMAND_TABLE = "command"
CONFIG_FLAG = "--config"
_HELP_ARGS = frozenset({"-h", "--help", "--version"})
_HELP_OPTION_NAMES = {"help_option_names": ["-h", "--help"]}


@dataclass(frozen=True, slots=True)
class Layout:
    """How one program's configuration file is laid out."""

    default_file: Path
    # The command whose options are the file's top-level keys (the one a service unit runs).
    service: str
    # Top-level keys owned by the program's own sections, and their check: the raw sections in,
    # their effective values out (``ValueError`` with a one-line message when one cannot be used).
    sections: frozenset[str]
    check_sections: Callable[[Mapping[str, Any], str], Mapping[str, Any]]
    # Options whose file form is a section: ``--link-speed`` is written as the ``[link_speeds]`` table.
    file_forms: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Origin:
    source: str  # "env" or "file"
    where: str  # the variable, or "FILE: KEY"


@dataclass(frozen=True, slots=True)
class Resolved:
    """What the file and the environment say, for one command line."""

    file: Path | None
    file_source: str  # "flag" (--config), "env" (NODEAGENT_CONFIG), "default", or "none"
    raw: Mapping[str, Any]
    default_map: dict[str, Any]
    # Command path (() for the program, ("run",), ("diag", "net")) -> parameter name -> origin.
    origins: Mapping[tuple[str, ...], Mapping[str, Origin]]
    sections: Mapping[str, Any]
    command: tuple[str, ...]  # the command path the arguments name


class WholeHelpGroup(click.Group):
    """A group whose command list shows each command's whole first sentence (wrapped), where
    click would cut it to the terminal's width minus the names and end it with "...".

    ``lazy_commands``: command name -> ``"module:attribute"`` of commands imported only when the
    command line names them (or help lists them), click's documented lazy-loading pattern. The
    daemon then carries only its own command's modules: ``diag``'s checks and ``top``'s rich are
    megabytes resident that ``run`` never uses."""

    def __init__(self, *args: Any, lazy_commands: Mapping[str, str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy_commands = dict(lazy_commands or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy_commands})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy_commands and cmd_name not in self.commands:
            module, _, attribute = self.lazy_commands[cmd_name].partition(":")
            command = getattr(importlib.import_module(module), attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"{self.lazy_commands[cmd_name]} is not a click command")
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        commands = [(name, cmd) for name in self.list_commands(ctx) if (cmd := self.get_command(ctx, name))]
        rows = [(name, cmd.get_short_help_str(limit=10_000)) for name, cmd in commands if not cmd.hidden]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class ConfiguredGroup(WholeHelpGroup):
    """A program's root group: its commands take their defaults from its file and environment."""

    def __init__(self, *args: Any, layout: Layout, **kwargs: Any) -> None:
        # Both programs take -h for --help, on every command (click hands it down to each context).
        kwargs["context_settings"] = {**_HELP_OPTION_NAMES, **(kwargs.get("context_settings") or {})}
        super().__init__(*args, **kwargs)
        self.layout = layout

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None and not ctx.resilient_parsing:
            try:
                resolved = resolve(self, ctx, list(args))
            except SettingsError:
                # --help and --version still work with a broken file.
                if not _HELP_ARGS.intersection(args):
                    raise
            else:
                ctx.default_map = resolved.default_map
        return super().parse_args(ctx, args)


def resolve(root: ConfiguredGroup, ctx: click.Context, args: list[str], fallback_file: Path | None = None) -> Resolved:
    """Read and check the file and the environment for the command line ``args`` (after the program name).

    ``fallback_file`` stands in for a ``--config`` flag when the command line has none."""
    layout = root.layout
    path = list(_invoked(root, ctx, args))
    flagged = next((raw for _names, _cmd, raw in reversed(path) if raw is not None), None)
    file, file_source = _locate(layout, Path(flagged) if flagged is not None else fallback_file)
    raw = read_toml(file, SettingsError) if file is not None else {}
    values, origins, sections = _check_file(root, ctx, raw, str(file))
    for names, cmd, _raw in path:
        for name, (value, origin) in _env_values(cmd, _context(ctx, names, cmd)).items():
            values.setdefault(names, {})[name] = value
            origins.setdefault(names, {})[name] = origin
        config = _config_option(cmd)
        if config is not None and file is not None and config.name is not None:
            values.setdefault(names, {})[config.name] = str(file)
    default_map: dict[str, Any] = {}
    for names, settings in sorted(values.items()):
        table = default_map
        for name in names:
            table = table.setdefault(name, {})
        table.update(settings)
    return Resolved(
        file=file,
        file_source=file_source,
        raw=raw,
        default_map=default_map,
        origins=origins,
        sections=sections,
        command=path[-1][0] if path else (),
    )


def settable(cmd: click.Command) -> dict[str, click.Option]:
    """File key -> option, for every option of ``cmd`` a file or a variable may set."""
    options: dict[str, click.Option] = {}
    for param in cmd.params:
        if not isinstance(param, click.Option) or not param.expose_value or param.is_eager:
            continue
        if CONFIG_FLAG in param.opts:
            continue  # the file is found through it; it cannot name itself
        key = option_key(param)
        if key in options:
            raise RuntimeError(f"{cmd.name}: options {options[key].opts} and {param.opts} share the key {key!r}")
        options[key] = param
    return options


def option_key(param: click.Option) -> str:
    """``--spool-max-bytes`` -> ``spool_max_bytes``; ``--collector.gpu`` -> ``collector_gpu``."""
    long = [opt for opt in param.opts if opt.startswith("--")] or param.opts
    return long[0].lstrip("-").replace("-", "_").replace(".", "_")


def env_name(key: str) -> str:
    return ENV_PREFIX + key.upper()


def subcommands(group: click.Group, ctx: click.Context) -> Iterator[tuple[str, click.Command]]:
    for name in group.list_commands(ctx):
        cmd = group.get_command(ctx, name)
        if cmd is not None:
            yield name, cmd


# ---- the command line ---------------------------------------------------------------------------


def _invoked(
    root: click.Group, ctx: click.Context, args: list[str]
) -> Iterator[tuple[tuple[str, ...], click.Command, str | None]]:
    """(command path, command, its raw ``--config`` value) from the program down to the command the
    arguments name. Parsing stops quietly at what click itself will refuse, with a better message."""
    cmd: click.Command = root
    names: tuple[str, ...] = ()
    while True:
        cctx = _context(ctx, names, cmd)
        try:
            opts, rest, _order = cmd.make_parser(cctx).parse_args(args=list(args))
        except click.UsageError:
            yield names, cmd, None
            return
        config = _config_option(cmd)
        flagged = opts.get(config.name) if config is not None and config.name is not None else None
        yield names, cmd, flagged if isinstance(flagged, str) else None
        if not isinstance(cmd, click.Group) or not rest:
            return
        sub = cmd.get_command(cctx, rest[0])
        if sub is None:
            return
        names, cmd, args = (*names, rest[0]), sub, rest[1:]


def _context(ctx: click.Context, names: tuple[str, ...], cmd: click.Command) -> click.Context:
    """A context for parsing, converting and checking values of ``cmd`` (never invoked)."""
    if not names:
        return ctx
    settings = {**cmd.context_settings, "resilient_parsing": True}
    return click.Context(cmd, info_name=names[-1], parent=ctx, **settings)


def _config_option(cmd: click.Command) -> click.Option | None:
    return next((p for p in cmd.params if isinstance(p, click.Option) and CONFIG_FLAG in p.opts), None)


# ---- the file -----------------------------------------------------------------------------------


def _locate(layout: Layout, flagged: Path | None) -> tuple[Path | None, str]:
    if flagged is not None:
        return flagged, "flag"
    from_env = os.environ.get(CONFIG_ENV)
    if from_env:
        return Path(from_env), "env"
    # The default file is optional: a node configured by flags alone has none.
    if layout.default_file.exists():
        return layout.default_file, "default"
    return None, "none"


def _check_file(
    root: ConfiguredGroup, ctx: click.Context, raw: Mapping[str, Any], source: str
) -> tuple[dict[tuple[str, ...], dict[str, Any]], dict[tuple[str, ...], dict[str, Origin]], Mapping[str, Any]]:
    """Every key of the file checked: values per command path, their origins, the effective sections."""
    layout = root.layout
    service = root.get_command(ctx, layout.service)
    if service is None:
        raise RuntimeError(f"{layout.service}: no such command")
    top: list[tuple[tuple[str, ...], click.Command]] = [((), root), ((layout.service,), service)]
    values: dict[tuple[str, ...], dict[str, Any]] = {}
    origins: dict[tuple[str, ...], dict[str, Origin]] = {}

    def take(names: tuple[str, ...], cmd: click.Command, key: str, value: object, where: str) -> bool:
        param = settable(cmd).get(key)
        if param is None or param.name is None:
            return False
        if key in layout.file_forms:
            raise SettingsError(f"{source}: {where}: written as the [{layout.file_forms[key]}] table in a file")
        value = from_file(param, value, f"{source}: {where}", _context(ctx, names, cmd))
        values.setdefault(names, {})[param.name] = value
        origins.setdefault(names, {})[param.name] = Origin("file", f"{source}: {where}")
        return True

    def commands(group: click.Group, names: tuple[str, ...], table: object, where: str) -> None:
        if not isinstance(table, Mapping):
            raise SettingsError(f"{source}: {where}: expected a table of [{where}.NAME] tables, got {shown(table)}")
        group_ctx = _context(ctx, names, group)
        known = group.list_commands(group_ctx)
        for name, body in table.items():
            here = f"{where}.{name}"
            cmd = group.get_command(group_ctx, name) if name in known else None
            if cmd is None:
                raise SettingsError(f"{source}: {here}: unknown command{_suggest(name, known)}")
            if not names and name == layout.service:
                raise SettingsError(f"{source}: {here}: the settings of {name} are the file's top-level keys")
            if not isinstance(body, Mapping):
                raise SettingsError(f"{source}: {here}: expected a table, got {shown(body)}")
            for key, value in body.items():
                sub_names = (
                    cmd.list_commands(_context(ctx, (*names, name), cmd)) if isinstance(cmd, click.Group) else []
                )
                if isinstance(cmd, click.Group) and isinstance(value, Mapping) and key in sub_names:
                    commands(cmd, (*names, name), {key: value}, here)
                elif not take((*names, name), cmd, key, value, f"{here}.{key}"):
                    known_keys = [*settable(cmd), *sub_names]
                    raise SettingsError(f"{source}: {here}.{key}: unknown key{_suggest(key, known_keys)}")

    section_values: dict[str, Any] = {}
    for key, value in raw.items():
        if key in layout.sections:
            section_values[key] = value
        elif key == COMMAND_TABLE:
            commands(root, (), value, COMMAND_TABLE)
        elif key == CONFIG_FLAG.lstrip("-"):
            raise SettingsError(f"{source}: {key}: a file cannot name another; use --config or {CONFIG_ENV}")
        # A key may set an option of the program and of its service command alike: both take it.
        elif not any([take(names, cmd, key, value, key) for names, cmd in top]):  # noqa: C419 (no short cut)
            if isinstance(value, Mapping):
                raise SettingsError(
                    f"{source}: [{key}]: unknown table{_suggest(key, [*layout.sections, COMMAND_TABLE])}"
                )
            known = [*layout.sections, COMMAND_TABLE, *settable(root), *settable(service)]
            raise SettingsError(f"{source}: {key}: unknown key{_suggest(key, known)}")
    return values, origins, _checked_sections(layout, section_values, source)


def _checked_sections(layout: Layout, section_values: dict[str, Any], source: str) -> Mapping[str, Any]:
    try:
        return layout.check_sections(section_values, source)
    except ValueError as err:
        raise SettingsError(str(err)) from err


# ---- the environment ----------------------------------------------------------------------------


def _env_values(cmd: click.Command, ctx: click.Context) -> dict[str, tuple[object, Origin]]:
    found: dict[str, tuple[object, Origin]] = {}
    for key, param in settable(cmd).items():
        var = env_name(key)
        text = os.environ.get(var, "")
        if text and param.name is not None:  # an empty variable is unset, as in click and systemd
            found[param.name] = (from_env(param, text, f"${var}", ctx), Origin("env", var))
    return found


def _suggest(key: str, known: Any) -> str:
    import difflib  # noqa: PLC0415  (only for a mistyped key; the daemon's memory has a budget)

    names = sorted(str(k) for k in known)
    close = difflib.get_close_matches(key, names, n=1)
    if close:
        return f" (did you mean {close[0]!r}?)"
    return f" (known: {', '.join(names)})"
