"""DCGM's profiling from a local dcgm-exporter (agent/gpu/dcgm_exporter.py, dcgm_page.py): its real
page format, GPUs matched by UUID, and each way it falls back (absent, slow, stale, foreign), said once.

The scrapes are real HTTP to the fake exporter on loopback; the clock the freshness is judged by is
the test's (one reporting interval = 1.0 s), and the test scrapes when the agent's thread would."""

from __future__ import annotations

import json
import socket
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from nodeagent.agent.cli.options import agent_config
from nodeagent.agent.config import ConfigError, DcgmExporterConfig, config_from_mapping
from nodeagent.agent.gpu.dcgm_exporter import DcgmProfiling
from nodeagent.agent.gpu.dcgm_page import NotAnExporterPage, PageParser, parse_page
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.dcgm_exporter import FakeDcgmExporter, FakeGpu, counters, nvml_state_activity, render_family
from tests.fakes.nvml.state import FakeNvmlState, a100_sxm4, h100_sxm5

DATA = Path(__file__).resolve().parents[2] / "data" / "dcgm_exporter"


class Clock:
    def __init__(self) -> None:
        self.now = 5000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def a100() -> FakeNvmlState:
    return a100_sxm4()


@pytest.fixture
def exporter(a100: FakeNvmlState) -> Iterator[FakeDcgmExporter]:
    with FakeDcgmExporter.for_state(a100) as fake:
        for i, g in enumerate(a100.gpus):
            fake.set(g.uuid, sm_active=0.1 * i, tensor_active=0.05 * i)
        yield fake


def samples(state: FakeNvmlState) -> list[pb.GpuSample]:
    """This tick's samples of the fake NVML's GPUs, as the GPU source makes them (no GPM on an A100)."""
    return [pb.GpuSample(index=i, uuid=g.uuid, utilization_gpu_ratio=0.9) for i, g in enumerate(state.gpus)]


def ticks(profiling: DcgmProfiling, clock: Clock, state: FakeNvmlState, n: int) -> list[pb.GpuSample]:
    """``n`` reporting intervals: each tick applies the last page, then the page is scraped (as the
    agent's thread does right after the tick asks); the last tick's samples."""
    out: list[pb.GpuSample] = []
    for _ in range(n):
        out = samples(state)
        profiling.apply(out)
        profiling.scraper.scrape_once()
        clock.now += 1.0
    return out


def profiling_for(url: str, clock: Clock, timeout: float = 5.0) -> DcgmProfiling:
    return DcgmProfiling(DcgmExporterConfig(url=url, timeout_seconds=timeout), clock=clock, background=False)


def fallbacks(logs: list[dict[str, object]]) -> list[object]:
    return [entry["cause"] for entry in logs if entry["event"].startswith("DCGM profiling not used")]


# -- the page --


def test_the_fake_renders_dcgm_exporters_own_expected_page_byte_for_byte() -> None:
    """dcgm-exporter's server test (internal/pkg/server/server_test.go) fixes the page for one GPU
    and one field; the fake's renderer gives the same bytes from the same inputs."""
    labels = {"gpu": "0", "UUID": "GPU-00000000-0000-0000-0000-000000000000", "pci_bus_id": "",
              "device": "nvidia0", "modelName": "NVIDIA T400 4GB", "hostname": "testhost"}  # fmt: skip
    got = render_family("TEST_METRIC", "gauge", "", [(labels, "42")])
    assert got == (DATA / "server_test_expected.txt").read_text()


def test_the_fakes_whole_page_is_valid_exposition_with_the_default_counters(exporter: FakeDcgmExporter) -> None:
    families = {f.name for f in text_string_to_metric_families(exporter.page())}
    active = {name for name, (kind, _, on) in counters().items() if on and kind != "label"}
    # prometheus_client names a counter family without its _total, as it names every counter
    assert families == active | {"DCGM_FI_PROF_SM_ACTIVE"}


