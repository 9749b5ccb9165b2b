"""The collector's and the agent's /metrics and /healthz: what they say, and that they say it right.

The fleet families are checked against the detector's own verdicts, read back through
prometheus_client's parser (so the hand-written text format is checked too). Endpoints run for
real: an in-process collector server on loopback, and agent processes streaming to a collector.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from nodeagent.collector.alerts.alerting import Alerting
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.ingest.intake import Ingest
from nodeagent.collector.ingest.node_state import StreamHandle
from nodeagent.collector.service.builder import build_ingest
from nodeagent.collector.service.server import CollectorServer
from nodeagent.collector.service.server_config import ServerConfig
from nodeagent.collector.store.database import StoreWriter
from nodeagent.collector.views import metrics as collector_metrics
from nodeagent.collector.views.metrics_fleet import FleetMetrics
from nodeagent.core.exposition.text import TextFamily, format_value, label, render
from nodeagent.core.transport.security import ServerSecurity
from nodeagent.core.wire.framing import STREAM_METHOD, frame_report
from nodeagent.tools.simulator import Simulation
from tests.conftest import require
from tests.fakes.certs import Authority
from tests.fakes.fleet import Agent, Collector, free_port, processes, wait_for
from tests.fakes.jobs import FakeRollup, job_verdict
from tests.fakes.trees import REPO
from tests.promtool_lint import promtool_problems

# One collector process: these tests speak its ingest stream raw (a front would answer the hello
# with a redirect) and read its database; the front and its workers: tests/collector/workers/.
ONE_PROCESS = 1

SECONDS = 150  # simulated: the ordinary cloud is starved (network, high) well before this


class _Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def ingest(tmp_path: Path) -> Iterator[tuple[Ingest, _Clock]]:
    """An ingest that took SECONDS of reports from an ordinary-cloud and a fast-cloud node."""
    clock = _Clock()
    writer = StoreWriter(tmp_path / "c.db")
    alerting = Alerting(AlertConfig(), [])
    ingest = build_ingest(writer, alerting, clock=clock)
    sims = [Simulation("ordinary-cloud", node_id="oc", seed=1), Simulation("fast-cloud", node_id="fast", seed=1)]
    streams = [StreamHandle(sim.node_id, "test") for sim in sims]
    for sim, stream in zip(sims, streams, strict=True):
        ingest.attach(stream, sim.info())
    for seq in range(1, SECONDS + 1):
        clock.now += 1.0
        for sim, stream in zip(sims, streams, strict=True):
            report = sim.step(1.0)
            report.epoch, report.seq = 1, seq
            if seq == 1:
                report.info.CopyFrom(sim.info())
            ingest.accept(stream, report, report.SerializeToString())
    try:
        yield ingest, clock
    finally:
        writer.call_sync(alerting.close)
        writer.close()


def test_fleet_families_say_what_the_detector_says(ingest: tuple[Ingest, _Clock]) -> None:
    state, _clock = ingest
    samples = _samples(FleetMetrics(state).render())
    oc, fast = state.nodes["oc"].detector, state.nodes["fast"].detector
    assert oc is not None
    assert fast is not None

    gpu_states = {
        (s.labels["node"], s.labels["state"], s.labels["cause"], s.labels["tier"]) for s in samples["gpu_state"]
    }
    assert gpu_states == {("oc", "starved", "network", "high"), ("fast", "busy", "", "")}
    assert len(samples["gpu_state"]) == 16
    assert {s.labels["uuid"] for s in samples["gpu_state"] if s.labels["node"] == "oc"} == {
        g.uuid for g in oc.verdict.gpus
    }
    node_states = {s.labels["node"]: s.labels["state"] for s in samples["node_state"]}
    assert node_states == {"oc": "starved", "fast": "busy"}

    assert _value(samples, "node_starvation_ratio", node="oc") == oc.verdict.starvation_ratio
    assert _value(samples, "node_starvation_ratio", node="fast") == fast.verdict.starvation_ratio
    assert oc.verdict.starvation_ratio is not None
    assert oc.verdict.starvation_ratio > 0.2
    for gpu in oc.verdict.gpus:
        lost = _value(samples, "gpu_data_starved_seconds_total", node="oc", gpu=str(gpu.index))
        assert lost == gpu.gpu_seconds_lost > 0
        assert _value(samples, "gpu_starvation_ratio", node="oc", gpu=str(gpu.index)) == gpu.starvation_ratio
    assert {s.value for s in samples["gpu_data_starved_seconds_total"] if s.labels["node"] == "fast"} == {0.0}
    # Only the network-starved node says what ingest would feed it.
    needed = {s.labels["node"]: s.value for s in samples["node_needed_ingest_bytes_per_second"]}
    assert set(needed) == {"oc"}
    assert needed["oc"] == oc.verdict.needed_ingest_bytes_per_second

    # The detector's inputs: the 10 Gb/s link at its capacity, against the fast node's RDMA port.
    [link] = [s for s in samples["node_link_receive_capacity_ratio"] if s.labels["node"] == "oc"]
    assert link.labels["link"] == "eth0"
    assert link.value >= 0.8
    assert _value(samples, "node_link_receive_capacity_ratio", node="fast") < 0.5
    for name in ("node_network_receive_bytes_per_second", "node_disk_busy_ratio", "node_cpu_busy_ratio",
                 "node_io_pressure_ratio", "node_disk_reads_per_second", "node_disk_read_await_seconds"):  # fmt: skip
        assert {s.labels["node"] for s in samples[name]} == {"oc", "fast"}, name

    for name in ("node_reports_total", "node_connected", "node_gpus"):
        assert {s.labels["node"]: s.value for s in samples[name]} == {
            "oc": {"node_reports_total": SECONDS, "node_connected": 1, "node_gpus": 8}[name],
            "fast": {"node_reports_total": SECONDS, "node_connected": 1, "node_gpus": 8}[name],
        }
    assert {s.value for s in samples["node_spool_dropped_reports_total"]} == {0.0}


def test_gpu_seconds_by_category_are_the_history_split(ingest: tuple[Ingest, _Clock]) -> None:
    """``nodeagent_gpu_seconds_total``: per node, job and category, the history's split since the
    start; the parts add up to the seconds held, and the starved node's network share is its truth."""
    state, _clock = ingest
    samples = _samples(FleetMetrics(state).render())["gpu_seconds_total"]
    by_node: dict[str, dict[str, float]] = {}
    for s in samples:
        assert s.labels["job_name"]
        parts = by_node.setdefault(s.labels["node"], {})
        parts[s.labels["category"]] = parts.get(s.labels["category"], 0.0) + s.value
    assert set(by_node) == {"oc", "fast"}
    for node_id, parts in by_node.items():
        history = state.nodes[node_id].history
        assert history is not None
        rows = [*history.closed, *(acc.row(node_id) for acc in history.open.values())]
        held = sum(r.held_seconds or 0.0 for r in rows if r.gpu >= 0)
        # Counters only grow: the seconds a later verdict may still judge (in minutes within one
        # window of the newest report) are left out until it has, and are all that is left out.
        accs = [*history.open.values(), *(a for m in history.settling.values() for a in m.values())]
        forming = sum(sum(a.provisional) for a in accs if a.gpu >= 0 and a.provisional is not None)
        assert held == pytest.approx(8 * (SECONDS - 1))
        assert sum(parts.values()) == pytest.approx(held - forming)
        assert forming <= 8 * (state.detector_config.window_seconds + 60)
    # Past the detector's entry into `starved`, about 34% of it; over the whole run, less.
    assert 0.2 < by_node["oc"]["network"] / sum(by_node["oc"].values()) < 0.34 + 0.05
    assert by_node["fast"]["network"] == 0.0


