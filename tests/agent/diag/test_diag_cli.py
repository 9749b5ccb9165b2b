"""``nodeagent diag`` as users run it: this machine without expectations, bad profiles and flags,
the output formats, colour only on a terminal, and the exit statuses."""

from __future__ import annotations

import ctypes.util
import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent.diag import run as diag_run
from nodeagent.agent.diag.profile import builtin_profiles, load_profile
from tests.fakes.diag import host_tree, roots_args, run_diag
from tests.fakes.trees import REPO

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def run_process(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_STATE", "LD_LIBRARY_PATH", "NO_COLOR")}
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "diag", *args],
        capture_output=True, text=True, timeout=60, check=False, cwd=REPO, env={**clean, **(env or {})},
    )  # fmt: skip


def test_this_machine_without_gpu_is_healthy_when_told_it_has_none() -> None:
    if ctypes.util.find_library("nvidia-ml"):
        pytest.skip("this machine has an NVIDIA driver")
    done = run_process("--json", "--no-gpu")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["verdict"] == "healthy"
    driver = next(r for r in report["checks"] if r["check"] == "nvml.driver")
    assert driver["status"] == "PASS" and "no NVIDIA driver" in driver["value"]
    gpu_checks = [r for r in report["checks"] if r["check"].startswith(("gpu.", "nvlink."))]
    assert len(gpu_checks) >= 10
    assert all(r["status"] == "SKIP" and r["hint"] == "no GPUs expected" for r in gpu_checks)
    assert report["duration_seconds"] < 5


@pytest.mark.parametrize(
    ("content", "needles"),
    [
        ("[gpu]\ncuont = 8\n", ["gpu.cuont", "count"]),
        ('[gpu]\ncount = "eight"\n', ["gpu.count", "'eight'"]),
        ('[nic]\nspeed = "fast"\n', ["nic.speed", "fast"]),
        ("[nic]\nspeed = 50\n", ["nic.speed", "50"]),
        ("[rdma]\nlink_layer = 'IB'\n", ["rdma.link_layer", "IB"]),
        ("[collector]\naddress = 'collector'\n", ["collector.address", "HOST:PORT"]),
        ("gpus = 8\n", ["'gpus'"]),
        ("gpu = 8\n", ["gpu", "table"]),
        ("[gpu\ncount = 8\n", ["not valid TOML"]),
    ],
    ids=["unknown-key", "wrong-type", "bad-rate", "rate-not-string", "bad-choice", "bad-address", "top-key",
         "not-a-table", "bad-toml"],
)  # fmt: skip
def test_bad_profile_is_one_line_naming_file_and_key(tmp_path: Path, content: str, needles: list[str]) -> None:
    profile = tmp_path / "rental.toml"
    profile.write_text(content)
    done = run_process("--profile", str(profile))
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("nodeagent: error:") and str(profile) in lines[0]
    for needle in needles:
        assert needle in lines[0]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--profile", "/does/not/exist.toml"], "/does/not/exist.toml"),
        (["--profile", "8xB300-imaginary"], "8xB300-imaginary"),
        (["--expect-nic-speed", "fast"], "fast"),
        (["--expect-gpus", "-1"], "--expect-gpus"),
        (["--collector", "no-port"], "no-port"),
        (["--procfs", "/does/not/exist"], "/does/not/exist"),
        (["--kernel-log", "/does/not/exist.log"], "/does/not/exist.log"),
        (["--probe"], "--probe-path"),
        (["--window", "-1"], "--window"),
    ],
)
def test_bad_flags_are_one_line_and_exit_2(args: list[str], needle: str) -> None:
    run = run_diag(*args)
    assert run.exit_code == 2
    assert run.out == ""
    lines = run.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("nodeagent: error:"), run.err
    assert needle in lines[0]


def test_missing_profile_file_through_the_real_process() -> None:
    done = run_process("--profile", "/does/not/exist.toml")
    assert done.returncode == 2
    assert done.stderr.strip() == "nodeagent: error: /does/not/exist.toml: no such file"


def test_builtin_profiles_load_and_are_listed() -> None:
    names = builtin_profiles()
    assert {"8xA800-nvlink-50g", "8xH100-sxm-ib"} <= set(names)
    assert len(names) >= 4
    for name in names:
        profile = load_profile(name)
        # Every node is eight GPUs but an NVL72 rack's compute tray, which holds four.
        assert profile.name == name and profile.description and profile.gpu.count == (4 if "NVL72" in name else 8)
    a800 = load_profile("8xA800-nvlink-50g")
    assert (a800.gpu.nvlinks_per_gpu, a800.nic.speed_bytes_per_second) == (8, 50e9 / 8)
    h100 = load_profile("8xH100-sxm-ib")
    assert (h100.rdma.ports, h100.rdma.rate_bytes_per_second, h100.rdma.link_layer) == (8, 400e9 / 8, "InfiniBand")
    run = run_diag("--list-profiles")
    assert run.exit_code == 0
    assert [line.split()[0] for line in run.out.splitlines()] == list(names)


