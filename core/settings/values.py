"""Values of click options from a TOML file and from environment variables: each goes through the
option's type and its own check, as a flag would, and a value that cannot be used is one line
saying where it came from, what was expected and what was found."""

from __future__ import annotations

import re
from collections.abc import Mapping

import click

# A list in a variable: items separated by commas or white space (NODEAGENT_COLLECTOR="a:50051,b:50051").
_LIST_SEPARATORS = re.compile(r"[,\s]+")


class SettingsError(click.UsageError):
    """A setting that cannot be used; the message is one line naming where it came from."""


def from_file(param: click.Option, value: object, where: str, ctx: click.Context) -> object:
    """A TOML value for ``param``: of the option's kind (an array for a repeatable flag, or one
    item of it alone: ``collector = "host:50051"`` is a list of one), converted, checked."""
    if param.multiple and not isinstance(value, list | Mapping):
        value = [value]  # its kind is checked as an item's, so `collector = 5` still says what it wants
    if param.multiple or param.nargs != 1:
        if not isinstance(value, list):
            raise SettingsError(f"{where}: expected {describe(param)}, got {shown(value)}")
        converted: object = tuple(_one_from_file(param, item, where, ctx) for item in value)
    else:
        converted = _one_from_file(param, value, where, ctx)
    _run_check(param, converted, where, ctx)
    return converted


def _one_from_file(param: click.Option, value: object, where: str, ctx: click.Context) -> object:
    kind = _kind(param)
    # TOML booleans are ints to Python; they are never numbers here, and numbers never strings.
    fits = {
        "bool": isinstance(value, bool),
        "int": isinstance(value, int) and not isinstance(value, bool),
        "float": isinstance(value, int | float) and not isinstance(value, bool),
        "str": isinstance(value, str),
    }[kind]
    if not fits:
        raise SettingsError(f"{where}: expected {describe(param, item=True)}, got {shown(value)}")
    return _convert(param, value, where, ctx)


def from_env(param: click.Option, text: str, where: str, ctx: click.Context) -> object:
    """A variable's text for ``param``, converted and checked; a repeatable flag's items are
    separated by commas or white space."""
    value: object
    if param.multiple or param.nargs != 1:
        value = tuple(_convert(param, item, where, ctx) for item in _LIST_SEPARATORS.split(text.strip()) if item)
    else:
        value = _convert(param, text, where, ctx)
    _run_check(param, value, where, ctx)
    return value


def _convert(param: click.Option, value: object, where: str, ctx: click.Context) -> object:
    try:
        return param.type.convert(value, param, ctx)
    except click.BadParameter as err:
        # Paths and custom types say why in their own words; numbers and choices are said by `describe`.
        why = "" if isinstance(param.type, _SAID_BY_DESCRIBE) else f" ({err.message.rstrip('.')})"
        raise SettingsError(f"{where}: expected {describe(param, item=True)}, got {shown(value)}{why}") from err


def _run_check(param: click.Option, value: object, where: str, ctx: click.Context) -> None:
    """The option's own check (a callback), so a file cannot hold what the command line refuses."""
    if param.callback is None:
        return
    try:
        param.callback(ctx, param, value)
    except click.UsageError as err:
        raise SettingsError(f"{where}: {err.message}") from err


_SAID_BY_DESCRIBE = (click.types.IntParamType, click.types.FloatParamType, click.types.BoolParamType, click.Choice)


def describe(param: click.Option, *, item: bool = False) -> str:
    """What a value of the option must be, in words: "a number at least 0.01", "a list of strings (HOST:PORT)"."""
    many = (param.multiple or param.nargs != 1) and not item
    kind = param.type
    if _kind(param) == "bool":
        return "true or false"
    if isinstance(kind, click.Choice):
        words = "one of " + ", ".join(str(c) for c in kind.choices)
        return f"a list of values, each {words}" if many else words
    noun = {"int": ("an integer", "integers"), "float": ("a number", "numbers")}.get(_kind(param))
    if noun is None:
        noun = ("a path", "paths") if isinstance(kind, click.Path) else ("a string", "strings")
    text = f"a list of {noun[1]}" if many else noun[0]
    if isinstance(kind, click.IntRange | click.FloatRange):
        text += " " + _range(kind)
    if param.metavar and param.metavar.upper() == param.metavar:
        text += f" ({param.metavar})"
    return text


def _range(kind: click.IntRange | click.FloatRange) -> str:
    low, high = kind.min, kind.max
    if low is not None and high is not None and not kind.min_open and not kind.max_open:
        return f"from {low} to {high}"
    parts = []
    if low is not None:
        parts.append(f"above {low}" if kind.min_open else f"at least {low}")
    if high is not None:
        parts.append(f"below {high}" if kind.max_open else f"at most {high}")
    return " and ".join(parts)


def _kind(param: click.Option) -> str:
    kind = param.type
    if (param.is_flag and param.is_bool_flag) or isinstance(kind, click.types.BoolParamType):
        return "bool"
    if isinstance(kind, click.types.IntParamType):
        return "int"
    if isinstance(kind, click.types.FloatParamType):
        return "float"
    return "str"


def shown(value: object) -> str:
    if isinstance(value, Mapping):
        return "a table"
    return toml_literal(value) if isinstance(value, bool | int | float | list | str) else repr(value)


def toml_literal(value: object) -> str:
    """A value as TOML writes it (strings quoted, true/false, arrays, inline tables)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        inner = ", ".join(f"{toml_key(str(k))} = {toml_literal(v)}" for k, v in value.items())
        return "{ " + inner + " }" if inner else "{}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_literal(v) for v in value) + "]"
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else toml_literal(key)
