"""Diag output: a table readable at a glance with a one-line verdict last, or the same content as
JSON. Colour only when asked (the command asks when stdout is a terminal and NO_COLOR is unset)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from nodeagent.agent.diag.model import CheckResult, DiagReport, Status
from nodeagent.core.program.safe_text import escape_controls

_COLOURS: Final = {Status.PASS: "32", Status.WARN: "33", Status.FAIL: "1;31", Status.SKIP: "2"}
_HEADER: Final = ("STATUS", "CHECK", "SUBJECT", "VALUE", "EXPECTED")
_MAX_CELL: Final = 64


def render_json(report: DiagReport) -> str:
    return json.dumps(report.to_dict(), ensure_ascii=False, indent=2) + "\n"


def render_table(report: DiagReport, colour: bool = False) -> str:
    head = f"nodeagent diag  node {report.node_id or '?'}"
    head += f"  profile {report.profile or '(none)'}  {report.duration_seconds:.1f} s"
    shown = _merge_skips(report.results)
    rows = [(r.status.value, check, _cell(r.subject), _cell(r.value), _cell(r.expected or "-")) for check, r in shown]
    widths = [max(len(row[i]) for row in [_HEADER, *rows]) for i in range(len(_HEADER))]
    lines = [head, _line(_HEADER, widths)]
    indent = " " * (widths[0] + 2)
    for (_, result), row in zip(shown, rows, strict=True):
        line = _line(row, widths)
        if colour:
            line = _paint(row[0], _COLOURS[result.status]) + line[len(row[0]) :]
        lines.append(line)
        if result.hint and result.status is not Status.PASS:
            note = f"{indent}↳ {escape_controls(result.hint)}"
            lines.append(_paint(note, "2") if colour else note)
    verdict = report.verdict()
    lines.append(_paint(verdict, _COLOURS[Status.PASS if report.healthy else Status.FAIL]) if colour else verdict)
    return "\n".join(lines) + "\n"


def _merge_skips(results: Sequence[CheckResult]) -> list[tuple[str, CheckResult]]:
    """(check label, result) per row: a run of checks skipped for one reason (no GPU driver) is
    one row, ``gpu.count +13 more``; the JSON output keeps each."""
    rows: list[tuple[str, CheckResult]] = []
    run: list[CheckResult] = []

    def flush() -> None:
        if len(run) > 2:
            rows.append((f"{run[0].check} +{len(run) - 1} more", run[0]))
        else:
            rows.extend((r.check, r) for r in run)
        run.clear()

    for result in results:
        same = run and result.status is Status.SKIP and (result.subject, result.hint) == (run[0].subject, run[0].hint)
        if not same:
            flush()
        if result.status is Status.SKIP:
            run.append(result)
        else:
            rows.append((result.check, result))
    flush()
    return rows


def _line(cells: tuple[str, ...], widths: list[int]) -> str:
    return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()


def _cell(text: str) -> str:
    text = escape_controls(text)  # a device's name or a file's content, read on the node
    return text if len(text) <= _MAX_CELL else text[: _MAX_CELL - 1] + "…"


def _paint(text: str, code: str) -> str:
    return f"\x1b[{code}m{text}\x1b[0m"
