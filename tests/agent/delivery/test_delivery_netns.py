"""Agent and collector in two network namespaces; the link between them is cut and restored.

Delivery must resume by itself (keepalives notice a dead path, the sender reconnects with
backoff) and every report produced during the cut must arrive, once.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.conftest import require_root_tools
from tests.fakes.fleet import Agent, Collector, processes, wait_for
from tests.fakes.netns import VethPair, sh, veth_pair

REPORTS = 150
INTERVAL = 0.05
CUT_SECONDS = 5.0


def _cut(pair: VethPair, how: str) -> None:
    if how == "link-down":
        sh(*pair.exec_a("ip", "link", "set", pair.dev_a, "down"))
    else:
        # Silent 100% loss. The kernels this runs on may lack sch_netem; a token bucket of 8 bit/s
        # with 1 ms of allowed latency drops every packet the same way, without telling anyone.
        sh(*pair.exec_a("tc", "qdisc", "add", "dev", pair.dev_a, "root", "tbf", "rate", "8bit",
                        "burst", "1", "latency", "1ms"))  # fmt: skip


def _restore(pair: VethPair, how: str) -> None:
    if how == "link-down":
        sh(*pair.exec_a("ip", "link", "set", pair.dev_a, "up"))
    else:
        sh(*pair.exec_a("tc", "qdisc", "del", "dev", pair.dev_a, "root"))


@pytest.mark.root
@pytest.mark.parametrize("how", ["link-down", "silent-loss"])
def test_delivery_resumes_after_the_link_comes_back(tmp_path: Path, how: str) -> None:
    require_root_tools("ip", "tc")
    with veth_pair(subnet="127.231.1") as pair, processes() as started:
        collector = Collector(db=tmp_path / "c.db", port=50051, host=pair.addr_b, prefix=pair.exec_b())
        started.append(collector.start())
        agent = Agent(
            ["--collector", collector.address, "--node-id", "node-ns", "--interval", str(INTERVAL),
             "--no-collector.gpu", "--max-reports", str(REPORTS), "--deadline", "90",
             "--spool-dir", str(tmp_path / "spool")],
            prefix=pair.exec_a(),
        ).start(tmp_path / "agent.log")  # fmt: skip
        started.append(agent)
        assert wait_for(lambda: collector.reports("node-ns") >= 20, timeout=30), agent.tail()
        _cut(pair, how)
        time.sleep(0.5)  # what was already in the collector's socket buffer lands
        before = collector.reports("node-ns")
        time.sleep(CUT_SECONDS)
        during = collector.reports("node-ns")
        _restore(pair, how)
        code, summary = agent.wait(timeout=120)
        assert code == 0, agent.tail()
        node = collector.node("node-ns")
    assert during == before, "nothing can arrive while the link is cut"
    assert during < REPORTS
    assert (node["reports_total"], node["last_seq"], node["gap_reports_total"]) == (REPORTS, REPORTS, 0)
    assert summary["dropped_total"] == 0
