"""``nodeagent sample --json`` with ``[dcgm_exporter]`` configured: a real process, the fake
``libnvidia-ml.so.1`` on LD_LIBRARY_PATH and the fake dcgm-exporter on loopback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fakes.dcgm_exporter import FakeDcgmExporter
from tests.fakes.nvml.state import a100_sxm4
from tests.fakes.trees import REPO

HOST_OFF = ["--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband",
            "--no-collector.cpu", "--no-collector.meminfo", "--no-collector.pressure"]  # fmt: skip


def _sample(lib_dir: Path, state_path: Path, config: Path, count: int) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NODEAGENT_")}
    env |= {"LD_LIBRARY_PATH": str(lib_dir), "FAKE_NVML_STATE": str(state_path)}
    args = ["sample", "--json", "--count", str(count), "--interval", "0.5", "--config", str(config), *HOST_OFF]
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_sample_json_shows_dcgm_as_the_computing_source(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = a100_sxm4()
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    with FakeDcgmExporter.for_state(state) as exporter:  # DCGM refreshes at every scrape
        for i, g in enumerate(state.gpus):
            exporter.set(g.uuid, sm_active=0.25 + 0.05 * i, tensor_active=0.125)
        config = tmp_path / "agent.toml"
        # A generous deadline: the freshness, not the scrape's speed, is what this test is about.
        url = exporter.url
        config.write_text(f'[dcgm_exporter]\nurl = "{url}"\ntimeout_seconds = 5\n')
        result = _sample(fake_nvml_dir, state_path, config, count=8)
    assert result.returncode == 0, result.stderr
    snapshots = [json.loads(line) for line in result.stdout.splitlines()]
    # The exporter's pace not known yet: the GPUs' own readings' source (an A100's prior) stands.
    assert all(g["computing_source"] == "power_instant" for g in snapshots[0]["gpus"])
    taken = [s for s in snapshots if all(g["computing_source"] == "dcgm" for g in s["gpus"])]
    assert taken, [[g["computing_source"] for g in s["gpus"]] for s in snapshots]
    rows = {g["uuid"]: g for g in taken[-1]["gpus"]}
    for i, g in enumerate(state.gpus):
        assert rows[g.uuid]["sm_active_ratio"] == pytest.approx(0.25 + 0.05 * i)
        assert rows[g.uuid]["tensor_active_ratio"] == pytest.approx(0.125)
        assert rows[g.uuid]["computing_source_reason"].startswith(f"DCGM_FI_PROF_SM_ACTIVE from dcgm-exporter at {url}")


def test_sample_with_an_absent_exporter_says_so_once(fake_nvml_dir: Path, tmp_path: Path) -> None:
    state = a100_sxm4(2)
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    config = tmp_path / "agent.toml"
    config.write_text('[dcgm_exporter]\nurl = "http://127.0.0.1:1/metrics"\n')  # port 1: nothing listens
    result = _sample(fake_nvml_dir, state_path, config, count=5)
    assert result.returncode == 0, result.stderr
    assert result.stderr.count("DCGM profiling not used") == 1, result.stderr
    assert "connection refused" in result.stderr
    last = json.loads(result.stdout.splitlines()[-1])
    assert [g["computing_source"] for g in last["gpus"]] == ["power_instant", "power_instant"]  # power's, not DCGM's
