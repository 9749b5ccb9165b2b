"""``nodeagent-collector ledger`` over a collector fed two simulated rentals: the parts add up to the
held time, the split matches the simulation's truth (the 10 Gb/s rental waits 34% of its time on
the network, 12.5% on the all-reduce), the prices of ``[prices]`` apply, and the JSON, CSV and
table say the same; several collectors' rows are summed by key."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from nodeagent.collector.cli import ledger as ledger_command
from nodeagent.collector.config import config_from_mapping
from nodeagent.collector.fleet.fanout import Answer
from nodeagent.collector.fleet.merge import merge_ledger
from nodeagent.collector.history.split import LOST_CATEGORIES
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.tools.simulator import Simulation
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.fleet import cli

RENTALS = {"rental-10g-pcie": "ordinary-cloud", "rental-50g-nvlink": "fast-cloud"}
SECONDS = 900  # 15 simulated minutes a report a second
SETTLED = 300  # the ledger is read past the warm-up and the detector's entry into `starved`
PRICES = {"currency": "USD", "default_per_gpu_hour": 2.0, "nodes": {"rental-10g-*": 1.2}}


def _fed_collector(tmp_path: Path) -> tuple[dict[str, Any], float]:
    """The ledger by node as JSON and CSV and as a table, and the simulations' truth over the span read."""

    async def scenario() -> tuple[dict[str, Any], float]:
        settings = config_from_mapping({"prices": PRICES}, "test.toml")
        server = CollectorServer(ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", settings=settings))
        await server.start()
        try:
            start = (time.time() - 2 * SECONDS) // 60 * 60
            truth: dict[str, list[tuple[float, float]]] = {}
            for node_id, scene in RENTALS.items():
                sim = Simulation(scene, node_id=node_id, seed=3, start_time=start)
                stream = StreamHandle(node_id, "test")
                server.ingest.attach(stream, sim.info())
                for seq in range(1, SECONDS + 2):
                    report = sim.step(0.0 if seq == 1 else 1.0)
                    report.epoch, report.seq = 1, seq
                    if seq == 1:
                        report.info.CopyFrom(sim.info())
                    server.ingest.accept(stream, report, report.SerializeToString())
                    if seq > SETTLED + 1:
                        t = sim.truth()
                        truth.setdefault(node_id, []).append((t.starvation_ratio, t.interconnect_ratio))
            await server.ingest.flusher.flush(final=True)
            target = f"127.0.0.1:{server.port}"
            span = ("--since", str(start + SETTLED), "--until", str(start + SECONDS + 60), "--by", "node")
            out = {
                form: await asyncio.to_thread(cli, "collector", "ledger", "--collector", target, *span, *flags)
                for form, flags in (("json", ("--json",)), ("csv", ("--csv",)), ("table", ()))
            }
            out["truth"] = {n: (sum(d for d, _ in v) / len(v), sum(s for _, s in v) / len(v)) for n, v in truth.items()}
            return out, start
        finally:
            await server.stop(0.0)

    return asyncio.run(scenario())


def test_the_rentals_ledger_matches_their_truth_and_adds_up(tmp_path: Path) -> None:
    out, _start = _fed_collector(tmp_path)
    rows = {row["node"]: row for row in json.loads(out["json"])}
    assert set(rows) == set(RENTALS)
    for node_id, row in rows.items():
        held = row["gpu_hours_held"]
        parts = row["gpu_hours_computing"] + sum(row["gpu_hours_lost"].values())
        assert parts == pytest.approx(held, rel=0.01)
        assert held == pytest.approx(8 * (SECONDS - SETTLED) / 3600, rel=0.05)  # 8 GPUs held the whole span
        data, sync = out["truth"][node_id]
        lost = row["gpu_hours_lost"]
        data_read = sum(lost[c] for c in ("network", "storage", "cpu", "h2d", "unknown")) / held
        assert data_read == pytest.approx(data, abs=0.05), (node_id, lost, data)
        assert lost["interconnect"] / held == pytest.approx(sync, abs=0.05), (node_id, lost, sync)
    slow = rows["rental-10g-pcie"]
    assert slow["gpu_hours_lost"]["network"] / slow["gpu_hours_held"] == pytest.approx(38 / 112, abs=0.05)
    # Priced by its pattern, the other by the default.
    assert slow["cost"] == pytest.approx(slow["gpu_hours_held"] * 1.2)
    assert slow["cost_lost"] == pytest.approx((slow["gpu_hours_held"] - slow["gpu_hours_computing"]) * 1.2)
    fast = rows["rental-50g-nvlink"]
    assert fast["cost"] == pytest.approx(fast["gpu_hours_held"] * 2.0) and fast["currency"] == "USD"
    # The CSV says the same, every category a column.
    lines = list(csv.DictReader(io.StringIO(out["csv"])))
    by_node = {line["node"]: line for line in lines}
    assert float(by_node["rental-10g-pcie"]["gpu_hours_lost_network"]) == pytest.approx(
        slow["gpu_hours_lost"]["network"], abs=1e-4
    )
    assert {f"gpu_hours_lost_{c}" for c in LOST_CATEGORIES} <= set(lines[0])
    assert by_node["rental-10g-pcie"]["gpu_model"].startswith("NVIDIA A800")
    assert "rental-10g-pcie" in out["table"] and "NETWORK" in out["table"]


def _row(key: str, held: float, network: float, cost: float, stragglers: dict[str, float]) -> pb.LedgerRow:
    row = pb.LedgerRow(
        key=key, gpu_hours_held=held, gpu_hours_computing=held - network, cost=cost, cost_lost=cost * network / held,
        currency="USD", first_unix_seconds=100.0, last_unix_seconds=200.0, nodes=[f"{key}-n"],
    )  # fmt: skip
    row.gpu_hours_lost["network"] = network
    for node_id, hours in stragglers.items():
        row.stragglers.add(node_id=node_id, gpu_hours_waited=hours)
    return row


def test_several_collectors_rows_are_summed_by_key() -> None:
    """A job on nodes of two collectors is one row: hours, costs and the waits on each straggler summed."""
    a = pb.LedgerResponse(rows=[_row("job-1", 10.0, 2.0, 20.0, {"n3": 1.0}), _row("job-2", 1.0, 0.5, 2.0, {})])
    b = pb.LedgerResponse(rows=[_row("job-1", 6.0, 1.0, 12.0, {"n3": 0.5, "n4": 2.0})])
    merged = merge_ledger([Answer("a:1", a, ""), Answer("b:2", b, ""), Answer("c:3", None, "UNAVAILABLE")])
    assert isinstance(merged, pb.LedgerResponse)
    job = next(r for r in merged.rows if r.key == "job-1")
    assert job.gpu_hours_held == 16.0 and job.gpu_hours_lost["network"] == 3.0 and job.cost == 32.0
    assert [(s.node_id, s.gpu_hours_waited) for s in job.stragglers] == [("n4", 2.0), ("n3", 1.5)]
    assert list(job.nodes) == ["job-1-n"]
    assert [r.key for r in merged.rows] == ["job-1", "job-2"]  # the most money lost first
    assert [(s.shard, s.answered) for s in merged.shards] == [("a:1", True), ("b:2", True), ("c:3", False)]
    # A collector without [prices] adds its hours and no currency: the row stays in the priced one's.
    unpriced = pb.LedgerResponse(rows=[pb.LedgerRow(key="job-1", gpu_hours_held=1.0)])
    for order in ((a, unpriced), (unpriced, a)):
        mixed = merge_ledger([Answer(f"s:{i}", reply, "") for i, reply in enumerate(order)])
        assert isinstance(mixed, pb.LedgerResponse)
        assert next(r.currency for r in mixed.rows if r.key == "job-1") == a.rows[0].currency


def test_an_accounts_rows_of_two_collectors_join_their_jobs_and_a_jobs_owner_is_kept() -> None:
    a, b = _row("ml", 4.0, 1.0, 8.0, {}), _row("ml", 2.0, 0.5, 4.0, {})
    a.jobs.extend(["j1", "j2"])
    b.jobs.extend(["j2", "j3"])
    merged = merge_ledger(
        [Answer("a:1", pb.LedgerResponse(rows=[a]), ""), Answer("b:2", pb.LedgerResponse(rows=[b]), "")]
    )
    assert isinstance(merged, pb.LedgerResponse)
    [ml] = merged.rows
    assert list(ml.jobs) == ["j1", "j2", "j3"] and ml.gpu_hours_held == 6.0
    job_a, job_b = _row("j1", 1.0, 0.0, 2.0, {}), _row("j1", 1.0, 0.0, 2.0, {})
    job_b.account, job_b.namespace = "ml", "team-a"  # a collector whose nodes named the owner
    merged = merge_ledger(
        [Answer("a:1", pb.LedgerResponse(rows=[job_a]), ""), Answer("b:2", pb.LedgerResponse(rows=[job_b]), "")],
    )
    assert isinstance(merged, pb.LedgerResponse)
    assert (merged.rows[0].account, merged.rows[0].namespace) == ("ml", "team-a")


def test_without_prices_the_command_leaves_the_money_out_and_says_how_to_set_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every cost read 0.00 with no [prices], and nothing said why."""
    row = pb.LedgerRow(key="n1", gpu_hours_held=2.0, gpu_hours_computing=1.5, nodes=["n1"])
    row.gpu_hours_lost["network"] = 0.5
    monkeypatch.setattr(ledger_command, "query", lambda *_a, **_k: pb.LedgerResponse(rows=[row]))
    runner = CliRunner()
    hint = "set [prices] in collector.toml (docs/ledger.md#prices)"
    table = runner.invoke(ledger_command.ledger, ["--by", "node"])
    assert table.exit_code == 0, table.output
    head, *_rest, last = table.stdout.splitlines()[1:]
    assert "COST" not in head and "CUR" not in head and "0.00" not in table.stdout
    assert last.startswith("no prices: the money columns are left out") and last.endswith(hint)
    as_csv = runner.invoke(ledger_command.ledger, ["--by", "node", "--csv"])
    header = next(csv.reader(io.StringIO(as_csv.stdout)))
    assert "cost" not in header and "currency" not in header and "gpu_hours_lost_network" in header
    assert as_csv.stderr.strip().endswith(hint)
    as_json = runner.invoke(ledger_command.ledger, ["--by", "node", "--json"])
    (plain,) = json.loads(as_json.stdout)
    assert (plain["cost"], plain["cost_lost"], plain["currency"]) == (None, None, None)
    assert as_json.stderr.strip().endswith(hint)
