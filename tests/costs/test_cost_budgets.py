"""The cost gate (issue 44, item 4): the agent's and the collector's work per tick and per report,
counted, held under the budgets of ``budgets.toml``.

A test fails naming each stage over its budget, one line each, with its count and its budget.
``NODEAGENT_COSTS_PRINT=1 .venv/bin/pytest tests/costs -q -s`` prints every count beside its
budget: how to re-measure one after a change (docs/performance.md#the-cost-gate).
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from nodeagent.agent.config import AgentConfig
from nodeagent.agent.gpu.dcgm_exporter import DcgmProfiling
from nodeagent.agent.kernel.files import KernelFiles
from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots, SourceContext
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.tools.ingest_rig import ORDER, IngestRig
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.costs.counting import ShimUnavailable, StageCounter, TickCalls, build_alloc_counter
from tests.fakes.dcgm_exporter import FakeDcgmExporter
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import PROFILES, FakeNvmlState

BUDGETS: dict[str, Any] = tomllib.loads(Path(__file__).with_name("budgets.toml").read_text())
PRINT = os.environ.get("NODEAGENT_COSTS_PRINT") == "1"

# The fixed trace: loadgen's simulated 8-GPU nodes (seed 1), windows filled first, then counted.
NODES, FLUSH_EVERY, WARMUP_SECONDS, COUNTED_SECONDS = 50, 50, 10, 2
# The agent's tick: these sources over node_exporter's fixture tree, and 8 GPUs of the fake.
HOST_SOURCES = ("netdev", "infiniband", "diskstats", "cpu", "meminfo", "pressure", "netstat")
# Power read between ticks runs on the readers' own clock, not per tick: off, so a tick is a tick.
NO_POWER_BETWEEN = dataclasses.replace(AgentConfig(), gpu_power_sample_seconds=0)


def over_budget(section: str, what: str, unit: str, counts: Mapping[str, float]) -> list[str]:
    """One line per stage of ``section`` whose count is over its budget; every count printed
    beside its budget when asked."""
    budgets, lines = BUDGETS[section], []
    for stage, count in counts.items():
        budget = budgets[stage]
        if PRINT:
            print(f"{section}.{stage}: {count:,.1f} (budget {budget:,})")
        if count > budget:
            lines.append(f"{what}: {stage} made {count:,.1f} {unit}, budget {budget:,}")
    return lines


@pytest.fixture(scope="module")
def ingest_counts(tmp_path_factory: pytest.TempPathFactory) -> StageCounter:
    """The fixed trace through the collector's ingest, counted stage by stage."""
    try:
        shim = build_alloc_counter(tmp_path_factory.mktemp("alloc-count"))
    except ShimUnavailable as err:
        if os.environ.get("NODEAGENT_REQUIRE_LIVE_TESTS") == "1":
            pytest.fail(f"the allocation counter cannot be built in CI: {err}")
        pytest.skip(str(err))
    counter = StageCounter(shim)

    async def run() -> None:
        rig = IngestRig(tmp_path_factory.mktemp("ingest") / "gate.db", NODES, flush_every=FLUSH_EVERY)
        try:
            await rig.run(WARMUP_SECONDS)
            with counter:
                counter.reports = await rig.run(COUNTED_SECONDS, counter)  # type: ignore[attr-defined]
        finally:
            await rig.close()

    asyncio.run(run())
    return counter


def per_report(counter: StageCounter, counts: Mapping[str, int]) -> dict[str, float]:
    reports: int = counter.reports  # type: ignore[attr-defined]
    return {stage: counts.get(stage, 0) / reports for stage in ORDER if stage in BUDGETS["ingest_python_calls"]}


def test_ingest_python_calls_per_report_within_budget(ingest_counts: StageCounter) -> None:
    counts = per_report(ingest_counts, ingest_counts.calls)
    over = over_budget("ingest_python_calls", "collector ingest", "Python calls per report", counts)
    assert not over, "\n".join(over)


def test_ingest_allocations_per_report_within_budget(ingest_counts: StageCounter) -> None:
    counts = per_report(ingest_counts, ingest_counts.allocations)
    over = over_budget("ingest_allocations", "collector ingest", "object allocations per report", counts)
    assert not over, "\n".join(over)


@pytest.fixture
def gpu_source(fake_nvml: FakeNvml) -> Iterator[GpuSource]:
    ctx = SourceContext(roots=Roots(), files=KernelFiles(), config=NO_POWER_BETWEEN)
    source = GpuSource(ctx)
    yield source
    source.close()
    ctx.files.close()


