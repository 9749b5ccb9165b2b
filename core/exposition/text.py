"""Prometheus text exposition (format 0.0.4) written directly, for families with many samples.

prometheus_client's encoder builds a ``Sample`` with a dict of labels per value, then sorts and
escapes every label on every scrape: about 7 µs a sample on the development machine, 4 s for
10,000 8-GPU nodes. The fleet's per-node and per-GPU families are written here instead, one
f-string per sample with each node's label text made once per scrape. The output is the same
format (a test parses it with prometheus_client's parser and ``promtool check metrics``).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping


class TextFamily:
    """One metric family: its HELP and TYPE lines, then its samples in the order added."""

    __slots__ = ("help", "kind", "lines", "name")

    def __init__(self, name: str, kind: str, help_text: str) -> None:
        self.name = name
        self.kind = kind
        self.help = help_text
        self.lines: list[str] = []

    def add(self, labels: str, value: float) -> None:
        """``labels``: already rendered (``label()`` joined by commas)."""
        self.lines.append(f"{self.name}{{{labels}}} {format_value(value)}\n")

    def header(self) -> str:
        """The HELP and TYPE lines, written once per family for the process: a page is the same
        hundred-odd families every scrape. Kept by name (a string's hash is kept with it), and
        used while the family's type and help are the ones they were written from."""
        kept = _HEADERS.get(self.name)
        if kept is not None and kept[0] == self.kind and kept[1] == self.help:
            return kept[2]
        if len(_HEADERS) >= _MAX_HEADERS:
            _HEADERS.clear()
        help_text = self.help.replace("\\", r"\\").replace("\n", r"\n")
        text = f"# HELP {self.name} {help_text}\n# TYPE {self.name} {self.kind}\n"
        _HEADERS[self.name] = (self.kind, self.help, text)
        return text

    def render(self) -> str:
        return self.header() + "".join(self.lines)


_HEADERS: dict[str, tuple[str, str, str]] = {}
_MAX_HEADERS = 10_000  # a help text built from data (a device name) must not grow it for ever


def render(families: Iterable[TextFamily]) -> str:
    """The families' text, joined once (not a string per family and then the page)."""
    parts: list[str] = []
    for family in families:
        parts.append(family.header())
        parts.extend(family.lines)
    return "".join(parts)


def label(name: str, value: str) -> str:
    return f'{name}="{escape(value)}"'


def escape(value: str) -> str:
    if "\\" in value or '"' in value or "\n" in value:
        return value.replace("\\", r"\\").replace('"', r"\"").replace("\n", r"\n")
    return value


def format_value(value: float) -> str:
    """As Go's strconv (and prometheus_client) write it: ``+Inf``, ``-Inf``, ``NaN``, else repr."""
    value = float(value)
    if math.isfinite(value):
        return repr(value)
    if math.isnan(value):
        return "NaN"
    return "+Inf" if value > 0 else "-Inf"


def number(value: float) -> str:
    """A sample's value: an int as its digits (exact past 2^53, where a float is not), a float as
    ``format_value`` writes it. Counters from the kernel and NVML are ints, most of a page."""
    kind = type(value)
    if kind is int:
        return str(value)
    if kind is float and value - value == 0.0:  # finite (inf - inf and NaN - NaN are NaN)
        return repr(value)
    return format_value(value)


def label_text(labels: Mapping[str, str]) -> str:
    """A label set as the text between the braces, sorted by name (as prometheus_client writes it)."""
    return ",".join(f'{name}="{escape(value)}"' for name, value in sorted(labels.items()))


def sample_line(name: str, labels: str, value: float) -> str:
    """One sample's line; ``labels`` as ``label_text`` writes them, "" for none."""
    if labels:
        return f"{name}{{{labels}}} {number(value)}\n"
    return f"{name} {number(value)}\n"


Labels = tuple[tuple[str, str], ...]
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
_UNESCAPE = re.compile(r"\\(.)")


def _unescaped(match: re.Match[str]) -> str:
    char = match[1]
    return "\n" if char == "n" else char


def series_values(families: Iterable[TextFamily]) -> tuple[list[str], list[float]]:
    """The sample lines of ``families`` as their series and their values, in order. A series is
    the line's text before its value (``name{labels}``, or the name alone), the same text on every
    page for the same series, so a reader can key what it knows of a series on it and parse it
    (``parse_series``) only the first time. Values as the text format's readers take them (float)."""
    split = [line.rpartition(" ") for family in families for line in family.lines]
    # float() takes the trailing newline.
    return [series for series, _, _ in split], [float(value) for _, _, value in split]


def parse_series(series: str) -> tuple[str, Labels]:
    """A ``series_values`` series text as its name and its labels, in page order and unescaped."""
    name, _, text = series.partition("{")
    return name, tuple((m[1], _UNESCAPE.sub(_unescaped, m[2])) for m in _LABEL.finditer(text[:-1]))
