"""The shipped recording rules and the dashboards' queries answer on what remote write alone
puts in a TSDB, on both receivers operators run: Debian's Prometheus (its own rule evaluation)
and Debian's VictoriaMetrics (rules through vmalert, as it is run). One collector writes a
short simulated run of a starved and a healthy node to both at once, at full resolution.

In scope: every rule and query whose metrics are all remote-written (the agents' DCGM_FI_* and
node_* families, the detector's nodeagent_node_* / nodeagent_gpu_* series and the rules
recorded from them). The collector's own families (nodeagent_ingest_*, nodeagent_store_*) and
the collector-only per-node rates come from scraping the collector, not from remote write."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import require
from tests.fakes.fleet import Collector, free_port, processes, wait_for
from tests.fakes.remote_write_node import Node
from tests.fakes.trees import REPO
from tests.fakes.tsdb import Prometheus, Receiver, VictoriaMetrics

SHIPPED = REPO / "packaging" / "prometheus"
RULE_FILES = (SHIPPED / "rules.yml", SHIPPED / "gpu-node-rules.yml")
DASHBOARDS = (SHIPPED / "grafana-dashboard.json", SHIPPED / "grafana-gpu-node.json")
STARVED, HEALTHY = "rwr-ordinary-cloud", "rwr-fast-cloud"
REPORTS = 420  # 7 simulated minutes at 1 s, ending now: enough for the [5m] rates
# Grafana's variables as "All" and its interval: every node, every GPU.
VARIABLES = {"$__rate_interval": "1m", "$node": ".*", "$instance": ".*", "$gpu": ".*"}


# No xdist group here: the run ends at the fixture's "now" and an instant query looks back 5
# minutes, so these tests run near their set-up on whichever process took them.


@pytest.fixture(scope="module")
def receivers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Receiver]]:
    require(Prometheus.available(), "needs prometheus (Debian package; `make system-deps`)")
    require(VictoriaMetrics.available(), "needs victoria-metrics and vmalert (Debian package victoria-metrics)")
    tmp = tmp_path_factory.mktemp("rw-rules")
    started: list[Receiver] = []
    try:
        for kind in (Prometheus, VictoriaMetrics):
            started.append(kind(tmp / kind.name, rule_files=RULE_FILES).start())
        _write_a_short_run(tmp, started)
        yield started
    finally:
        for receiver in started:
            receiver.stop()


def test_the_recording_rules_answer_on_both_receivers(receivers: list[Receiver]) -> None:
    recorded = _recording_rules()
    for receiver in receivers:
        written = _written(receiver)
        in_scope = {name: expr for name, expr in recorded.items() if _in_scope(expr, written)}
        # All but the collector's own ingest rate (from scraping the collector) and three of fields
        # the simulated GPUs do not have (free framebuffer, the energy counter, DCGM's profiling SM
        # activity): those the test checks below on the expressions of the others.
        assert set(recorded) - set(in_scope) == {
            "cluster:nodeagent_ingest_reports:rate5m", "gpu:framebuffer_used:ratio", "gpu:energy_power_watts:rate1m",
            "instance:gpu_sm_active:avg",
        }, receiver.name  # fmt: skip

        def complete(in_scope: dict[str, str] = in_scope, receiver: Receiver = receiver) -> bool:
            return all(receiver.query(name, time.time()) for name in in_scope)

        assert wait_for(complete, 90, 1.0), (receiver.name, [n for n in in_scope if not receiver.query(n, time.time())])
        # The rule's own expression answers too (what a receiver without a rule engine shows).
        for name, expr in in_scope.items():
            assert receiver.query(expr, time.time()), (receiver.name, name, expr)


def test_the_alerting_rules_evaluate_on_both_receivers(receivers: list[Receiver]) -> None:
    firing: dict[str, set[str]] = {}

    def alike() -> bool:
        for receiver in receivers:
            written = _answerable(receiver)
            alerts = {rule["alert"]: rule["expr"] for rule in _rules() if "alert" in rule}
            in_scope = {name: expr for name, expr in alerts.items() if _in_scope(expr, written)}
            assert "NodeagentGPUDataStarved" in in_scope
            firing[receiver.name] = {name for name, expr in in_scope.items() if receiver.query(expr, time.time())}
        return firing["prometheus"] == firing["victoria-metrics"]

    # Asked until alike, as the dashboards' queries below: VictoriaMetrics leaves the newest 30 s
    # out of a query, so right after the run is written it may answer nothing yet (it failed so).
    wait_for(alike, timeout=90, interval=5)
    assert firing["prometheus"] == firing["victoria-metrics"]
    assert "NodeagentGPUDataStarved" in firing["prometheus"]


def test_the_dashboards_queries_answer_alike_on_both_receivers(receivers: list[Receiver]) -> None:
    answered: dict[str, set[str]] = {}
    in_scope: dict[str, set[str]] = {}

    def ask() -> set[str]:
        for receiver in receivers:
            written = _answerable(receiver)
            exprs = {_substituted(e) for path in DASHBOARDS for e in _dashboard_exprs(json.loads(path.read_text()))}
            scoped = {expr for expr in exprs if _in_scope(expr, written)}
            in_scope[receiver.name] = scoped
            answered[receiver.name] = {expr for expr in scoped if receiver.query(expr, time.time())}
        # Alike, but for the CPU busy ratio over 1m: the simulator sends per-core CPU times every 30 s,
        # and once the run is over a minute old Prometheus' rate() has one sample in the window where
        # VictoriaMetrics' looks back to the one before.
        return {e for e in answered["prometheus"] ^ answered["victoria-metrics"] if "node_cpu_busy:ratio1m" not in e}

    # Asked until alike: VictoriaMetrics leaves the newest 30 s out of a query (its latency offset),
    # so right after the run is written it may not answer yet what Prometheus already does.
    wait_for(lambda: not ask(), timeout=90, interval=5)
    assert in_scope["prometheus"] == in_scope["victoria-metrics"]
    assert len(in_scope["prometheus"]) >= 20
    differ = answered["prometheus"] ^ answered["victoria-metrics"]
    assert {expr for expr in differ if "node_cpu_busy:ratio1m" not in expr} == set(), differ
    # What stays empty here is what the simulated nodes do not have (NVLink counters per link, an
    # InfiniBand port, an Xid, remapped rows): every other query shows the run.
    silent = in_scope["prometheus"] - answered["prometheus"] - answered["victoria-metrics"]
    assert all(re.search(r"NVLINK|nvlink|infiniband|XID|REMAP", expr) for expr in silent), silent
    assert len(answered["victoria-metrics"]) >= 20


def _write_a_short_run(tmp: Path, receivers: list[Receiver]) -> None:
    start = time.time() - REPORTS - 10
    nodes = [Node(STARVED, "ordinary-cloud", start), Node(HEALTHY, "fast-cloud", start)]
    args = ["--remote-write-resolution-seconds", "0"]
    for receiver in receivers:
        args += ["--remote-write-url", receiver.write_url]
    collector = Collector(db=tmp / "c.db", port=free_port(), args=args, workers=1)
    with processes() as started:
        started.append(collector.start())
        for node in nodes:
            node.stream(collector.address, node.reports(REPORTS))
        offered = sum(node.series_total for node in nodes)

        def sent() -> bool:
            # Every node sample to each receiver (job series, if any, on top).
            counts = re.findall(r'nodeagent_remote_write_samples_total\{result="sent",url="[^"]*"\} (\S+)',
                                collector.metrics())  # fmt: skip
            return len(counts) == len(receivers) and all(float(c) >= offered for c in counts)

        assert wait_for(sent, 120, 0.5), collector.metrics()[-3000:]
    for receiver in receivers:
        if isinstance(receiver, VictoriaMetrics):
            receiver.flush()
        assert receiver.stored_samples(STARVED, time.time()) == nodes[0].series_total, receiver.name


def _rules() -> Iterator[dict[str, str]]:
    for path in RULE_FILES:
        for group in yaml.safe_load(path.read_text())["groups"]:
            yield from group["rules"]


def _recording_rules() -> dict[str, str]:
    return {rule["record"]: rule["expr"] for rule in _rules() if "record" in rule}


def _written(receiver: Receiver) -> set[str]:
    """What remote write stored (the receiver's names, less what its rules recorded)."""
    return {name for name in receiver.names() if ":" not in name}


def _answerable(receiver: Receiver) -> set[str]:
    """The names remote write stored and the rules recorded from them alone."""
    written = _written(receiver)
    return written | {name for name, expr in _recording_rules().items() if _in_scope(expr, written)}


def _in_scope(expr: str, written: set[str]) -> bool:
    """Whether remote write alone can answer ``expr``: every name it reads is written, or, for
    ``A or B`` (the collectors' summary, else the per-GPU series), every name of one side."""
    if _metrics(expr) <= written:
        return True
    return any(len(_metrics(side)) > 0 and _metrics(side) <= written for side in expr.split(" or "))


def _substituted(expr: str) -> str:
    for name, value in VARIABLES.items():
        expr = expr.replace(name, value)
    return expr


def _dashboard_exprs(node: object) -> Iterator[str]:
    """Every panel's PromQL (the template variables' label_values() are Grafana's, not PromQL)."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "expr" and isinstance(value, str):
                yield value
            else:
                yield from _dashboard_exprs(value)
    elif isinstance(node, list):
        for item in node:
            yield from _dashboard_exprs(item)


_STRINGS = re.compile(r'"(?:[^"\\]|\\.)*"')
_IDENTIFIER = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def _metrics(expr: str) -> set[str]:
    """The metrics an expression reads: ours and the exporters' names, the recorded (a colon), up."""
    bare = re.sub(r"\[[^\]]*\]", "", _STRINGS.sub('""', expr))
    bare = re.sub(r"\{[^}]*\}", "", bare)
    return {
        name
        for name in _IDENTIFIER.findall(bare)
        if name.startswith(("nodeagent_", "DCGM_", "node_")) or ":" in name.strip(":") or name == "up"
    }
