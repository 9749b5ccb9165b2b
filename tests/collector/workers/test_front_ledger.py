"""``ledger`` through a real ``serve --workers 2``: each worker prices its nodes by the file's
``[prices]``, and the front sums a job that ran on nodes of both workers into one row, on the
command line and on the front's ledger page (``/ledger``, drawn by headless Chromium under the
pages' Content-Security-Policy); and real agents on the default ``serve`` billed by account."""

from __future__ import annotations

import csv
import functools
import io
import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from html.parser import HTMLParser
from pathlib import Path

import pytest

from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import NODE_ROW, MinuteRow
from nodeagent.collector.store.database import Store
from nodeagent.core.transport.rendezvous import owner_index
from tests.collector.workers.front_process import running_front
from tests.fakes.fleet import Agent, Collector, free_port_run, processes, wait_for
from tests.fakes.trees import REPO


def _seed(db: Path, node: str, minute: int, network: float) -> None:
    """One minute of ``job-a`` on one GPU of ``node``, ``network`` seconds of it lost to the network."""
    parts = split.empty()
    parts[split.INDEX["computing"]], parts[split.INDEX["network"]] = 60.0 - network, network
    rows = [
        MinuteRow(node, gpu, minute, 60, {}, "starved", "network", ("job-a",), minute + 59.0, held, list(parts))
        for gpu, held in ((0, 60.0), (NODE_ROW, None))
    ]
    store = Store(db)
    try:
        store.write((), before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows)))
    finally:
        store.close()


