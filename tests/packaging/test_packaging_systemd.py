"""The systemd units: systemd's own checker accepts them, their hardening stays at the level
reviewed, and the agent still samples NVML under the system call filters the unit installs."""

from __future__ import annotations

import ctypes.util
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require
from tests.fakes.nvml.state import h100_sxm5
from tests.fakes.trees import REPO
from tests.syscall_sandbox import run_under_unit_filters, unit_directives

UNITS = REPO / "packaging" / "systemd"
AGENT_UNIT = UNITS / "nodeagent.service"
COLLECTOR_UNIT = UNITS / "nodeagent-collector.service"
INSTALLED_BIN = "/opt/nodeagent/bin/"
# `systemd-analyze security` exposure (0 = locked down, 10 = unprotected) as reviewed: 1.9 for
# the agent (it keeps devices, the network, /proc and CAP_PERFMON), 1.2 for the collector.
MAX_EXPOSURE = {"nodeagent.service": 2.0, "nodeagent-collector.service": 1.5}


def _require_systemd_analyze() -> str:
    tool = shutil.which("systemd-analyze")
    require(tool is not None, "needs systemd-analyze (Debian package systemd; `make system-deps`)")
    assert tool is not None
    return tool


def _unit_for_checking(unit: Path, tmp_path: Path) -> Path:
    """The unit with ExecStart pointing at this checkout's console scripts instead of the
    package's /opt/nodeagent, so systemd can check that the command exists and is executable."""
    bin_dir = Path(sys.executable).parent
    for script in ("nodeagent", "nodeagent-collector"):
        assert (bin_dir / script).is_file(), f"{bin_dir / script} missing: run `make setup`"
    copy = tmp_path / unit.name
    copy.write_text(unit.read_text().replace(INSTALLED_BIN, f"{bin_dir}/"))
    return copy


def _analyze(tool: str, *args: str) -> subprocess.CompletedProcess[str]:
    # Relative unit paths would be looked up in the current directory: give absolute ones.
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=60, check=False)


@pytest.mark.parametrize("unit", [AGENT_UNIT, COLLECTOR_UNIT], ids=lambda p: p.name)
def test_systemd_analyze_verify_accepts_unit(unit: Path, tmp_path: Path) -> None:
    tool = _require_systemd_analyze()
    checked = _unit_for_checking(unit, tmp_path)
    done = _analyze(tool, "verify", "--man=no", str(checked))
    # verify exits 0 on an unknown key or an unparsable value and only prints them: any line
    # that names the unit is a finding.
    findings = [line for line in (done.stdout + done.stderr).splitlines() if unit.name in line]
    assert done.returncode == 0, done.stdout + done.stderr
    assert findings == []


def test_systemd_analyze_verify_reports_a_bad_key(tmp_path: Path) -> None:
    """The check above can fail: a misspelt directive is reported."""
    tool = _require_systemd_analyze()
    checked = _unit_for_checking(AGENT_UNIT, tmp_path)
    checked.write_text(checked.read_text().replace("WatchdogSec=", "WatchdogSeconds="))
    done = _analyze(tool, "verify", "--man=no", str(checked))
    assert "Unknown key 'WatchdogSeconds'" in done.stdout + done.stderr


@pytest.mark.parametrize("unit", [AGENT_UNIT, COLLECTOR_UNIT], ids=lambda p: p.name)
def test_hardening_exposure_stays_as_reviewed(unit: Path, tmp_path: Path) -> None:
    tool = _require_systemd_analyze()
    checked = _unit_for_checking(unit, tmp_path)
    done = _analyze(tool, "security", "--offline=true", "--man=no", str(checked))
    match = re.search(r"Overall exposure level for \S+: (\d+\.\d+)", done.stdout + done.stderr)
    assert match, done.stdout + done.stderr
    assert float(match.group(1)) <= MAX_EXPOSURE[unit.name], done.stdout


def test_agent_unit_contract() -> None:
    """What the agent's run loop and the package rely on."""
    unit = unit_directives(AGENT_UNIT)
    assert unit["Type"] == ["notify"]
    assert unit["NotifyAccess"] == ["main"]
    assert float(unit["WatchdogSec"][0]) >= 30  # well above the default 1 s sampling interval
    exec_start = unit["ExecStart"][0].split()
    assert exec_start[:2] == ["/opt/nodeagent/bin/nodeagent", "run"]
    assert exec_start[exec_start.index("--config") + 1] == "/etc/nodeagent/agent.toml"
    # The spool lives in a directory systemd creates and owns for the service user.
    spool = exec_start[exec_start.index("--spool-dir") + 1]
    state_dirs = unit["StateDirectory"][0].split()
    assert spool.removeprefix("/var/lib/") in state_dirs
    assert unit["DevicePolicy"] == ["closed"]
    assert any(rule.startswith("char-nvidiactl ") for rule in unit["DeviceAllow"])
    assert "PrivateDevices" not in unit  # it would hide /dev/nvidia*
    assert "ProtectProc" not in unit  # it would hide the training processes' cgroups


def test_collector_unit_contract() -> None:
    unit = unit_directives(COLLECTOR_UNIT)
    assert unit["DynamicUser"] == ["yes"]
    exec_start = unit["ExecStart"][0].split()
    assert exec_start[:2] == ["/opt/nodeagent/bin/nodeagent-collector", "serve"]
    db = Path(exec_start[exec_start.index("--db") + 1])
    assert str(db.parent).removeprefix("/var/lib/") == unit["StateDirectory"][0]


def _run_sandboxed(unit: Path, command: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    _require_systemd_analyze()
    require(ctypes.util.find_library("seccomp") is not None, "needs libseccomp (Debian package libseccomp2)")
    return run_under_unit_filters(unit, command, env)


def test_sandbox_refuses_what_the_unit_forbids() -> None:
    """Control for the test below: the emulated filters do bite."""
    code = (
        "import mmap, os\n"
        "for attempt in (lambda: mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE | mmap.PROT_EXEC),"
        " lambda: os.setuid(os.getuid())):\n"
        "    try:\n        attempt()\n        print('allowed')\n"
        "    except PermissionError:\n        print('refused')\n"
    )
    done = _run_sandboxed(AGENT_UNIT, [sys.executable, "-c", code], dict(os.environ))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["refused", "refused"]


def test_agent_samples_gpus_under_the_units_system_call_filters(fake_nvml_dir: Path, tmp_path: Path) -> None:
    """NVML through pynvml's ctypes path, CPython's own ctypes set-up and the host collectors,
    all under @system-service minus @privileged and MemoryDenyWriteExecute=yes."""
    state = h100_sxm5()
    state.gpus[2].util_gpu = 40
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    env |= {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_STATE": str(state_path)}
    command = [sys.executable, "-m", "nodeagent.agent", "sample", "--json", "--count", "2", "--interval", "0.1"]
    done = _run_sandboxed(AGENT_UNIT, command, env)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    last = json.loads(done.stdout.splitlines()[-1])
    assert last["gpu_unavailable_reason"] is None
    rows = {row["index"]: row for row in last["gpus"]}
    assert len(rows) == 8
    assert rows[2]["utilization_gpu_ratio"] == pytest.approx(0.4)
    # Every collector succeeded, the host ones included.
    outcome = {c["name"]: c["success"] for c in last["collectors"]}
    assert {"cpu", "diskstats", "gpu", "netdev", "pressure"} <= outcome.keys()
    assert all(outcome.values()), last["collectors"]
