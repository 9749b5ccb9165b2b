r"""Structured logs to stderr: JSON lines when not on a terminal, readable on one.

A logged value may carry a name from the wire (a job key, a process name). Neither form lets
its control characters through: JSON escapes C0 characters itself and, ASCII only, every other
one (C1, ``\u0085``, bidi overrides) as ``\uXXXX``; on a terminal every text value and key is
passed through ``escape_controls`` first (``core/program/safe_text.py``), so a line stays one
line and ESC sequences never reach the terminal."""

from __future__ import annotations

import logging
import sys
from typing import TYPE_CHECKING

from nodeagent.core.program.lean_imports import hidden
from nodeagent.core.program.safe_text import escape_controls

with hidden("rich"):  # see core/program/lean_imports.py
    import structlog

if TYPE_CHECKING:
    from structlog.typing import EventDict


def configure_logging(level: str = "warning") -> None:
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            *renderers(sys.stderr.isatty()),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        # One write per line, its newline in it: print() writes the newline apart, and the lines of
        # processes sharing stderr (a front, its workers, the remote-write process) ran together.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        # Not cached: the programs log a few lines a minute, and a logger bound once would keep the
        # first configuration for good (structlog.testing.capture_logs could not see it).
        cache_logger_on_first_use=False,
    )


def renderers(terminal: bool) -> list[structlog.typing.Processor]:
    """The last processors: a readable line on a terminal, a JSON line (ASCII, every control
    character escaped) elsewhere."""
    if terminal:
        return [escape_text_values, structlog.dev.ConsoleRenderer(colors=True)]
    return [structlog.processors.JSONRenderer(ensure_ascii=True)]


def escape_text_values(_logger: object, _name: str, event: EventDict) -> EventDict:
    """Every text key and value of the event with its control characters escaped."""
    return {
        escape_controls(str(key)): escape_controls(value) if isinstance(value, str) else value
        for key, value in event.items()
    }