def test_another_process_sets_the_fakes_values_over_http(a100: FakeNvmlState, exporter: FakeDcgmExporter) -> None:
    """How the lab drives a fake exporter it runs as a process of its own."""
    body = json.dumps({a100.gpus[1].uuid: {"sm_active": 0.5, "tensor_active": 0.25}}).encode()
    request = urllib.request.Request(exporter.url.replace("/metrics", "/values"), data=body, method="POST")
    with urllib.request.urlopen(request, timeout=10) as answer:
        assert answer.status == 200
    exporter.refresh()
    reading = parse_page(exporter.page()).readings[(a100.gpus[1].uuid, None)]
    assert (reading.sm_active_ratio, reading.tensor_active_ratio) == (0.5, 0.25)


def test_the_lab_fakes_dcgm_reading_the_gpus_activity_from_their_nvml_state(
    a100: FakeNvmlState, tmp_path: Path
) -> None:
    """The lab's emulated DCGM: each refresh takes each GPU's activity from the fake NVML state its
    rank writes (the activity the H100's GPM reads), as DCGM samples the hardware's counters."""
    state = tmp_path / "nvml.state"
    a100.gpus[2].gpm_sm_active, a100.gpus[2].gpm_tensor = 62.5, 25.0
    a100.write(state)
    with FakeDcgmExporter.for_state(a100, refresh_seconds=None) as fake:
        fake.before_refresh = nvml_state_activity(state)
        fake.refresh()
        reading = parse_page(fake.page()).readings[(a100.gpus[2].uuid, None)]
        assert (reading.sm_active_ratio, reading.tensor_active_ratio) == (0.625, 0.25)
        a100.gpus[2].gpm_sm_active = 10.0
        a100.write(state)
        assert parse_page(fake.page()).readings[(a100.gpus[2].uuid, None)].sm_active_ratio == 0.625  # not refreshed
        fake.refresh()
        assert parse_page(fake.page()).readings[(a100.gpus[2].uuid, None)].sm_active_ratio == 0.1
        state.unlink()
        fake.refresh()  # the file gone for a moment: the last values stand
        assert parse_page(fake.page()).readings[(a100.gpus[2].uuid, None)].sm_active_ratio == 0.1


def test_a_page_is_read_per_gpu_uuid_and_gpu_instance(a100: FakeNvmlState, exporter: FakeDcgmExporter) -> None:
    page = parse_page(exporter.page())
    assert page.has_sm_active
    assert page.uuids == {g.uuid for g in a100.gpus}
    assert page.readings[(a100.gpus[3].uuid, None)].sm_active_ratio == pytest.approx(0.3)
    assert page.readings[(a100.gpus[3].uuid, None)].tensor_active_ratio == pytest.approx(0.15)

    parser = PageParser()  # the scraper's: each series' labels parsed once, its value every page
    assert parser.parse(exporter.page()).readings[(a100.gpus[3].uuid, None)].sm_active_ratio == pytest.approx(0.3)
    exporter.set(a100.gpus[3].uuid, sm_active=0.875)
    exporter.refresh()
    assert parser.parse(exporter.page()).readings[(a100.gpus[3].uuid, None)].sm_active_ratio == pytest.approx(0.875)

    a100.split_mig(5, [(1, "3g.40gb", 3, 40), (2, "3g.40gb", 3, 40)])
    mig = FakeDcgmExporter.for_state(a100, old_namespace=True)  # label `uuid`, as under --use-old-namespace
    mig.set(a100.gpus[5].uuid, instance=2, sm_active=0.625)
    page = parse_page(mig.page())
    assert page.readings[(a100.gpus[5].uuid, 2)].sm_active_ratio == pytest.approx(0.625)
    assert page.readings[(a100.gpus[5].uuid, 1)].sm_active_ratio == 0.0
    assert (a100.gpus[5].uuid, None) not in page.readings  # a GPU in MIG mode: its instances only