def test_a_silent_node_keeps_its_counters_and_loses_its_verdict(ingest: tuple[Ingest, _Clock]) -> None:
    state, clock = ingest
    clock.now += state.detector_config.window_seconds + 1
    samples = _samples(FleetMetrics(state).render())
    assert samples["gpu_state"] == []
    # Its state is down, the word `nodes` and the fleet page show; nothing of its last verdict.
    assert {(s.labels["node"], s.labels["state"], s.labels["cause"]) for s in samples["node_state"]} == {
        ("oc", "down", ""), ("fast", "down", ""),
    }  # fmt: skip
    assert samples["node_cpu_busy_ratio"] == []
    assert {s.labels["node"]: s.value for s in samples["node_reports_total"]} == {"oc": SECONDS, "fast": SECONDS}
    assert len(samples["node_last_report_timestamp_seconds"]) == 2


def test_job_families_say_what_the_rollup_says(ingest: tuple[Ingest, _Clock]) -> None:
    state, clock = ingest
    slowed = job_verdict("torch/10.0.0.1:29500", nodes=("oc", "fast"), straggler_nodes=("oc",), gpus=16)
    wide = job_verdict('mpi/ns"1', source="mpi", nodes=("fast",), straggler_nodes=(), job_wide=True, cause="storage",
                       wait_ratio=0.3, needed_bytes_per_second=None)  # fmt: skip
    gone = job_verdict("1234", source="slurm", nodes=("gone-1", "gone-2"))  # no node of it reports now
    state.jobs = FakeRollup((slowed, wide, gone))
    text = FleetMetrics(state).render()
    samples = _samples(text)
    # The job is `job_name`: a scraped `job` label would become `exported_job` in Prometheus.
    states = {s.labels["job_name"]: s.labels for s in samples["job_state"]}
    assert set(states) == {"torch/10.0.0.1:29500", 'mpi/ns"1'}  # the stale job's series end
    assert states["torch/10.0.0.1:29500"] == {
        "job_name": "torch/10.0.0.1:29500", "source": "torch", "state": "slowed", "cause": "network",
        "job_wide": "false",
    }  # fmt: skip
    assert states['mpi/ns"1']["job_wide"] == "true" and states['mpi/ns"1']["cause"] == "storage"
    assert {s.value for s in samples["job_state"]} == {1.0}
    assert _value(samples, "job_wait_ratio", job_name="torch/10.0.0.1:29500") == 0.53
    assert _value(samples, "job_gpu_seconds_lost_total", job_name="torch/10.0.0.1:29500") == 7200.0
    assert _value(samples, "job_nodes", job_name="torch/10.0.0.1:29500") == 2
    assert _value(samples, "job_gpus", job_name="torch/10.0.0.1:29500") == 16
    assert _value(samples, "job_needed_bytes_per_second", job_name="torch/10.0.0.1:29500") == 2.5e9
    assert {s.labels["job_name"] for s in samples["job_needed_bytes_per_second"]} == {"torch/10.0.0.1:29500"}
    # One series per straggler, none for a job-wide cause.
    assert [s.labels for s in samples["job_straggler"]] == [
        {"job_name": "torch/10.0.0.1:29500", "node": "oc", "cause": "network"}
    ]
    assert "# TYPE nodeagent_job_gpu_seconds_lost_total counter" in text
    require(shutil.which("promtool") is not None, "needs promtool (Debian's prometheus; `make system-deps`)")
    assert promtool_problems(text) == set()
    # Every node silent: no job says anything of now.
    clock.now += state.detector_config.window_seconds + 1
    assert _samples(FleetMetrics(state).render())["job_state"] == []