def test_flags_override_the_profile(tmp_path: Path) -> None:
    roots = host_tree(tmp_path / "host")
    run = run_diag(
        *roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--json",
        "--profile", "8xA800-nvlink-50g", "--expect-gpus", "0", "--expect-nic-speed", "1G",
    )  # fmt: skip
    checks = {r["check"]: r for r in run.report["checks"]}
    # Zero GPUs expected and no driver: the driver is not missing, the GPU checks skip.
    assert checks["nvml.driver"]["status"] == "PASS"
    assert checks["nic.speed"]["expected"] == "≥ 1.00 Gb/s"


def test_json_has_the_same_content_as_the_table(tmp_path: Path) -> None:
    roots = host_tree(tmp_path / "host", cores=2)
    common = [*roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--expect-mount", "/nowhere", "--no-gpu"]
    table = run_diag(*common)
    as_json = run_diag(*common, "--json")
    assert table.exit_code == as_json.exit_code == 1
    report = as_json.report
    lines = table.out.splitlines()
    assert lines[-1] == report["verdict_line"]
    assert lines[-1].startswith("UNHEALTHY (1 fail") and "storage.mounts mount:/nowhere" in lines[-1]
    header = lines[1]
    starts = [header.index(name) for name in ("STATUS", "CHECK", "SUBJECT", "VALUE", "EXPECTED")]
    rows = [
        [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        for line in lines[2:-1]
        if not line.startswith(" ")
    ]
    checks = iter(report["checks"])
    for status, check, subject, value, expected in rows:
        result = next(checks)
        folded = re.fullmatch(r"(\S+) \+(\d+) more", check)
        assert result["check"] == (folded.group(1) if folded else check)
        assert [result["status"], result["subject"], result["value"]] == [status, subject, value]
        assert (result["expected"] or "-") == expected
        for _ in range(int(folded.group(2)) if folded else 0):  # a run skipped for one reason
            assert next(checks)["hint"] == result["hint"]
    assert next(checks, None) is None
    assert "↳ not mounted: check /etc/fstab" in table.out


def _run_on_a_terminal(args: list[str], env: dict[str, str]) -> str:
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "nodeagent.agent", "diag", *args], stdout=follower, stderr=follower, cwd=REPO, env=env
    )
    os.close(follower)
    chunks = []
    while True:
        ready, _, _ = select.select([leader], [], [], 30)
        if not ready:
            break
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(leader)
    assert process.wait(timeout=30) == 0
    return b"".join(chunks).decode()


def test_colour_only_on_a_terminal(tmp_path: Path) -> None:
    roots = host_tree(tmp_path / "host")
    args = [*roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--no-gpu"]
    env = {k: v for k, v in os.environ.items() if k not in ("FAKE_NVML_STATE", "NO_COLOR")}
    on_terminal = _run_on_a_terminal(args, env)
    assert "\x1b[32mPASS\x1b[0m" in on_terminal
    assert ANSI.sub("", on_terminal.splitlines()[-1]).startswith("HEALTHY")
    piped = run_process(*args)
    assert piped.returncode == 0 and "\x1b[" not in piped.stdout and "PASS" in piped.stdout
    assert "\x1b[" not in _run_on_a_terminal(args, {**env, "NO_COLOR": "1"})


def test_diag_that_breaks_exits_2_not_1(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_options: object) -> None:
        raise RuntimeError("sysfs vanished")

    monkeypatch.setattr("nodeagent.agent.cli.diag.run_diag", broken)
    run = run_diag("--window", "0")
    assert run.exit_code == 2
    assert run.err.strip() == "nodeagent: error: diag could not run: RuntimeError: sysfs vanished"


def test_an_area_that_breaks_loses_only_its_own_results(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_ctx: object) -> list[object]:
        raise KeyError("nic")

    areas = tuple((name, broken if name == "nic" else check) for name, check in diag_run.AREAS)
    monkeypatch.setattr(diag_run, "AREAS", areas)
    roots = host_tree(tmp_path / "host")
    run = run_diag(*roots_args(roots), "--window", "0", "--kernel-log", os.devnull, "--json", "--no-gpu")
    assert run.exit_code == 0
    assert run.checks("nic.error", "WARN")[0]["value"] == "KeyError: 'nic'"
    assert run.checks("host.memory", "SKIP")
