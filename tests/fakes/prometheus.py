"""A real Prometheus (Debian's) on 127.0.0.1 as a remote-write receiver
(``--web.enable-remote-write-receiver``), for tests that write series to it and read them back."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import require
from tests.fakes.fleet import free_port, wait_for


class Prometheus:
    def __init__(self, tmp: Path, config: str = "") -> None:
        self.port = free_port()
        self.tmp = tmp
        (tmp / "prometheus.yml").write_text("global:\n  scrape_interval: 1h\n" + config)
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def write_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api/v1/write"

    def start(self) -> Prometheus:
        self.proc = subprocess.Popen(
            [shutil.which("prometheus") or "prometheus", f"--config.file={self.tmp / 'prometheus.yml'}",
             f"--storage.tsdb.path={self.tmp / 'data'}", f"--web.listen-address=127.0.0.1:{self.port}",
             "--web.enable-remote-write-receiver"],
            stdout=subprocess.DEVNULL, stderr=(self.tmp / "prometheus.log").open("ab"),
        )  # fmt: skip
        assert wait_for(self._ready, 60, interval=0.2), (self.tmp / "prometheus.log").read_text()[-2000:]
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            self.proc.wait(timeout=60)

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/-/ready", timeout=2) as answer:
                return bool(answer.status == 200)
        except OSError:
            return False

    def query(self, expr: str, at: float) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/api/v1/query?{query}", timeout=10) as answer:
            body = json.loads(answer.read())
        assert body["status"] == "success", body
        return list(body["data"]["result"])

    def stored_samples(self, node: str, at: float) -> int:
        """Every sample of the node's series (count_over_time would merge series that differ only
        in their name, so the raw samples are counted here)."""
        return sum(len(series["values"]) for series in self.query(f'{{node="{node}"}}[2h]', at))


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    require(shutil.which("prometheus") is not None, "needs prometheus (Debian package; `make system-deps`)")
    server = Prometheus(tmp_path).start()
    try:
        yield server
    finally:
        server.stop()