def _ledger(address: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "ledger", *args, "--collector", address, "--timeout", "30"],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_a_job_on_both_workers_is_one_row_priced_by_each_node(tmp_path: Path) -> None:
    minute = int(time.time() // 60 * 60) - 600
    _seed(tmp_path / "collector.db", "node-a", minute, 30.0)
    _seed(tmp_path / "collector.worker1.db", "rental-b", minute, 15.0)
    config = tmp_path / "collector.toml"
    config.write_text('[prices]\ncurrency = "EUR"\ndefault_per_gpu_hour = 3.6\nnodes = { "rental-*" = 7.2 }\n')
    with running_front(tmp_path, args=["--config", str(config)]) as front:
        [job] = json.loads(_ledger(front.address, "--json", "--since", "1h"))
        [fleet] = json.loads(_ledger(front.address, "--json", "--since", "1h", "--by", "fleet"))
    assert job["job"] == "job-a" and job["nodes"] == ["node-a", "rental-b"]
    assert job["gpu_hours_held"] == pytest.approx(2 / 60)
    assert job["gpu_hours_lost"]["network"] == pytest.approx(45 / 3600)
    assert job["cost"] == pytest.approx(60 / 3600 * 3.6 + 60 / 3600 * 7.2) and job["currency"] == "EUR"
    assert job["cost_lost"] == pytest.approx(30 / 3600 * 3.6 + 15 / 3600 * 7.2)
    assert fleet["fleet"] == "fleet" and fleet["gpu_hours_held"] == pytest.approx(2 / 60)


class _Bars(HTMLParser):
    """Each ledger row's key and held hours, and the GPU-hours of its bar's rectangles."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, float] = {}
        self.bars: list[dict[str, float]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "tr" and a.get("class") == "ledger-row":
            self.rows[a["data-key"]] = float(a["data-gpu-hours-held"])
        if tag == "svg" and a.get("class") == "ledger-bar":
            self.bars.append({})
        if tag == "rect" and "data-gpu-hours" in a:
            self.bars[-1][a["data-category"]] = float(a["width"]) / scale_of(self.rawdata, len(self.bars))


def scale_of(raw: str, nth: int) -> float:
    """The ``nth`` bar's pixels per GPU-hour (1-based)."""
    marker = "data-px-per-gpu-hour='"
    at = -1
    for _ in range(nth):
        at = raw.index(marker, at + 1)
    return float(raw[at + len(marker) : raw.index("'", at + len(marker))])


def _get(url: str) -> tuple[int, str, str]:
    try:
        with urllib.request.urlopen(url, timeout=60) as reply:
            return reply.status, reply.headers.get("Content-Security-Policy", ""), reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, "", err.read().decode()


def test_the_fronts_ledger_page_merges_a_job_on_both_workers_into_one_row(tmp_path: Path) -> None:
    minute = int(time.time() // 60 * 60) - 600
    _seed(tmp_path / "collector.db", "node-a", minute, 30.0)
    _seed(tmp_path / "collector.worker1.db", "rental-b", minute, 15.0)
    with running_front(tmp_path) as front:
        base = f"http://{front.http}"
        status, policy, text = _get(f"{base}/ledger?since=1h")
        by_node = _get(f"{base}/ledger?since=1h&by=node&sort=name")[2]
        bad = _get(f"{base}/ledger?sort=cheapest")
        own = _get(f"{base}/ledger?job=job-a&since=1h")[2]
        from tests.fakes.chromium import Browser  # skips without chromium

        with Browser(tmp_path / "profile") as browser:
            page = browser.open(f"{base}/ledger?since=1h", 1200, 800)
            page.wait_for("document.querySelectorAll('tr.ledger-row').length === 1")
            drawn = page.evaluate(
                "({scripts: document.scripts.length, "
                "fill: getComputedStyle(document.querySelector('rect.cat-network')).fill, "
                "width: document.querySelector('svg.ledger-bar').getBoundingClientRect().width})"
            )
    assert status == 200 and "script-src 'sha256-" in policy
    parsed = _Bars()
    parsed.feed(text)
    # One row for the job, its two nodes' minutes summed; the bar's rectangles add to its hours.
    assert parsed.rows == pytest.approx({"job-a": 2 / 60}, rel=1e-4)
    [bar] = parsed.bars
    assert bar == pytest.approx({"computing": 75 / 3600, "network": 45 / 3600}, rel=1e-4)
    assert sum(bar.values()) == pytest.approx(2 / 60, rel=1e-4)
    nodes = _Bars()
    nodes.feed(by_node)
    assert list(nodes.rows) == ["node-a", "rental-b"]  # by name
    assert bad == (400, "", "sort: expected one of lost, held, name, worth, got 'cheapest'\n")
    assert "data-category='network' data-gpu-hours='0.012500'" in own
    # Drawn under the policy: no script, and the stylesheet (allowed by its hash) colours the bars.
    assert drawn["scripts"] == 0 and drawn["fill"] == "rgb(198, 40, 40)" and drawn["width"] == 360


def test_agents_bill_their_jobs_by_account_through_the_default_serve(tmp_path: Path) -> None:
    """Real agents (simulated GPUs) to the default ``serve``: a job's two nodes on two workers
    charged to account ``ml``, a third node's job without one; ``ledger --by account`` through the
    front sums ``ml`` over both workers, gives the rest the row of no account, and the rows add
    up to the fleet's, in JSON, CSV and the table."""
    workers = len(os.sched_getaffinity(0))
    names = [f"node-{i}" for i in range(40)]
    first = names[0]
    second = next(n for n in names[1:] if workers == 1 or owner_index(n, workers) != owner_index(first, workers))
    nodes = {first: "torch/train-a", second: "torch/train-a", "solo": ""}
    with processes() as started:
        collector = Collector(tmp_path / "c.db", free_port_run(workers + 1)).start()
        started.append(collector)
        for node, job in nodes.items():
            keyed = ["--set", f"job_key={job}", "--set", "job_nodes=2", "--set", "job_account=ml"] if job else []
            args = [
                "--collector", collector.address, "--node-id", node, "--simulate", "healthy",
                "--spool-dir", str(tmp_path / f"spool-{node}"), *keyed,
            ]  # fmt: skip
            started.append(Agent(args).start(tmp_path / f"{node}.log"))
        address = collector.address

        def billed() -> list[dict[str, object]] | None:
            rows = json.loads(_ledger(address, "--json", "--since", "1h", "--by", "account"))
            keys = {str(r["account"]): r for r in rows}
            if set(keys) == {"ml", ""} and all(float(r["gpu_hours_held"]) > 0.003 for r in rows):  # type: ignore[arg-type]
                return list(rows)
            return None

        assert wait_for(billed, timeout=120, interval=2.0), _ledger(address, "--since", "1h", "--by", "account")
        for agent in started[1:]:
            agent.kill(signal.SIGTERM)  # the agents stop: the ledger stops changing once their last minutes are written
        held: list[float] = []

        def settled() -> bool:
            held.append(json.loads(_ledger(address, "--json", "--since", "1h", "--by", "fleet"))[0]["gpu_hours_held"])
            return len(held) > 1 and held[-1] == held[-2]

        assert wait_for(settled, timeout=60, interval=2.0), held
        rows = json.loads(_ledger(address, "--json", "--since", "1h", "--by", "account"))
        [fleet] = json.loads(_ledger(address, "--json", "--since", "1h", "--by", "fleet"))
        jobs = {r["job"]: r for r in json.loads(_ledger(address, "--json", "--since", "1h"))}
        table = _ledger(address, "--since", "1h", "--by", "account")
        sheet = list(csv.DictReader(io.StringIO(_ledger(address, "--csv", "--since", "1h", "--by", "account"))))
    by_account = {r["account"]: r for r in rows}
    assert by_account["ml"]["jobs"] == ["torch/train-a"] and by_account["ml"]["nodes"] == sorted([first, second])
    assert by_account["ml"]["gpu_hours_held"] == pytest.approx(jobs["torch/train-a"]["gpu_hours_held"])
    assert jobs["torch/train-a"]["account"] == "ml" and jobs["torch/train-a"]["namespace"] == ""
    assert by_account[""]["nodes"] == ["solo"] and by_account[""]["jobs"]
    assert sum(r["gpu_hours_held"] for r in rows) == pytest.approx(fleet["gpu_hours_held"])
    assert "(no account)" in table and "ml" in table and "JOBS" in table
    assert json.loads({r["account"]: r["jobs"] for r in sheet}["ml"]) == ["torch/train-a"]  # a JSON list of keys