def test_dcgm_exporters_readme_page_parses_and_says_it_has_no_sm_activity() -> None:
    """The README's example (older spacing, default counters: no DCGM_FI_PROF_SM_ACTIVE)."""
    page = parse_page((DATA / "readme_example.prom").read_text())
    assert not page.has_sm_active
    assert page.readings == {}


def test_values_outside_0_to_1_and_series_without_a_uuid_are_no_reading() -> None:
    text = (
        'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} 1.500000\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-b"} NaN\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="2"} 0.500000\n'
        'DCGM_FI_PROF_SM_ACTIVE{gpu="3",UUID="GPU-d"} 0.250000\n'
    )
    page = parse_page(text)
    assert set(page.readings) == {("GPU-d", None)}
    assert page.uuids == {"GPU-a", "GPU-b", "GPU-d"}


@pytest.mark.parametrize(
    "line",
    ['DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a" 0.5', 'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} abc',
     'DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"}'],
)  # fmt: skip
def test_text_that_is_not_the_exposition_format_is_a_failed_scrape(exporter: FakeDcgmExporter, line: str) -> None:
    profiling = profiling_for(exporter.url, Clock())
    exporter.body = line + "\n"
    profiling.scraper.scrape_once()
    latest = profiling.scraper.latest
    assert latest is not None and latest.page is None
    assert latest.kind == "not_exporter"
    assert latest.error.startswith(f"{exporter.url} does not parse as Prometheus text: ")


def test_the_agents_own_page_is_not_taken_for_dcgms() -> None:
    """The agent's /metrics writes DCGM_FI_PROF_SM_ACTIVE from its own GPM, on dcgm-exporter's port."""
    own = '# TYPE nodeagent_gpu_samples_taken_total counter\nDCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-a"} 0.5\n'
    with pytest.raises(NotAnExporterPage, match="nodeagent"):
        parse_page(own)


# -- matched by UUID, when fresh --


def test_a_fresh_page_fills_each_gpu_by_uuid_with_its_source_and_reason(
    a100: FakeNvmlState, exporter: FakeDcgmExporter
) -> None:
    clock = Clock()
    profiling = profiling_for(exporter.url, clock)
    with capture_logs() as logs:
        first = ticks(profiling, clock, a100, 1)
        assert not any(g.computing_source for g in first)  # the pace of its refreshes is not known yet
        last = ticks(profiling, clock, a100, 5)
    for i, g in enumerate(last):
        assert g.computing_source == "dcgm"
        assert g.sm_active_ratio == pytest.approx(0.1 * i)
        assert g.tensor_active_ratio == pytest.approx(0.05 * i)
        assert g.computing_source_reason.startswith(f"DCGM_FI_PROF_SM_ACTIVE from dcgm-exporter at {exporter.url}")
        assert "s old (refreshed every 1.0 s)" in g.computing_source_reason
    assert [e["event"] for e in logs] == ["using DCGM profiling for the computing share"]


def test_gpm_the_agent_reads_is_kept_and_mig_instances_take_their_own(a100: FakeNvmlState) -> None:
    a100.split_mig(2, [(1, "3g.40gb", 3, 40), (2, "3g.40gb", 3, 40)])
    clock = Clock()
    with FakeDcgmExporter.for_state(a100) as fake:
        fake.set(a100.gpus[0].uuid, sm_active=0.9)
        fake.set(a100.gpus[2].uuid, instance=2, sm_active=0.375)
        profiling = profiling_for(fake.url, clock)
        ticks(profiling, clock, a100, 4)
        gpus = samples(a100)
        gpus[0].sm_active_ratio = 0.2  # GPM read this tick: it covers the report's interval exactly
        for gi in (1, 2):
            gpus[2].mig_instances.add(index=2, uuid=f"MIG-{gi}", gpu_instance_id=gi)
        assert profiling.apply(gpus) == 8  # 6 whole GPUs and 2 instances; GPU 0 keeps GPM's
    assert (gpus[0].sm_active_ratio, gpus[0].computing_source) == (pytest.approx(0.2), "")
    assert gpus[2].mig_instances[1].sm_active_ratio == pytest.approx(0.375)
    assert gpus[2].mig_instances[1].computing_source == "dcgm"
    assert not gpus[2].HasField("sm_active_ratio")  # no whole-GPU series for a GPU in MIG mode


