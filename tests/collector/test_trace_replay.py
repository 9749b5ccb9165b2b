"""`nodeagent record` and `nodeagent-collector replay` as a user runs them: real processes, real
files, and traces broken the ways real ones get broken (truncated writes, hand edits, clock steps)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.collector.replay import replay_alerts
from nodeagent.core.detector.alert_signals import AlertSignal
from nodeagent.core.wire.trace import TraceError, format_report, read_trace


def nodeagent(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", *args], capture_output=True, text=True, timeout=120, check=False
    )


def collector(*args: str) -> subprocess.CompletedProcess[str]:
    code = "from nodeagent.collector.cli.main import main; main()"
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120, check=False)


# The module fixture below is set up once: one test process runs every test here (make test: --dist loadgroup).
pytestmark = pytest.mark.xdist_group("trace_replay")


@pytest.fixture(scope="module")
def ordinary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("traces") / "ordinary.jsonl"
    done = nodeagent("record", "--simulate", "ordinary-cloud", "--duration", "300", "--seed", "5", "--out", str(path))
    assert done.returncode == 0, done.stderr
    assert "recorded 301 reports" in done.stderr
    return path


def test_a_simulated_trace_is_the_same_for_the_same_seed(ordinary: Path, tmp_path: Path) -> None:
    again, other = tmp_path / "again.jsonl", tmp_path / "other.jsonl"
    assert nodeagent("record", "--simulate", "ordinary-cloud", "--duration", "300", "--seed", "5",
                     "--out", str(again)).returncode == 0  # fmt: skip
    assert nodeagent("record", "--simulate", "ordinary-cloud", "--duration", "300", "--seed", "6",
                     "--out", str(other)).returncode == 0  # fmt: skip
    assert again.read_bytes() == ordinary.read_bytes()
    assert other.read_bytes() != ordinary.read_bytes()


def test_the_trace_format_is_the_json_mapping_with_proto_names(ordinary: Path) -> None:
    lines = ordinary.read_text().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    assert first["node_id"] == "sim-ordinary-cloud" and first["seq"] == "1" and first["epoch"] == "1"
    assert first["info"]["gpu"]["gpus"][0]["pcie_max_generation"] == 4  # snake_case names
    assert "info" not in second
    assert second["time_unix_seconds"] == first["time_unix_seconds"] + 1
    assert isinstance(second["gpus"][0]["pcie_rx_bytes_total"], str)  # 64-bit integers as strings
    reread = [report for _, report in read_trace(io.BytesIO(ordinary.read_bytes()), strict=True)]
    assert format_report(reread[7]) == lines[7]


def test_replay_shows_the_network_starved_node(ordinary: Path) -> None:
    text = collector("replay", str(ordinary))
    assert text.returncode == 0, text.stderr
    assert "GPU 0-7" in text.stdout and "starved (network, high)" in text.stdout
    assert "firing   GPUDataStarved critical" in text.stdout
    done = collector("replay", "--json", str(ordinary))
    assert done.returncode == 0, done.stderr
    (node,) = json.loads(done.stdout)["nodes"]
    assert node["reports"] == 301
    (alert,) = node["alerts"]
    assert alert["status"] == "firing" and alert["labels"]["cause"] == "network"
    starved = [c for c in node["timeline"] if c["state"] == "starved"]
    assert len(starved) == 8 and starved[0]["starvation_ratio"] == pytest.approx(0.339, abs=0.01)
    shares = node["shares"]["node"]
    assert shares["state_ratios"]["starved"] + shares["state_ratios"]["busy"] == pytest.approx(1.0)
    assert shares["cause_ratios"]["network"] == shares["state_ratios"]["starved"] > 0.8
    final = node["final_verdict"]
    assert final["interconnect_ratio"] == pytest.approx(14 / 112, abs=0.01)
    assert collector("replay", "--json", str(ordinary)).stdout == done.stdout  # deterministic


def test_replay_resolves_when_the_bottleneck_goes_away(tmp_path: Path) -> None:
    trace = tmp_path / "onset.jsonl"
    assert nodeagent("record", "--simulate", "storage-bound", "--duration", "400", "--set", "onset_seconds=60",
                     "--set", "recovery_seconds=250", "--out", str(trace)).returncode == 0  # fmt: skip
    done = collector("replay", "--json", str(trace))
    alerts = json.loads(done.stdout)["nodes"][0]["alerts"]
    assert [a["status"] for a in alerts] == ["firing", "resolved"]
    assert 60 < alerts[0]["time_unix_seconds"] - 1_767_225_600 <= 120
    assert alerts[1]["labels"]["cause"] == "storage"


def test_replay_skips_bad_lines_and_names_them(ordinary: Path, tmp_path: Path) -> None:
    lines = ordinary.read_text().splitlines()
    broken = [
        *lines[:100],
        '{"node_id": "sim-ordinary-cloud", "gpus": [',  # a write cut short
        "",
        '{"node_id": "sim-ordinary-cloud"}',  # no time
        '{"time_unix_seconds": 1767225750}',  # no node
        lines[40],  # the clock stepped back
        '{"node_id": "sim-ordinary-cloud", "time_unix_seconds": 1767225900, "gpus": [{"index": "three"}]}',
        *lines[100:],
    ]
    trace = tmp_path / "broken.jsonl"
    trace.write_bytes("\n".join(broken).encode() + b"\n\xff\xfe garbage\n")
    done = collector("replay", "--json", str(trace))
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    for number in (101, 103, 104, 105, 106, 308):
        assert f"broken.jsonl:{number}: skipped" in done.stderr
    assert "time goes backwards" in done.stderr and "missing time_unix_seconds" in done.stderr
    assert "skipped 6 bad line(s)" in done.stderr
    result = json.loads(done.stdout)
    assert [s["line"] for s in result["skipped_lines"]] == [101, 103, 104, 105, 106, 308]
    assert result["nodes"][0]["reports"] == 301
    assert result["nodes"][0]["final_verdict"]["cause"] == "network"


def test_strict_replay_stops_at_the_first_bad_line(ordinary: Path, tmp_path: Path) -> None:
    lines = ordinary.read_text().splitlines()
    trace = tmp_path / "backwards.jsonl"
    trace.write_text("\n".join([*lines[:50], lines[10], *lines[50:]]) + "\n")
    done = collector("replay", "--strict", str(trace))
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
    assert done.stderr.startswith(f"nodeagent-collector: error: {trace}:51: time goes backwards")


def test_replay_rejects_what_it_cannot_read(ordinary: Path, tmp_path: Path) -> None:
    assert collector("replay", str(tmp_path / "missing.jsonl")).returncode == 2
    config = tmp_path / "collector.toml"
    config.write_text("[detector]\nmoderate_ratio = 'lots'\n")
    trace = tmp_path / "empty.jsonl"
    trace.write_text("")
    done = collector("replay", "--config", str(config), str(trace))
    assert done.returncode == 2
    assert "moderate_ratio: expected a number" in done.stderr and "[detector]" in done.stderr
    config.write_text("[detector]\nmoderate_ratio = 0.5\nhigh_ratio = 0.6\n")
    done = collector("replay", "--json", "--config", str(config), str(trace))
    assert done.returncode == 2 and done.stdout == ""  # a trace with no report is nothing to replay
    assert done.stderr.strip() == f"nodeagent-collector: error: {trace}: no valid report (empty)"
    done = collector("replay", "--json", "--config", str(config), str(ordinary))
    assert done.returncode == 0 and len(json.loads(done.stdout)["nodes"]) == 1


def test_record_rejects_bad_flags_without_touching_the_file(tmp_path: Path) -> None:
    out = tmp_path / "trace.jsonl"
    for args in (
        ("--simulate", "nope"),
        ("--simulate", "healthy", "--set", "no_such=1"),
        ("--seed", "3"),
    ):
        done = nodeagent("record", "--duration", "5", "--out", str(out), *args)
        assert done.returncode == 2, args
        assert done.stderr.startswith("nodeagent: error: ") and done.stderr.count("\n") == 1
        assert not out.exists()


def test_live_record_of_this_machine(tmp_path: Path) -> None:
    out = tmp_path / "live.jsonl"
    done = nodeagent("record", "--duration", "1", "--interval", "0.5", "--out", str(out))
    assert done.returncode == 0, done.stderr
    found = list(read_trace(io.BytesIO(out.read_bytes()), strict=True))
    assert len(found) == 3
    assert found[0][1].HasField("info") and [r.seq for _, r in found] == [1, 2, 3]


def test_reader_strictness_in_process() -> None:
    data = b'{"node_id":"a","time_unix_seconds":2}\n{"node_id":"a","time_unix_seconds":1}\n'
    assert [n for n, _ in read_trace(io.BytesIO(data))] == [1]
    with pytest.raises(TraceError, match="line 2: time goes backwards"):
        list(read_trace(io.BytesIO(data), strict=True))


def test_replay_alerts_turns_signals_into_a_lifecycle() -> None:
    def signal(firing: bool, tier: str = "moderate") -> list[AlertSignal]:
        labels = {"cause": "network", "tier": tier} if firing else {}
        return [AlertSignal("GPUDataStarved", "n1", "", firing, "warning", labels)]

    transitions = replay_alerts(
        [(10.0, signal(False)), (20.0, signal(True)), (30.0, signal(True)), (40.0, signal(True, "high")),
         (50.0, signal(False)), (60.0, signal(False))]
    )  # fmt: skip
    assert [(t.time_unix_seconds, t.status) for t in transitions] == [
        (20.0, "firing"),
        (40.0, "updated"),
        (50.0, "resolved"),
    ]
    assert transitions[-1].labels["tier"] == "high"  # the resolved alert is the one that was firing
