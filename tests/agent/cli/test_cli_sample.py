"""``nodeagent sample`` as a user runs it: a real process, real output, real exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent.sources import Roots


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_json_snapshots_carry_topology_then_rates(node_exporter_roots: Roots) -> None:
    result = run(
        "sample", "--json", "--count", "2", "--interval", "0.05",
        "--procfs", node_exporter_roots.procfs, "--sysfs", node_exporter_roots.sysfs,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    first, second = (json.loads(line) for line in result.stdout.splitlines())
    assert first["interval_seconds"] is None
    assert {p["device"] for p in first["info"]["rdma_ports"]} == {"mlx4_0", "i40iw0"}
    assert "info" not in second
    assert second["interval_seconds"] > 0
    nvme = next(d for d in second["disks"] if d["name"] == "nvme0n1")
    assert nvme["reads_per_second"] == 0.0  # a fixture tree does not move
    assert nvme["read_bytes_total"] == 2377714176


def test_table_output_is_readable(node_exporter_roots: Roots) -> None:
    result = run(
        "sample", "--count", "2", "--interval", "0.05", "--all",
        "--procfs", node_exporter_roots.procfs, "--sysfs", node_exporter_roots.sysfs,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "first sample: counters and topology" in out
    assert "interval" in out
    assert "mlx4_0/1" in out and "ACTIVE" in out and "40.00 Gb/s" in out
    assert "nvme0n1" in out


def test_configured_link_speed_is_used_for_percent_of_link(tmp_path: Path, procfs_roots: Roots) -> None:
    config = tmp_path / "agent.toml"
    config.write_text('[link_speeds]\neth0 = "10G"\n')
    result = run("sample", "--json", "--count", "1", "--config", str(config), "--procfs", procfs_roots.procfs)
    assert result.returncode == 0, result.stderr
    eth0 = next(n for n in json.loads(result.stdout)["nics"] if n["name"] == "eth0")
    assert eth0["speed_bytes_per_second"] == 1.25e9
    assert eth0["speed_source"] == "config"


def test_source_flags_enable_and_disable(procfs_roots: Roots) -> None:
    result = run("sample", "--json", "--count", "1", "--no-collector.infiniband", "--procfs", procfs_roots.procfs)
    assert result.returncode == 0, result.stderr
    snap = json.loads(result.stdout)
    assert "infiniband" not in {c["name"] for c in snap["collectors"]}
    assert snap["rdma_ports"] == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["sample", "--bogus"], "--bogus"),
        (["sample", "--procfs", "/does/not/exist"], "/does/not/exist"),
        (["sample", "--sysfs", "/etc/hostname"], "/etc/hostname"),
        (["sample", "--count", "0"], "--count"),
        (["sample", "--interval", "abc"], "abc"),
        (["sample", "--link-speed", "eth0"], "eth0"),
        (["sample", "--link-speed", "eth0=fast"], "fast"),
        (["sample", "--config", "/does/not/exist.toml"], "/does/not/exist.toml"),
        (["nonsense"], "nonsense"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], needle: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("nodeagent: error:")
    assert needle in lines[0]


def test_bad_config_key_names_file_and_key(tmp_path: Path) -> None:
    config = tmp_path / "agent.toml"
    config.write_text("[link_speeds]\neth0 = 50\n")
    result = run("sample", "--config", str(config))
    assert result.returncode == 2
    assert str(config) in result.stderr and "link_speeds.eth0" in result.stderr
    config.write_text("unknown_key = 1\n")
    result = run("sample", "--config", str(config))
    assert result.returncode == 2 and "unknown_key" in result.stderr


def test_collectors_lists_every_registered_source() -> None:
    result = run("collectors")
    assert result.returncode == 0
    names = {line.split()[0] for line in result.stdout.splitlines()}
    assert {"netdev", "infiniband", "diskstats", "cpu", "meminfo", "pressure"} <= names


def test_live_machine_sample_works() -> None:
    result = run("sample", "--json", "--count", "2", "--interval", "0.2")
    assert result.returncode == 0, result.stderr
    second = json.loads(result.stdout.splitlines()[1])
    assert second["host"]["cpu_busy_ratio"] is not None
    assert 0.0 <= second["host"]["cpu_busy_ratio"] <= 1.0
