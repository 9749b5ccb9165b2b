"""A store that cannot write says so: the default ``serve`` (a front and 2 workers) with its
databases on a 3 MB tmpfs that something else fills. While every flush fails with "database or
disk is full", the front's ``/healthz`` answers 503 naming the worker and its store, ``nodes``
(table and JSON) and the fleet page (``/api/fleet``) name the failing store, and the collector
raises ``CollectorStoreFailing`` through its own sinks (a webhook here); once the space is back,
writes succeed, the report held back is stored, ``/healthz`` is 200, the views stop saying it and
the alert resolves.
"""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeagent.collector.cli.main import cli
from nodeagent.core.transport.rendezvous import owner_index
from tests.collector.workers.front_process import deliver, running_front
from tests.fakes.fleet import wait_for
from tests.fakes.full_disk import fill, small_tmpfs
from tests.fakes.http_receiver import http_receiver

ALERT = "CollectorStoreFailing"
FULL = "OperationalError: database or disk is full"


class _KeptFull:
    """Something else takes every byte of ``directory``'s filesystem, again whenever the store
    frees some (a rolled-back transaction, a checkpoint), until released."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.fillers: list[Path] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, daemon=True)
        self.fillers.append(fill(directory / "filler-0"))
        self._thread.start()

    def _keep(self) -> None:
        while not self._stop.wait(0.05):
            self.fillers.append(fill(self.directory / f"filler-{len(self.fillers)}"))

    def release(self) -> None:
        self._stop.set()
        self._thread.join(10)
        for path in self.fillers:
            path.unlink()


def _healthz(http: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{http}/healthz", timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def _views(front: Any) -> dict[str, Any]:
    """What ``nodes`` (its table's store lines, and its JSON rows' ``store_failing``) and
    ``/api/fleet`` (``stores_failing``) say of the stores."""
    runner = CliRunner()
    table = runner.invoke(cli, ["nodes", "--collector", front.address, "--timeout", "30"])
    listed = runner.invoke(cli, ["nodes", "--json", "--collector", front.address, "--timeout", "30"])
    assert table.exit_code == 0 and listed.exit_code == 0, (table.output, listed.output)
    with urllib.request.urlopen(f"http://{front.http}/api/fleet", timeout=20) as response:
        page = json.loads(response.read())
    return {
        "table": [line for line in table.stdout.splitlines() if line.startswith("store failing")],
        "json": {row["node_id"]: (row["shard"], row["store_failing"]) for row in json.loads(listed.stdout)},
        "page": page["stores_failing"],
    }


def _transitions(accepted: list[Any]) -> list[tuple[str, str, str]]:
    """(kind, worker, error) of every CollectorStoreFailing transition the webhook took."""
    return [
        (t["kind"], t["alert"]["labels"].get("worker", ""), t["alert"]["annotations"].get("error", ""))
        for t in accepted
        if t["alert"]["name"] == ALERT
    ]


@pytest.mark.root
def test_a_full_store_fails_healthz_and_raises_its_alert_until_writes_succeed(tmp_path: Path) -> None:
    node = next(f"full-{i}" for i in range(100) if owner_index(f"full-{i}", 2) == 0)
    with small_tmpfs(tmp_path, "3m") as small, http_receiver() as hook:
        config = tmp_path / "collector.toml"
        config.write_text(f'[sinks]\nwebhook_url = "{hook.url}"\n')
        args = ["--db", str(small / "collector.db"), "--config", str(config), "--flush-seconds", "0.02"]
        with running_front(tmp_path, 2, args) as front:
            assert deliver(front.ports[0], node, range(1, 21)) == 20
            assert _healthz(front.http)[0] == 200
            full = _KeptFull(small)
            # A report that cannot be made durable: its stream waits for the ack, the flushes fail.
            held = threading.Thread(target=deliver, args=(front.ports[0], node, [21]), daemon=True)
            held.start()
            assert wait_for(lambda: _healthz(front.http)[0] == 503, timeout=30), _healthz(front.http)
            status, body = _healthz(front.http)
            failing = _views(front)
            assert wait_for(lambda: _transitions(hook.accepted), timeout=60), front.log.read_text()[-3000:]
            fired = _transitions(hook.accepted)
            full.release()
            assert wait_for(lambda: _healthz(front.http)[0] == 200, timeout=30), _healthz(front.http)
            committing = _views(front)
            assert wait_for(lambda: len(_transitions(hook.accepted)) == 2, timeout=30), hook.accepted
            assert deliver(front.ports[0], node, [21, 22]) == 22
    assert status == 503
    assert body.startswith("worker-0: store failing for "), body
    assert "database or disk is full" in body
    assert fired == [("firing", "0", "OperationalError: database or disk is full")]
    assert [kind for kind, _worker, _error in _transitions(hook.accepted)] == ["firing", "resolved"]
    # While it fails, nodes and the page name the store, for how long and why.
    (line,) = failing["table"]
    assert line.startswith("store failing on worker-0 for "), line
    assert f" s: {FULL} — its nodes' reports are held by their agents until it writes" in line, line
    shard, store = failing["json"][node]
    assert shard == "worker-0" and store["error"] == FULL and store["seconds"] > 0, failing["json"]
    (shown,) = failing["page"]
    assert shown["shard"] == "worker-0" and shown["error"] == FULL and shown["seconds"] > 0, shown
    # Once it commits, they stop saying it.
    assert committing == {"table": [], "json": {node: ("worker-0", None)}, "page": []}, committing
