"""Traces: JSON Lines, one ``NodeReport`` per line in protobuf's JSON mapping with the .proto
field names (snake_case; 64-bit integers as strings, as the mapping writes them).

The reader checks each line and names the line of anything wrong with it: not JSON or not a
NodeReport, no ``node_id`` or ``time_unix_seconds``, or a time that does not advance for its
node. It hands problems to the caller, which skips the line or stops (``strict``).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import IO, BinaryIO

from google.protobuf import json_format

from nodeagent.v1 import nodeagent_pb2 as pb

# A longer line is not a report of any node we know (an 8-GPU report is a few kB of JSON).
MAX_LINE_BYTES = 4 << 20
_MESSAGE_CHARS = 160


def format_report(report: pb.NodeReport) -> str:
    """One line of JSON, without the newline; the same report gives the same bytes."""
    plain = json_format.MessageToDict(report, preserving_proto_field_name=True)
    return json.dumps(plain, separators=(",", ":"), ensure_ascii=False)


class TraceWriter:
    def __init__(self, stream: IO[str], *, flush: bool = False) -> None:
        self._stream = stream
        self._flush = flush
        self.count = 0

    def write(self, report: pb.NodeReport) -> None:
        self._stream.write(format_report(report) + "\n")
        if self._flush:
            self._stream.flush()
        self.count += 1


@dataclass(frozen=True, slots=True)
class TraceProblem:
    line: int
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.message}"


class TraceError(ValueError):
    """A bad line in a trace read strictly."""

    def __init__(self, problem: TraceProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


def read_trace(
    stream: BinaryIO, *, strict: bool = False, on_problem: Callable[[TraceProblem], None] | None = None
) -> Iterator[tuple[int, pb.NodeReport]]:
    """(line number, report) for every good line; a bad one raises ``TraceError`` when ``strict``,
    else goes to ``on_problem`` and is skipped. Blank lines are no reports and no problem."""
    last_time: dict[str, tuple[float, int]] = {}
    for number, raw in enumerate(_lines(stream), start=1):
        report: pb.NodeReport | None = None
        if raw is None:
            problem: str | None = f"longer than {MAX_LINE_BYTES} bytes"
        else:
            report, problem = _parse(raw)
        if report is not None and problem is None:
            problem = _check_time(report, number, last_time)
        if problem is None and report is not None:
            last_time[report.node_id] = (report.time_unix_seconds, number)
            yield number, report
            continue
        if problem is None:
            continue  # a blank line
        found = TraceProblem(number, problem)
        if strict:
            raise TraceError(found)
        if on_problem is not None:
            on_problem(found)


def _lines(stream: BinaryIO) -> Iterator[bytes | None]:
    """Raw lines; None for one over MAX_LINE_BYTES (the rest of it is read and dropped)."""
    while True:
        raw = stream.readline(MAX_LINE_BYTES + 1)
        if not raw:
            return
        if len(raw) > MAX_LINE_BYTES and not raw.endswith(b"\n"):
            while (rest := stream.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None
            continue
        yield raw


def _parse(raw: bytes) -> tuple[pb.NodeReport | None, str | None]:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        return None, f"not UTF-8 text (byte {err.start})"
    if not text.strip():
        return None, None
    if not text.lstrip().startswith("{"):
        return None, "not a NodeReport: not a JSON object"
    report = pb.NodeReport()
    try:
        # Unknown fields come from newer agents: they do not make a report unreadable.
        json_format.Parse(text, report, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, RecursionError) as err:
        return None, f"not a NodeReport: {_one_line(str(err))}"
    if not report.node_id:
        return None, "missing node_id"
    if report.time_unix_seconds == 0:
        return None, "missing time_unix_seconds"
    if not math.isfinite(report.time_unix_seconds) or report.time_unix_seconds <= 0:
        return None, f"time_unix_seconds is not a time: {report.time_unix_seconds!r}"
    return report, None


def _check_time(report: pb.NodeReport, number: int, last_time: dict[str, tuple[float, int]]) -> str | None:
    previous = last_time.get(report.node_id)
    if previous is None or report.time_unix_seconds > previous[0]:
        return None
    verb = "goes backwards" if report.time_unix_seconds < previous[0] else "does not advance"
    return (
        f"time {verb} for node {report.node_id!r}: {report.time_unix_seconds:.3f} "
        f"after {previous[0]:.3f} (line {previous[1]})"
    )


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= _MESSAGE_CHARS else line[: _MESSAGE_CHARS - 3] + "..."