def test_text_format_escapes_labels_and_writes_values_as_go_does() -> None:
    family = TextFamily("nodeagent_test_ratio", "gauge", "help with \\ and\nnewline")
    odd = 'eth"0\\x\ny'
    family.add(f"{label('node', 'n1')},{label('link', odd)}", 0.25)
    family.add(label("node", "n2"), float("inf"))
    family.add(label("node", "n3"), float("-inf"))
    family.add(label("node", "n4"), 3)
    [parsed] = text_string_to_metric_families(render([family]))
    assert parsed.documentation == "help with \\ and\nnewline"
    assert [(s.labels, s.value) for s in parsed.samples][:1] == [({"node": "n1", "link": odd}, 0.25)]
    assert [s.value for s in parsed.samples][1:] == [float("inf"), float("-inf"), 3.0]
    assert [format_value(v) for v in (float("nan"), 1e21, 0.1, 7)] == ["NaN", "1e+21", "0.1", "7.0"]


def test_collector_serves_metrics_and_health_on_loopback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(collector_metrics, "FLUSH_STALE_SECONDS", 0.5)

    async def scenario() -> dict[str, object]:
        server = CollectorServer(
            ServerConfig(listen="127.0.0.1:0", db_path=tmp_path / "c.db", http_listen="127.0.0.1:0")
        )
        await server.start()
        assert server.http is not None
        await asyncio.sleep(0.3)  # a few flushes
        base = f"http://{server.http.address}"
        seen: dict[str, object] = {}
        try:
            # A stream that opens with a report instead of hello is refused, and counted.
            seen["refused"] = await asyncio.to_thread(_refused_stream, f"127.0.0.1:{server.port}")
            seen["metrics"] = await asyncio.to_thread(_get, f"{base}/metrics")
            seen["healthy"] = await asyncio.to_thread(_get, f"{base}/healthz")
            seen["index"] = await asyncio.to_thread(_get, f"{base}/")
            seen["missing"] = await asyncio.to_thread(_get, f"{base}/nothing")
            # A store that stops completing flushes makes the collector unhealthy.
            never = asyncio.Event()

            async def stuck() -> None:
                await never.wait()

            monkeypatch.setattr(server.ingest.flusher, "flush", stuck)
            await asyncio.sleep(1.0)
            seen["stalled"] = await asyncio.to_thread(_get, f"{base}/healthz")
            assert server.flusher is not None
            server.flusher.cancel()
            await asyncio.sleep(0.05)
            seen["stopped"] = await asyncio.to_thread(_get, f"{base}/healthz")
            monkeypatch.undo()
        finally:
            await server.stop(0.1)
        return seen

    seen = asyncio.run(scenario())
    assert seen["refused"] == grpc.StatusCode.INVALID_ARGUMENT
    status, text = seen["metrics"]  # type: ignore[misc]
    assert status == 200
    samples = _samples(text)
    assert [(s.labels, s.value) for s in samples["ingest_streams_rejected_total"]] == [
        ({"code": "INVALID_ARGUMENT", "reason": "no_hello"}, 1.0)
    ]
    assert [s.value for s in samples["ingest_streams_connected"]] == [0.0]
    # No report arrived: every flush so far was empty, counted apart from the flush durations.
    assert _value(samples, "store_flushes_empty_total") > 0
    assert _value(samples, "store_flush_duration_seconds_count") == 0
    assert "process_resident_memory_bytes" in text
    assert seen["healthy"] == (200, "ok\n")
    # The collector's index is the fleet page (tests/collector/views/test_fleet_page.py).
    index = seen["index"]
    assert index[0] == 200 and "data-page='fleet'" in index[1]  # type: ignore[index]
    assert seen["missing"] == (404, "not found\n")
    assert seen["stalled"][0] == 503  # type: ignore[index]
    assert "no store flush completed" in seen["stalled"][1]  # type: ignore[index]
    assert seen["stopped"] == (503, "store flusher stopped\n")


