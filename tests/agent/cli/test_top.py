"""``nodeagent top``: driven in a real terminal (tmux), and its frame at a given width."""

from __future__ import annotations

import io
import re
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from nodeagent.agent.cli.main import cli
from nodeagent.agent.views.top_frame import ViewState, frame
from tests.conftest import require

NODEAGENT = Path(sys.executable).parent / "nodeagent"


def _capture(session: str) -> str:
    return subprocess.run(
        ["tmux", "capture-pane", "-p", "-t", session], check=True, capture_output=True, text=True
    ).stdout


def _wait_for(session: str, pattern: str, timeout_seconds: float) -> str:
    deadline = time.monotonic() + timeout_seconds
    screen = ""
    while time.monotonic() < deadline:
        screen = _capture(session)
        if re.search(pattern, screen):
            return screen
        time.sleep(0.3)
    raise AssertionError(f"{pattern!r} not on the screen within {timeout_seconds} s:\n{screen}")


def _no_word_cut(screen: str) -> None:
    """Every word on the narrow screen is a whole word of the same view drawn 200 columns wide,
    and nothing is elided: no word was cut at the edge."""
    wide = subprocess.run(
        [str(NODEAGENT), "top", "--simulate", "ordinary-cloud", "--once"],
        check=True, capture_output=True, text=True, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"}, timeout=60,
    ).stdout  # fmt: skip
    words = set(re.findall(r"[A-Za-z_]+", wide))
    assert "…" not in screen
    cut = sorted(set(re.findall(r"[A-Za-z_]+", screen)) - words)
    assert not cut, f"words cut or unknown at 80 columns: {cut}\n{screen}"


def test_top_in_tmux_shows_gpus_link_share_and_network_verdict_then_q_exits_0(tmp_path: Path) -> None:
    require(shutil.which("tmux") is not None, "needs tmux (Debian package; `make system-deps`)")
    session = f"nodeagent-top-{uuid.uuid4().hex[:8]}"
    status = tmp_path / "status"
    command = f"{NODEAGENT} top --simulate ordinary-cloud; echo $? > {status}; sleep 30"
    subprocess.run(
        ["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command], check=True, timeout=10
    )
    try:
        # The simulated node comes with one detector window of history: the verdict is there at once.
        screen = _wait_for(session, r"starved \d+% of their time — cause\s+network", 30)
        gpu_rows = [line for line in screen.splitlines() if re.match(r"\s*[0-7] [█░]+\s+\d+%", line)]
        assert len(gpu_rows) == 8, screen
        assert re.search(r"eth0 rx\s+\d+\.\d Gb/s [█░]+\s+9\d%", screen), screen
        _no_word_cut(screen)
        for key, shown in (("s", "sort util"), ("h", "sort GPUs"), ("p", "PAUSED")):
            subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
            _wait_for(session, shown, 10)
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=True)
        deadline = time.monotonic() + 10
        while not status.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert status.read_text().strip() == "0"
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)


def test_once_prints_one_frame_with_the_verdict() -> None:
    result = CliRunner().invoke(cli, ["top", "--simulate", "ordinary-cloud", "--once"], env={"COLUMNS": "100"})
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # the sentence wraps at the width
    assert "cause network: eth0 receives" in text
    assert "keeping them busy needs" in text


def test_no_gpu_says_so_once_and_shows_the_host() -> None:
    snap = {"node_id": "n", "nics": [], "disks": [], "rdma_ports": [], "host": {"cpu_busy_ratio": 0.5}}
    state = ViewState(no_gpu_reason="NVML library not found")
    out = io.StringIO()
    Console(file=out, width=80).print(frame(snap, None, state, 80))
    text = out.getvalue()
    assert text.count("no GPU:") == 1
    assert "window is filling" not in text  # no detector window to wait for without GPUs
    assert "CPU busy 50%" in text


@pytest.mark.parametrize("bad", [["--simulate", "no-such"], ["--interval", "0"]])
def test_bad_input_exits_2(bad: list[str]) -> None:
    result = CliRunner().invoke(cli, ["top", "--once", *bad])
    assert result.exit_code == 2
