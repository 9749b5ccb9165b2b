"""A GPU minute's jobs in one TEXT column (``history_minutes.jobs``, ``history_ledger.jobs``).

A job key is one value whatever it holds: the wire lets it hold any printable character
(``core/wire/validate.py``), a comma and a space among them. So each job is written after the
ASCII unit separator (``\\x1f``), which no printable key can hold: ``torch/run,x`` alone is
``"\\x1ftorch/run,x"``, two jobs ``"\\x1fa\\x1fb"``, none ``""`` (what the queries' ``jobs!=''``
leave out). Rows written before this (comma-joined, never starting with the separator) are
read as they were written; a comma in a key of those rows was already lost when they were.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

SEPARATOR: Final = "\x1f"


def stored_jobs(jobs: Iterable[str]) -> str:
    """The column's text of these jobs."""
    return "".join(SEPARATOR + job for job in jobs if job)


def jobs_of(text: str) -> tuple[str, ...]:
    """The jobs of a column's text, each one whole."""
    if text.startswith(SEPARATOR):
        return tuple(job for job in text[1:].split(SEPARATOR) if job)
    return tuple(job for job in text.split(",") if job)  # written comma-joined, before the separator
