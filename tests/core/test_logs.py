"""Logs: JSON lines when stderr is not a terminal, readable lines on one; levels; no secrets."""

from __future__ import annotations

import io
import json
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

import pytest
import structlog

from nodeagent.core.program.log import configure_logging
from tests.fakes.trees import REPO


def _run(level: str, tmp_path: Path, stderr: int | None = None) -> subprocess.CompletedProcess[str]:
    token = tmp_path / "token"
    token.write_text("hunter2-secret\n")
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "--log-level", level, "run", "--collector", "127.0.0.1:1",
         "--node-id", "log-node", "--interval", "0.05", "--max-reports", "2", "--deadline", "1.5", "--no-collector.gpu",
         "--token-file", str(token)],
        cwd=REPO, capture_output=stderr is None, stderr=stderr, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_json_lines_off_a_terminal_with_levels_and_no_secrets(tmp_path: Path) -> None:
    done = _run("info", tmp_path)
    lines = [line for line in done.stderr.splitlines() if line.startswith("{")]
    events = [json.loads(line) for line in lines]
    assert "agent running" in {e["event"] for e in events}
    assert all({"event", "level", "timestamp"} <= e.keys() for e in events)
    assert {e["level"] for e in events} <= {"info", "warning", "error"}
    assert "hunter2-secret" not in done.stderr
    quiet = _run("warning", tmp_path)
    quiet_events = [json.loads(line) for line in quiet.stderr.splitlines() if line.startswith("{")]
    assert all(e["level"] != "info" for e in quiet_events)
    assert "reports not acknowledged" in quiet.stderr  # the outcome is said whatever the level


def test_readable_lines_on_a_terminal(tmp_path: Path) -> None:
    primary, secondary = pty.openpty()
    try:
        _run("info", tmp_path, stderr=secondary)
        os.close(secondary)
        secondary = -1
        chunks = []
        while True:
            try:
                chunk = os.read(primary, 65536)
            except OSError:  # EIO once the writer is gone
                break
            if not chunk:
                break
            chunks.append(chunk)
    finally:
        if secondary != -1:
            os.close(secondary)
        os.close(primary)
    text = b"".join(chunks).decode(errors="replace")
    assert "agent running" in text
    assert not any(line.lstrip().startswith("{") for line in text.splitlines() if "agent running" in line)


def test_each_line_is_one_write_so_processes_sharing_stderr_never_run_together(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A front, its workers and the remote-write process share one stderr: a line written in two
    parts (print's newline apart) lets another process's line land between them."""
    writes: list[str] = []

    class Recorder(io.StringIO):
        def write(self, text: str) -> int:
            writes.append(text)
            return len(text)

        def isatty(self) -> bool:
            return False

    monkeypatch.setattr(sys, "stderr", Recorder())
    saved = structlog.get_config()
    try:
        configure_logging("info")
        structlog.get_logger("nodeagent.test").info("one line", node="n1")
    finally:
        structlog.configure(**saved)
    assert len(writes) == 1 and writes[0].endswith("\n") and json.loads(writes[0])["event"] == "one line"


HOSTILE = "torch/\x1b[2J\rrun\nFAKE LINE\x9b31m\u202e"


@pytest.mark.parametrize("terminal", [True, False], ids=["terminal", "json"])
def test_a_logged_name_s_control_characters_never_reach_the_line(
    terminal: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ESC, CR and LF (C0) and CSI (C1) in a value, a key or the event: escaped on a terminal,
    escaped by JSON (ASCII only) elsewhere; either way one line, and the value reads back."""

    class Stderr(io.StringIO):
        def isatty(self) -> bool:
            return terminal

    out = Stderr()
    monkeypatch.setattr(sys, "stderr", out)
    saved = structlog.get_config()
    try:
        configure_logging("info")
        structlog.get_logger("nodeagent.test").warning(f"job {HOSTILE} refused", job=HOSTILE, **{HOSTILE: 1})
    finally:
        structlog.configure(**saved)
    line = out.getvalue()
    assert line.endswith("\n") and line.count("\n") == 1, repr(line)
    bare = line[:-1]
    if terminal:
        # The console renderer's own colours are ESC sequences: strip them, then none is left.
        plain = re.sub(r"\x1b\[[0-9;]*m", "", bare)
        assert plain.isprintable(), repr(plain)
        assert "torch/\\x1b[2J\\rrun\\nFAKE LINE\\x9b31m\\u202e" in plain
    else:
        assert bare.isascii() and bare.isprintable(), repr(bare)
        event = json.loads(bare)
        assert event["job"] == HOSTILE and event[HOSTILE] == 1
