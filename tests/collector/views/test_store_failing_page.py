"""The fleet page says when its store cannot commit: a banner above the fleet naming how long
and why, drawn by the page's own script in headless Chromium, and gone once a flush commits."""

from __future__ import annotations

import re
import shutil
import sqlite3
from pathlib import Path
from typing import Any

from nodeagent.collector.service.server import CollectorServer
from tests.collector.views.test_fleet_page import _chromium, _serve
from tests.conftest import require
from tests.fakes.fleet import wait_for

FULL = "database or disk is full"


def _banner(dom: str) -> tuple[bool, str]:
    """Whether the store banner is shown, and its text."""
    found = re.search(r'<p id="stores" class="banner"( hidden="")?( title="[^"]*")?>([^<]*)</p>', dom)
    assert found is not None, dom[:2000]
    return found.group(1) is None, found.group(3)


def test_the_page_shows_a_failing_store_until_a_flush_commits(tmp_path: Path) -> None:
    require(shutil.which("chromium") is not None, "needs chromium (Debian package; `make system-deps`)")

    def work(server: CollectorServer, base: str) -> dict[str, Any]:
        flusher = server.ingest.flusher
        flush = flusher.flush

        async def full(final: bool = False) -> None:
            raise sqlite3.OperationalError(FULL)

        flusher.flush = full  # type: ignore[method-assign]
        assert wait_for(lambda: flusher.failing_for() > 0, timeout=30)
        failing = _chromium("--dump-dom", base + "/", profile=tmp_path / "profile-failing")
        flusher.flush = flush  # type: ignore[method-assign]
        assert wait_for(lambda: flusher.failing_for() == 0, timeout=30)
        committing = _chromium("--dump-dom", base + "/", profile=tmp_path / "profile-committing")
        return {"failing": _banner(failing), "committing": _banner(committing)}

    seen = _serve(tmp_path, work)
    shown, text = seen["failing"]
    assert shown, text
    assert re.fullmatch(
        rf"store failing for \d+ s: OperationalError: {FULL} — reports are held by the agents until it writes", text
    ), text
    assert seen["committing"] == (False, "")
