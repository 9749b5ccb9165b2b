"""Which disks the disk reader reports: node_exporter's --collector.diskstats.device-include and
--collector.diskstats.device-exclude, with its semantics (searched, mutually exclusive, an include
replacing the default exclude), on a fixture tree and on the command line."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from nodeagent.agent.sampling.sampler import Sampler
from nodeagent.agent.sources import Roots
from nodeagent.agent.sources.diskstats import DEFAULT_DEVICE_EXCLUDE, EXCLUDE, INCLUDE, device_filter
from tests.fakes.trees import REPO, write_tree

# node_exporter's own default (collector/diskstats_linux.go), for operators who want its choice.
NODE_EXPORTER_DEFAULT = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p)\d+$"
DISKS = ["fd0", "loop0", "nvme0n1", "nvme1n1", "ram0", "sda", "sdb", "zram0"]


def _kept(options: dict[str, str]) -> list[str]:
    chosen = device_filter(options)
    return [name for name in DISKS if not chosen.ignored(name)]


@pytest.mark.parametrize(
    ("options", "kept"),
    [
        pytest.param({}, ["loop0", "nvme0n1", "nvme1n1", "sda", "sdb"], id="default-exclude"),
        pytest.param({INCLUDE: "^nvme"}, ["nvme0n1", "nvme1n1"], id="include"),
        pytest.param({INCLUDE: "ram"}, ["ram0", "zram0"], id="an-include-replaces-the-default-exclude"),
        pytest.param({INCLUDE: "nvme1"}, ["nvme1n1"], id="searched-not-anchored"),
        pytest.param({EXCLUDE: "^sd"}, ["fd0", "loop0", "nvme0n1", "nvme1n1", "ram0", "zram0"], id="exclude"),
        pytest.param({EXCLUDE: ""}, DISKS, id="no-exclude"),
        pytest.param({INCLUDE: "^sda$", EXCLUDE: ""}, ["sda"], id="include-beside-an-empty-exclude"),
        pytest.param({INCLUDE: ""}, ["loop0", "nvme0n1", "nvme1n1", "sda", "sdb"], id="empty-include-is-unset"),
        pytest.param({EXCLUDE: NODE_EXPORTER_DEFAULT}, ["nvme0n1", "nvme1n1", "sda", "sdb"], id="node-exporter-s"),
    ],
)
def test_the_filter_is_node_exporter_s(options: dict[str, str], kept: list[str]) -> None:
    assert _kept(options) == kept


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param(
            {INCLUDE: "^sda$", EXCLUDE: "^sdb$"},
            "--collector.diskstats.device-include and --collector.diskstats.device-exclude are mutually exclusive",
            id="both",
        ),
        pytest.param(
            {INCLUDE: "(sda"},
            "--collector.diskstats.device-include '(sda': not a regular expression "
            "(missing ), unterminated subpattern at position 0)",
            id="bad-include",
        ),
        pytest.param(
            {EXCLUDE: "[a-"}, "--collector.diskstats.device-exclude '[a-': not a regular expression", id="bad-exclude"
        ),
    ],
)
def test_a_filter_that_cannot_be_used_is_one_line(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)").replace("[", r"\[")):
        device_filter(options)


def test_the_default_is_the_documented_one() -> None:
    assert device_filter({}).exclude is not None and device_filter({}).exclude.pattern == DEFAULT_DEVICE_EXCLUDE


def _tree(tmp_path: Path) -> Path:
    lines = [f" 259 {i} {name} {i + 1} 0 8 1 0 0 0 0 0 1 1" for i, name in enumerate(["nvme0n1", "nvme1n1", "sda"])]
    return write_tree(
        tmp_path,
        {
            "proc/diskstats": "\n".join([*lines, " 1 0 ram0 0 0 0 0 0 0 0 0 0 0 0"]) + "\n",
            "proc/self/mountinfo": "30 22 259:1 / /mnt/data rw - xfs /dev/nvme1n1 rw\n",
            "sys/block/nvme0n1/size": "100\n",
            "sys/block/nvme1n1/size": "200\n",
            "sys/block/sda/size": "300\n",
        },
    )


def test_the_reader_reports_only_the_chosen_disks_and_does_not_rescan_for_the_others(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    sampler = Sampler(
        ["diskstats"], node_id="n", roots=Roots(str(root / "proc"), str(root / "sys")), options={INCLUDE: "^nvme1n1$"}
    )
    try:
        report = sampler.tick()
        assert [d.name for d in report.info.disks] == ["nvme1n1"]
        assert list(report.info.disks[0].mountpoints) == ["/mnt/data"]
        for _ in range(3):
            assert [d.name for d in sampler.tick().disks] == ["nvme1n1"]
            assert not any(c.needs_rescan for c in sampler.sources)  # a filtered disk is known, not new
    finally:
        sampler.close()


def _agent(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", *args],
        cwd=REPO, env={**os.environ, **(env or {})}, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip


def test_sample_and_run_take_the_flags(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    roots = ["--procfs", str(root / "proc"), "--sysfs", str(root / "sys"), "--no-collector.gpu"]
    result = _agent("sample", "--json", "--count", "1", *roots, "--collector.diskstats.device-exclude", "^nvme")
    assert result.returncode == 0, result.stderr
    # The exclude given replaces the default one: ram0 is back, as in node_exporter.
    assert [d["name"] for d in json.loads(result.stdout)["disks"]] == ["sda", "ram0"]
    # The settings file and NODEAGENT_* variables set it as any flag (docs/configuration.md).
    env = {"NODEAGENT_COLLECTOR_DISKSTATS_DEVICE_INCLUDE": "^nvme0"}
    result = _agent("sample", "--json", "--count", "1", *roots, env=env)
    assert result.returncode == 0, result.stderr
    assert [d["name"] for d in json.loads(result.stdout)["disks"]] == ["nvme0n1"]
    both = ["--collector.diskstats.device-include", "sda", "--collector.diskstats.device-exclude", "sdb"]
    run = _agent("run", "--collector", "127.0.0.1:9", "--max-reports", "1", "--deadline", "1", *roots, *both)
    assert run.returncode == 2
    assert run.stderr == (
        "nodeagent: error: --collector.diskstats.device-include and --collector.diskstats.device-exclude"
        " are mutually exclusive\n"
    )


def test_a_bad_pattern_is_one_line_and_exit_2() -> None:
    result = _agent("sample", "--count", "1", "--collector.diskstats.device-include", "nvme(")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("nodeagent: error: --collector.diskstats.device-include 'nvme(': not a regular")