def test_collector_serves_https_with_its_certificate(tmp_path: Path) -> None:
    ca = Authority(tmp_path, "fleet")
    pem = ca.issue("collector", dns=("localhost",), ips=("127.0.0.1",), server=True)
    security = ServerSecurity(cert_file=pem.cert, key_file=pem.key)

    async def scenario() -> tuple[tuple[int, str], str]:
        config = ServerConfig(
            listen="127.0.0.1:0", db_path=tmp_path / "c.db", security=security, http_listen="127.0.0.1:0"
        )
        server = CollectorServer(config)
        await server.start()
        assert server.http is not None
        try:
            context = ssl.create_default_context(cafile=str(ca.cert_file))
            secure = await asyncio.to_thread(_get, f"https://{server.http.address}/healthz", context)
            try:
                await asyncio.to_thread(_get, f"http://{server.http.address}/healthz")
                plain = "answered"
            except (urllib.error.URLError, ConnectionError, OSError) as err:
                plain = type(err).__name__
        finally:
            await server.stop(0.1)
        return secure, plain

    secure, plain = asyncio.run(scenario())
    assert secure == (200, "ok\n")
    assert plain != "answered"


@pytest.mark.parametrize(
    ("args", "code", "needle"),
    [
        (["--http-listen", "0.0.0.0:0"], 2, "Invalid value for --http-listen: refusing plaintext on non-loopback"),
        (["--http-listen", "localhost"], 2, "is not HOST:PORT"),
        (["--http-listen", "127.0.0.1:{busy}"], 2, "cannot listen on 127.0.0.1:{busy} (--http-listen)"),
    ],
)
def test_serve_refuses_a_bad_http_listener(tmp_path: Path, args: list[str], code: int, needle: str) -> None:
    with _busy_port() as busy:
        args = [a.format(busy=busy) for a in args]
        done = subprocess.run(
            [sys.executable, "-m", "nodeagent.collector", "serve", "--listen", "127.0.0.1:0",
             "--db", str(tmp_path / "c.db"), *args],
            cwd=REPO, capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    assert done.returncode == code
    assert needle.format(busy=busy) in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr


def test_agent_metrics_follow_its_reports_and_its_stream(tmp_path: Path) -> None:
    collector = Collector(workers=ONE_PROCESS, db=tmp_path / "c.db", port=free_port())
    port = free_port()
    with processes() as started:
        started.append(collector.start())
        agent = Agent(
            ["--collector", collector.address, "--node-id", "sim-a", "--simulate", "ordinary-cloud",
             "--interval", "0.05", "--deadline", "60", "--metrics-listen", f"127.0.0.1:{port}"]
        ).start(tmp_path / "agent.log")  # fmt: skip
        started.append(agent)
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: _reachable(f"{url}/metrics"), 20), agent.tail()
        assert wait_for(lambda: _value(_samples(_get(f"{url}/metrics")[1]), "agent_reports_total") >= 40, 20)
        first = _samples(_get(f"{url}/metrics")[1])
        health = _get(f"{url}/healthz")
        agent.kill()
        collector_view = collector.node("sim-a")
    assert health == (200, "ok\n")
    assert [(s.labels, s.value) for s in first["agent_sender_connected"]] == [({"target": collector.address}, 1.0)]
    assert _value(first, "agent_ack_lag_reports") < 20  # acks keep up at 20 reports/s
    assert _value(first, "agent_spool_dropped_reports_total") == 0
    assert _value(first, "agent_reports_total") <= collector_view["reports_total"]
    assert len(first["agent_gpu_utilization_ratio"]) == 8
    assert all(0 < s.value <= 1 for s in first["agent_gpu_utilization_ratio"])
    assert [s.labels["device"] for s in first["agent_network_receive_bytes_total"]] == ["eth0"]
    assert {s.labels["collector"] for s in first["agent_collector_success"]} >= {"netdev", "gpu", "cpu"}
    assert {s.value for s in first["agent_collector_success"]} == {1.0}
    [info] = first["build_info"]
    assert info.labels["node"] == "sim-a"