# -- falling back, said once --


def test_an_absent_exporter_falls_back_said_once_then_is_taken_when_it_comes(a100: FakeNvmlState) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    clock = Clock()
    profiling = profiling_for(f"http://127.0.0.1:{port}/metrics", clock)
    with capture_logs() as logs:
        last = ticks(profiling, clock, a100, 6)
    assert not any(g.computing_source for g in last)
    assert fallbacks(logs) == ["absent"]
    assert "connection refused" in str(logs[0]["reason"])


def test_a_stuck_exporter_is_stale_said_once(a100: FakeNvmlState) -> None:
    clock = Clock()
    with FakeDcgmExporter.for_state(a100, refresh_seconds=None) as fake:  # DCGM never refreshes
        profiling = profiling_for(fake.url, clock)
        with capture_logs() as logs:
            last = ticks(profiling, clock, a100, 12)
    assert not any(g.computing_source for g in last)
    assert fallbacks(logs) == ["stale"]
    assert "has not refreshed its values in 4.0 s" in str(logs[0]["reason"])


def test_an_exporter_at_its_default_30_s_interval_is_stale_and_never_flaps(a100: FakeNvmlState) -> None:
    """dcgm-exporter collects every 30 s unless told: each value a 30-s mean, up to 30 s old."""
    clock = Clock()
    with FakeDcgmExporter.for_state(a100, refresh_seconds=None) as fake:
        profiling = profiling_for(fake.url, clock)
        taken = 0
        with capture_logs() as logs:
            for tick in range(95):
                if tick % 30 == 0:
                    fake.refresh()
                gpus = samples(a100)
                taken += profiling.apply(gpus)
                profiling.scraper.scrape_once()
                clock.now += 1.0
    assert taken == 0
    assert fallbacks(logs) == ["stale"]
    assert "run it with --collect-interval 1000 or less" in str(logs[0]["reason"])


def test_a_slow_exporter_falls_back_and_the_tick_does_not_wait_for_it(a100: FakeNvmlState) -> None:
    clock = Clock()
    with FakeDcgmExporter.for_state(a100) as fake:
        profiling = profiling_for(fake.url, clock, timeout=0.5)
        ticks(profiling, clock, a100, 4)
        fake.delay_seconds = 1.5
        asked = fake.requests
        scrape = threading.Thread(target=profiling.scraper.scrape_once)  # the agent's scraping thread
        scrape.start()
        deadline = time.monotonic() + 30
        while fake.requests == asked and time.monotonic() < deadline:
            time.sleep(0.01)
        clock.now += 1.0
        with capture_logs() as logs:
            gpus = samples(a100)
            assert profiling.apply(gpus) == 0  # in flight past its deadline: slow, and not waited for
            scrape.join()
            for _ in range(5):
                clock.now += 1.0
                profiling.apply(samples(a100))
    assert not any(g.computing_source for g in gpus)
    assert fallbacks(logs) == ["slow"]


def test_an_exporter_answering_for_other_gpus_falls_back_said_once(a100: FakeNvmlState) -> None:
    """A Service that routed to another node's exporter: none of its UUIDs is this node's."""
    clock = Clock()
    with FakeDcgmExporter.for_state(h100_sxm5()) as other:
        profiling = profiling_for(other.url, clock)
        with capture_logs() as logs:
            last = ticks(profiling, clock, a100, 8)
    assert not any(g.computing_source for g in last)
    assert fallbacks(logs) == ["foreign"]
    assert "none of this node's" in str(logs[0]["reason"])


