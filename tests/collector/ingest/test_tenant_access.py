"""What a tenant's node token and a scraper's credential may do on a real collector: a tenant's
token streams (its jobs stored under its tenant's scope) and reads nothing; a reader token that is
a tenant's is refused at start; a scraper reads ``/metrics`` and the fleet page but not the
ledger's prices and costs (``/ledger``, ``/api/ledger``), which are an operator's."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc

from nodeagent.core.wire.framing import frame_report
from nodeagent.v1 import nodeagent_pb2 as pb
from nodeagent.v1 import nodeagent_pb2_grpc as pb_grpc
from tests.collector.ingest.test_collector_access import ONE_PROCESS, _all, _get, _reads
from tests.fakes.fleet import Collector, free_port, processes
from tests.fakes.ingest_client import hello_message, send_messages, small_report
from tests.fakes.trees import REPO


def _tokens(tmp_path: Path, *roles: str) -> dict[str, Path]:
    out = {}
    for role in roles:
        out[role] = tmp_path / f"{role}.token"
        out[role].write_text(f"{role}-secret\n")
    return out


def test_a_tenants_token_streams_under_its_tenant_and_reads_nothing(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path, "acme", "operator")
    config = tmp_path / "collector.toml"
    config.write_text(f'[tenants.acme]\ntoken_file = "{tokens["acme"]}"\n')
    collector = Collector(
        workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port(),
        args=["--config", str(config), "--operator-token-file", str(tokens["operator"])],
    )  # fmt: skip
    report = small_report("acme-0", 1)
    report.jobs.add(job="torch/run", ranks=[0], world_size=8)
    acme = [("authorization", "Bearer acme-secret")]
    with processes() as started:
        started.append(collector.start())
        with grpc.insecure_channel(collector.address) as channel:
            streamed = send_messages(channel, [hello_message("acme-0"), frame_report(report.SerializeToString())], acme)
            anonymous = send_messages(channel, [hello_message("x-0")])
            reads = _reads(channel, acme)
            latest = pb_grpc.QueryStub(channel).LatestReport(
                pb.LatestReportRequest(node_id="acme-0"),
                timeout=10,
                metadata=[("authorization", "Bearer operator-secret")],
            )
    assert streamed == grpc.StatusCode.OK
    assert anonymous == grpc.StatusCode.UNAUTHENTICATED
    assert reads == _all(grpc.StatusCode.PERMISSION_DENIED)
    assert [j.job for j in latest.jobs] == ["acme:torch/run"]  # stored under its tenant's scope


def test_a_reader_token_that_is_a_tenants_is_refused_at_start(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path, "acme")
    config = tmp_path / "collector.toml"
    config.write_text(f'[tenants.acme]\ntoken_file = "{tokens["acme"]}"\n')
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", f"127.0.0.1:{free_port()}",
         "--db", str(tmp_path / "c.db"), "--config", str(config), "--operator-token-file", str(tokens["acme"])],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "--operator-token-file holds a tenant's node token ([tenants])" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_a_scraper_reads_metrics_and_the_page_but_not_the_ledgers_money(tmp_path: Path) -> None:
    tokens = _tokens(tmp_path, "node", "operator", "scrape")
    args = ["--token-file", str(tokens["node"]), "--operator-token-file", str(tokens["operator"]),
            "--scrape-token-file", str(tokens["scrape"])]  # fmt: skip
    seen: dict[str, dict[str, int]] = {}
    with processes() as started:
        # One collector alone, and the default serve (its front's HTTP answers for the workers).
        for name, workers in (("one", ONE_PROCESS), ("front", None)):
            collector = Collector(workers=workers, db=tmp_path / f"{name}.db", port=free_port(), args=args)
            started.append(collector.start())
            for role in ("scrape", "operator"):
                for path in ("/metrics", "/", "/ledger", "/api/ledger", "/api/ledger?by=account"):
                    status, _body = _get(f"http://{collector.http_address}{path}", token=f"{role}-secret")
                    seen.setdefault(f"{name} {role}", {})[path] = status
    for name in ("one", "front"):
        assert seen[f"{name} scrape"] == {
            "/metrics": 200, "/": 200, "/ledger": 403, "/api/ledger": 403, "/api/ledger?by=account": 403,
        }  # fmt: skip
        assert seen[f"{name} operator"] == dict.fromkeys(seen[f"{name} scrape"], 200)