# ---- helpers ----


def _samples(text: str) -> dict[str, list[Sample]]:
    """Samples by name without the ``nodeagent_`` prefix (every family present, even if empty)."""
    out: dict[str, list[Sample]] = {}
    for family in text_string_to_metric_families(text):
        out.setdefault(family.name.removeprefix("nodeagent_"), [])
        for sample in family.samples:
            out.setdefault(sample.name.removeprefix("nodeagent_"), []).append(sample)
    return out


def _value(samples: dict[str, list[Sample]], name: str, **labels: str) -> float:
    matching = [s.value for s in samples[name] if all(s.labels.get(k) == v for k, v in labels.items())]
    assert len(matching) == 1, (name, labels, matching)
    return float(matching[0])


def _get(url: str, context: ssl.SSLContext | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10, context=context) as response:
            return int(response.status), str(response.read().decode())
    except urllib.error.HTTPError as err:
        return int(err.code), str(err.read().decode())


def _refused_stream(address: str) -> grpc.StatusCode:
    with grpc.insecure_channel(address) as channel:
        call = channel.stream_stream(STREAM_METHOD, request_serializer=lambda b: b)
        try:
            list(call(iter([frame_report(b"")]), timeout=10))
        except grpc.RpcError as err:
            return err.code()
    return grpc.StatusCode.OK


def _reachable(url: str) -> bool:
    try:
        return _get(url)[0] == 200
    except (urllib.error.URLError, ConnectionError):
        return False


@contextlib.contextmanager
def _busy_port() -> Iterator[int]:
    """A loopback port held open (listening) for the duration."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def test_a_gpu_whose_nvlink_counters_outrun_its_links_is_flagged(tmp_path: Path) -> None:
    """The detector ignores a rate above the links' capacity (bad_reading); /metrics says so per
    GPU and link, as `sample` and `top` flag it (tests/agent/gpu/test_gpu_bad_readings.py)."""
    clock = _Clock()
    ingest = build_ingest(StoreWriter(tmp_path / "c.db"), Alerting(AlertConfig(), []), clock=clock)
    sim = Simulation("software-bound", node_id="nv", seed=1)
    info = sim.info()
    capacity = {g.index: g.nvlink_count * g.nvlink_speed_bytes_per_second for g in info.gpu.gpus}
    stream = StreamHandle("nv", "test")
    ingest.attach(stream, info)
    for seq in range(1, SECONDS + 1):
        clock.now += 1.0
        report = sim.step(1.0)
        report.epoch, report.seq = 1, seq
        for g in report.gpus:  # 1024 times what the links carry: counters in the wrong unit
            del g.nvlinks[:]
            g.nvlink_rx_bytes_total = g.nvlink_tx_bytes_total = int(seq * 1024 * capacity[g.index])
        if seq == 1:
            report.info.CopyFrom(info)
        ingest.accept(stream, report, report.SerializeToString())
    samples = _samples(FleetMetrics(ingest).render())
    flagged = {(s.labels["gpu"], s.labels["link"]) for s in samples["gpu_bad_reading"] if s.value == 1}
    assert flagged == {(str(i), "nvlink") for i in capacity}
