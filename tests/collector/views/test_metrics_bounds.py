"""``[metrics]``: the collector's ``/metrics`` leaves the per-GPU families out when told or above
``per_gpu_max_nodes`` reporting nodes, the per-node ones when told, and always carries the fleet
summary (``nodeagent_fleet_*``) that says what the fleet is meanwhile. A bad value: one line, exit 2.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.config import CollectorConfigError, config_from_mapping
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.views.metrics_config import MetricsConfig
from nodeagent.collector.views.metrics_fleet import FleetMetrics
from nodeagent.tools.simulator import Simulation
from tests.fakes.trees import REPO

SECONDS = 150  # simulated: the ordinary cloud is starved (network, high) well before this
PER_GPU = ("nodeagent_gpu_state", "nodeagent_gpu_starvation_ratio", "nodeagent_gpu_data_starved_seconds_total")
PER_NODE = ("nodeagent_node_state", "nodeagent_node_reports_total", "nodeagent_node_cpu_busy_ratio")


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("metrics_bounds")


@pytest.fixture(scope="module")
def ingest(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ingest]:
    """An ingest that took SECONDS of reports from a starved and a busy 8-GPU node."""
    clock = [1_800_000_000.0]
    writer = StoreWriter(tmp_path_factory.mktemp("bounds") / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=lambda: clock[0])
    sims = [Simulation("ordinary-cloud", node_id="oc", seed=1), Simulation("fast-cloud", node_id="fast", seed=1)]
    streams = [StreamHandle(sim.node_id, "test") for sim in sims]
    for sim, stream in zip(sims, streams, strict=True):
        ingest.attach(stream, sim.info())
    for seq in range(1, SECONDS + 1):
        clock[0] += 1.0
        for sim, stream in zip(sims, streams, strict=True):
            report = sim.step(1.0)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            ingest.accept(stream, report, report.SerializeToString())
    try:
        yield ingest
    finally:
        writer.call_sync(alerting.close)
        writer.close()


def _lines(text: str, name: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith((f"{name}{{", f"{name} "))]


def _page(ingest: Ingest, worker: str | None = None, **settings: object) -> str:
    config = config_from_mapping({"metrics": settings}, "collector.toml").metrics
    return FleetMetrics(ingest, settings=config, worker=worker).render()


def test_by_default_a_small_fleet_has_every_family_and_the_summary(ingest: Ingest) -> None:
    page = _page(ingest)
    for name in (*PER_GPU, *PER_NODE):
        assert _lines(page, name), name
    assert len(_lines(page, "nodeagent_gpu_state")) == 16
    assert sorted(_lines(page, "nodeagent_fleet_gpus")) == [
        'nodeagent_fleet_gpus{state="busy",cause="",tier=""} 8.0',
        'nodeagent_fleet_gpus{state="starved",cause="network",tier="high"} 8.0',
    ]
    assert sorted(_lines(page, "nodeagent_fleet_nodes")) == [
        'nodeagent_fleet_nodes{state="busy"} 1.0',
        'nodeagent_fleet_nodes{state="starved"} 1.0',
    ]
    assert _lines(page, "nodeagent_fleet_per_gpu_families") == ["nodeagent_fleet_per_gpu_families 1.0"]


def test_above_per_gpu_max_nodes_the_per_gpu_families_leave_and_the_summary_stays(ingest: Ingest) -> None:
    full, bounded = _page(ingest, per_gpu_max_nodes=2), _page(ingest, per_gpu_max_nodes=1)
    assert _lines(full, "nodeagent_gpu_state")  # two reporting nodes: at the bound, still shown
    for name in PER_GPU:
        assert _lines(bounded, name) == [], name
    for name in PER_NODE:
        assert _lines(bounded, name) == _lines(full, name), name
    assert _lines(bounded, "nodeagent_fleet_gpus") == _lines(full, "nodeagent_fleet_gpus")
    assert _lines(bounded, "nodeagent_fleet_per_gpu_families") == ["nodeagent_fleet_per_gpu_families 0.0"]
    assert len(bounded.splitlines()) < len(full.splitlines()) - 16 * 3


def test_per_gpu_families_false_leaves_them_out_at_any_size(ingest: Ingest) -> None:
    page = _page(ingest, per_gpu_families=False, per_gpu_max_nodes=0)
    assert [name for name in PER_GPU if _lines(page, name)] == []
    assert _lines(page, "nodeagent_node_state")


def test_per_node_families_false_leaves_the_summary_only(ingest: Ingest) -> None:
    page = _page(ingest, per_node_families=False, per_gpu_families=False)
    samples = [line for line in page.splitlines() if not line.startswith("#")]
    assert [line for line in samples if "node=" in line] == []
    assert {line.split("{")[0].split(" ")[0] for line in samples} == {
        "nodeagent_fleet_nodes", "nodeagent_fleet_gpus", "nodeagent_fleet_per_gpu_families",
    }  # fmt: skip
    # Per-GPU families can stay without the per-node ones.
    assert len(_lines(_page(ingest, per_node_families=False), "nodeagent_gpu_state")) == 16


def test_a_workers_summary_carries_its_worker_label(ingest: Ingest) -> None:
    page = _page(ingest, worker="1")
    assert 'nodeagent_fleet_per_gpu_families{worker="1"} 1.0' in page
    assert 'nodeagent_fleet_nodes{worker="1",state="busy"} 1.0' in page


def test_the_default_bound_is_a_thousand_reporting_nodes() -> None:
    config = MetricsConfig()
    assert config.per_gpu_shown(1000)
    assert not config.per_gpu_shown(1001)
    assert MetricsConfig(per_gpu_max_nodes=0).per_gpu_shown(10**6)


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ({"per_gpu": False}, "f.toml: metrics.per_gpu: unknown key (known: per_gpu_families, per_gpu_max_nodes,"),
        ({"per_gpu_families": "no"}, "f.toml: metrics.per_gpu_families: expected true or false, got 'no'"),
        ({"per_node_families": 1}, "f.toml: metrics.per_node_families: expected true or false, got 1"),
        ({"per_gpu_max_nodes": -1}, "f.toml: metrics.per_gpu_max_nodes: expected 0 (no bound) or more, got -1"),
        ({"per_gpu_max_nodes": 1.5}, "f.toml: metrics.per_gpu_max_nodes: expected an integer, got 1.5"),
    ],
)
def test_a_bad_metrics_table_is_one_line(table: dict[str, object], message: str) -> None:
    with pytest.raises(CollectorConfigError) as err:
        config_from_mapping({"metrics": table}, "f.toml")
    assert str(err.value).startswith(message), err.value
    assert "\n" not in str(err.value)


def test_serve_stops_on_a_bad_metrics_value_with_one_line(tmp_path: Path) -> None:
    config = tmp_path / "collector.toml"
    config.write_text("[metrics]\nper_gpu_max_nodes = -5\n")
    done = subprocess.run(
        [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", "127.0.0.1:0",
         "--db", str(tmp_path / "c.db"), "--config", str(config)],
        cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "metrics.per_gpu_max_nodes" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
