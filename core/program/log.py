"""Structured logs to stderr: JSON lines when not on a terminal, readable on one."""

from __future__ import annotations

import logging
import sys

from nodeagent.core.program.lean_imports import hidden

with hidden("rich"):  # see core/program/lean_imports.py
    import structlog


def configure_logging(level: str = "warning") -> None:
    renderer: structlog.typing.Processor
    if sys.stderr.isatty():
        renderer = structlog.dev.ConsoleRenderer(colors=True)
    else:
        renderer = structlog.processors.JSONRenderer()
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper())),
        # One write per line, its newline in it: print() writes the newline apart, and the lines of
        # processes sharing stderr (a front, its workers, the remote-write process) ran together.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        # Not cached: the programs log a few lines a minute, and a logger bound once would keep the
        # first configuration for good (structlog.testing.capture_logs could not see it).
        cache_logger_on_first_use=False,
    )