@pytest.mark.parametrize("job", [False, True], ids=["idle", "with_job"])
@pytest.mark.parametrize("profile", ["a100_sxm4", "h100_sxm5", "b200"])
def test_nvml_calls_per_gpu_per_tick_within_budget(
    fake_nvml: FakeNvml, gpu_source: GpuSource, profile: str, job: bool
) -> None:
    """Steady ticks of idle GPUs, and of GPUs each running a process (this test's own: a job's
    rank), which adds the processes' shares (``nvmlDeviceGetProcessUtilization``) to the round:
    the most calls any GPU made in any tick of two whole rounds (``round_readings``)."""
    state = PROFILES[profile]()
    if job:
        for g in state.gpus:
            g.procs, g.mem_used, g.util_gpu = {os.getpid(): 2 << 30}, 3 << 30, 90
    fake_nvml.load(state)
    gpu_source.scan(pb.NodeInfo())
    gpu_source.collect(pb.NodeReport(time_unix_seconds=1000.0))  # the first tick opens what it keeps
    most = 0
    for tick in range(10):
        _advance(fake_nvml, state)
        fake_nvml.reset_counts()
        gpu_source.collect(pb.NodeReport(time_unix_seconds=1001.0 + tick))
        per_gpu = [
            fake_nvml.calls(gpu=i) - fake_nvml.calls("nvmlEventSetWait_v2", gpu=i)  # the event thread's
            for i in range(len(state.gpus))
        ]
        most = max(most, *per_gpu)
    stage = f"{profile}_with_job" if job else profile
    over = over_budget("nvml_calls_per_gpu_per_tick", "agent GPU tick", "NVML calls per GPU", {stage: most})
    assert not over, "\n".join(over)


@pytest.mark.parametrize("profile", ["a100_sxm4", "h100_sxm5"])
def test_agent_python_calls_per_tick_within_budget(
    fake_nvml: FakeNvml, node_exporter_roots: Roots, profile: str
) -> None:
    state = fake_nvml.load(PROFILES[profile]())
    clock = [1000.0]
    counter = TickCalls()
    with counter.installed():
        sampler = Sampler(
            [*HOST_SOURCES, "gpu"], node_id="gate", roots=node_exporter_roots, config=NO_POWER_BETWEEN,
            clock=lambda: clock[0],
        )  # fmt: skip
        try:
            for _ in range(3):  # the scan, then ticks until every cache is warm
                sampler.tick()
                clock[0] += 1.0
                _advance(fake_nvml, state)
            with counter.counting():
                sampler.tick().SerializeToString()
        finally:
            sampler.close()
    over = over_budget("agent_python_calls_per_tick", "agent tick", "Python calls", {profile: counter.total})
    assert not over, "\n".join(over)


def _advance(fake: FakeNvml, state: FakeNvmlState) -> None:
    state.advance(1.0)
    for gpu in state.gpus:
        gpu.add_traffic(1.0, pcie_rx=1e9, nvlink_rx_per_link=1e9)
    fake.write()


def test_dcgm_python_calls_per_tick_within_budget() -> None:
    """With ``[dcgm_exporter]``: the tick's part (``DcgmProfiling.apply`` on 8 A100s, every GPU
    taking DCGM's reading) and the scraping thread's (one GET of the fake's page with dcgm-exporter's
    default counters and SM activity, and its parse), each once per tick."""
    state = PROFILES["a100_sxm4"]()
    clock = [1000.0]
    counter = TickCalls()
    with FakeDcgmExporter.for_state(state) as exporter, counter.installed():
        config = dataclasses.replace(AgentConfig().dcgm_exporter, url=exporter.url, timeout_seconds=5.0)
        profiling = DcgmProfiling(config, clock=lambda: clock[0], background=False)
        gpus: list[pb.GpuSample] = []
        for _ in range(5):  # until the exporter's pace is known and its readings are taken
            gpus = [pb.GpuSample(index=i, uuid=g.uuid) for i, g in enumerate(state.gpus)]
            profiling.apply(gpus)
            profiling.scraper.scrape_once()
            clock[0] += 1.0
        assert all(g.computing_source == "dcgm" for g in gpus)
        gpus = [pb.GpuSample(index=i, uuid=g.uuid) for i, g in enumerate(state.gpus)]
        with counter.counting():
            profiling.apply(gpus)
        tick = counter.total
        with counter.counting():
            profiling.scraper.scrape_once()
        scrape = counter.total
    over = over_budget("dcgm_python_calls_per_tick", "DCGM source", "Python calls", {"apply": tick, "scrape": scrape})
    assert not over, "\n".join(over)
