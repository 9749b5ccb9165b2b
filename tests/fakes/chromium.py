"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
open a page at a given viewport, wait for its script to draw, measure it, take a screenshot.

No WebSocket and no driver package: Chromium reads commands from its fd 3 and writes answers
to fd 4, one JSON message each, NUL-terminated. As in ``tests/collector/views/test_fleet_page.py``,
every name resolves to nothing but 127.0.0.1 and anything else goes to a proxy that does not
exist: no request leaves the machine.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from tests.conftest import require

NETWORK_OFF = ("--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--proxy-server=http://127.0.0.1:9")


class Browser:
    def __init__(self, profile: Path) -> None:
        require(shutil.which("chromium") is not None, "needs chromium (Debian package; `make system-deps`)")
        commands_read, self._commands = _above_4(os.pipe())
        self._answers, answers_write = _above_4(os.pipe())
        command = [
            "chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
            "--disable-background-networking", "--disable-component-update", "--disable-default-apps",
            "--hide-scrollbars", f"--user-data-dir={profile}", "--remote-debugging-pipe", *NETWORK_OFF,
        ]  # fmt: skip
        # The pipes moved to fds 3 and 4 by the bash that execs Chromium (no preexec_fn: threads run).
        moved = f'exec "$@" 3<&{commands_read} 4>&{answers_write} {commands_read}<&- {answers_write}>&-'
        self.proc = subprocess.Popen(
            ["bash", "-c", moved, "bash", *command], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, pass_fds=(commands_read, answers_write),
        )  # fmt: skip
        os.close(commands_read)
        os.close(answers_write)
        self._next_id = 0
        self._buffer = b""
        self._events: list[dict[str, Any]] = []

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *_exc: type[BaseException] | BaseException | TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(timeout=30)
        os.close(self._commands)
        os.close(self._answers)

    def call(self, method: str, params: dict[str, Any] | None = None, session: str | None = None) -> dict[str, Any]:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params or {}}
        if session is not None:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        while True:
            answer = self._read(60.0)
            if answer.get("id") == self._next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                return dict(answer.get("result", {}))
            self._events.append(answer)

    def open(self, url: str, width: int, height: int) -> Page:
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        page = Page(self, session)
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
            session,
        )
        self.call("Page.navigate", {"url": url}, session)
        return page

    def _read(self, timeout: float) -> dict[str, Any]:
        end = time.monotonic() + timeout
        while b"\0" not in self._buffer:
            ready, _, _ = select.select([self._answers], [], [], max(0.0, end - time.monotonic()))
            if not ready:
                raise TimeoutError("chromium did not answer")
            chunk = os.read(self._answers, 1 << 20)
            if not chunk:
                raise RuntimeError("chromium exited")
            self._buffer += chunk
        message, _, self._buffer = self._buffer.partition(b"\0")
        return dict(json.loads(message))


def _above_4(pipe: tuple[int, int]) -> tuple[int, int]:
    """The pipe's ends moved above fd 4, so that moving them onto 3 and 4 cannot clobber either."""
    moved = tuple(fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in pipe)
    for fd in pipe:
        os.close(fd)
    return moved[0], moved[1]


class Page:
    def __init__(self, browser: Browser, session: str) -> None:
        self.browser = browser
        self.session = session

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (JSON-able)."""
        result = self.browser.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}, self.session
        )
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 30.0) -> None:
        """Until ``expression`` is true in the page (its script drew what it fetched)."""
        end = time.monotonic() + timeout
        while not self.evaluate(f"Boolean({expression})"):
            if time.monotonic() > end:
                raise TimeoutError(f"{expression} never became true")
            time.sleep(0.1)

    def screenshot(self, path: Path) -> Path:
        """The whole page (beyond the viewport where it is longer), as PNG."""
        size = self.browser.call("Page.getLayoutMetrics", {}, self.session)["cssContentSize"]
        clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
        params = {"format": "png", "captureBeyondViewport": True, "clip": clip}
        data = self.browser.call("Page.captureScreenshot", params, self.session)["data"]
        path.write_bytes(base64.b64decode(data))
        return path