def test_gpus_the_page_does_not_name_keep_their_source_said_once(a100: FakeNvmlState) -> None:
    clock = Clock()
    half = FakeNvmlState(gpus=a100.gpus[:4])
    with FakeDcgmExporter.for_state(half) as fake:
        profiling = profiling_for(fake.url, clock)
        with capture_logs() as logs:
            last = ticks(profiling, clock, a100, 8)
    assert [g.computing_source for g in last] == ["dcgm"] * 4 + [""] * 4
    warned = [e for e in logs if e["event"].startswith("dcgm-exporter has no reading")]
    assert len(warned) == 1 and warned[0]["uuids"] == [g.uuid for g in a100.gpus[4:]]


def test_an_exporter_without_sm_activity_or_answering_an_error_falls_back(a100: FakeNvmlState) -> None:
    clock = Clock()
    with FakeDcgmExporter.for_state(a100, collect_sm_active=False) as fake, capture_logs() as logs:
        profiling = profiling_for(fake.url, clock)
        ticks(profiling, clock, a100, 4)
        fake.collect_sm_active, fake.status = True, 500
        ticks(profiling, clock, a100, 4)
    assert fallbacks(logs) == ["no_sm_active", "absent"]
    assert "HTTP 500" in str(logs[-1]["reason"])


# -- configuration --


def test_the_section_is_off_by_default_and_bad_values_are_one_line() -> None:
    assert config_from_mapping({}).dcgm_exporter.url == ""
    got = config_from_mapping({"dcgm_exporter": {"url": "http://127.0.0.1:9400/metrics", "timeout_seconds": 1}})
    assert got.dcgm_exporter == DcgmExporterConfig(url="http://127.0.0.1:9400/metrics", timeout_seconds=1.0)
    for table, message in [
        ({"url": "https://node:9400/metrics"}, "dcgm_exporter.url: expected http://HOST:PORT/PATH"),
        ({"url": "http://node:99999/metrics"}, "dcgm_exporter.url: 'http://node:99999/metrics' is not a URL"),
        ({"url": 9400}, "dcgm_exporter.url: expected a string"),
        ({"timeout_seconds": 0}, "dcgm_exporter.timeout_seconds: expected 0.01 to 10 seconds"),
        ({"interval": 1}, "dcgm_exporter.interval: unknown key"),
    ]:
        with pytest.raises(ConfigError, match=message.replace("?", r"\?")) as err:
            config_from_mapping({"dcgm_exporter": table}, source="agent.toml")
        assert "\n" not in str(err.value)


def test_the_commands_carry_the_files_sections_through(tmp_path: Path) -> None:
    """What sample, run and top build from the file keeps every section (gpu_power_sample_seconds
    was dropped there before)."""
    path = tmp_path / "agent.toml"
    path.write_text('gpu_power_sample_seconds = 0.25\n[dcgm_exporter]\nurl = "http://127.0.0.1:9400/metrics"\n')
    config = agent_config(path, ("eth0=50G",))
    assert config.gpu_power_sample_seconds == 0.25
    assert config.dcgm_exporter.url == "http://127.0.0.1:9400/metrics"
    assert config.link_speeds == {"eth0": 50e9 / 8}


def test_the_fakes_refreshes_keep_to_dcgms_own_clock_not_the_scrapes(monkeypatch: pytest.MonkeyPatch) -> None:
    """DCGM samples a watched field every update period on its own clock and dcgm-exporter reads
    the latest sample at each scrape: scrapes a little under the period apart still see a new
    sample nearly every time (refreshed whenever a period had passed since the last scrape, the
    fake skipped every other one, and the lab's DCGM regime read half the seconds)."""
    clock = [100.0]
    monkeypatch.setattr(time, "monotonic", lambda: clock[0])
    fake = FakeDcgmExporter([FakeGpu(0, "GPU-0", "NVIDIA A100-SXM4-80GB", "00000000:07:00.0")], refresh_seconds=1.0)
    fake.page()
    for k in range(1, 11):
        clock[0] = 100.0 + 0.99 * k
        fake.page()
    assert fake._dcgm.refreshes == 10  # the first, then every scrape but the first after it
