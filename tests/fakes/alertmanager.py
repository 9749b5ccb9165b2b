"""A real Alertmanager (Debian's prometheus-alertmanager) on 127.0.0.1, for tests that send it alerts."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.fakes.fleet import free_port

BINARY = "prometheus-alertmanager"
CONFIG = """\
route:
  receiver: blackhole
receivers:
  - name: blackhole
"""


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    require(shutil.which(BINARY) is not None, f"needs {BINARY} (Debian package; `make system-deps`)")
    (tmp_path / "am.yml").write_text(CONFIG)
    port = free_port()
    log = (tmp_path / "am.log").open("w")
    process = subprocess.Popen(
        [
            BINARY,
            f"--config.file={tmp_path / 'am.yml'}",
            f"--storage.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",  # no gossip: a single, private instance
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait(lambda: ready(url), 20, f"{BINARY} did not become ready; log: {tmp_path / 'am.log'}")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)
        log.close()


def alerts(url: str) -> list[dict[str, Any]]:
    with urllib.request.urlopen(f"{url}/api/v2/alerts", timeout=5) as response:
        alerts: list[dict[str, Any]] = json.load(response)
    return alerts


def ready(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/-/ready", timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def wait(predicate: Callable[[], Any], timeout: float, message: str) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(message)
        time.sleep(0.05)
