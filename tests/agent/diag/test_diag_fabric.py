"""diag on the hardware rented now, against the fake NVML: the built-in 8xB200 and GB200 NVL72 tray
profiles pass on healthy nodes; a fabric that is not registered, degraded or unhealthy on one GPU
of eight fails naming that GPU; a GPU in another clique or cluster fails; a reading the rest of
the GPU contradicts warns."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.agent.diag.profile import ProfileError, load_profile, parse_profile
from tests.fakes.diag import DiagRun, host_tree, roots_args, run_diag
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import (
    FABRIC_IN_PROGRESS,
    FABRIC_SUMMARY_UNHEALTHY,
    NVML_ERROR_NOT_READY,
    b200,
    fabric_health_mask,
    gb200,
    h100_sxm5,
)

WINDOW = "0.05"


@pytest.fixture
def diag(fake_nvml: FakeNvml, tmp_path: Path) -> Callable[..., DiagRun]:
    roots = host_tree(tmp_path / "host", cores=160)

    def run(*args: str) -> DiagRun:
        fake_nvml.write()
        return run_diag(*roots_args(roots), "--window", WINDOW, "--kernel-log", os.devnull, "--json", *args)

    return run


@pytest.mark.parametrize(
    ("profile", "builtin", "ports", "gpus"), [(b200, "8xB200-hgx", 8, 8), (gb200, "GB200-NVL72-tray", 4, 4)]
)
def test_healthy_blackwell_nodes_pass_their_builtin_profiles(
    fake_nvml: FakeNvml, tmp_path: Path, profile: Callable[[], object], builtin: str, ports: int, gpus: int
) -> None:
    fake_nvml.load(profile())  # type: ignore[arg-type]
    fake_nvml.write()
    roots = host_tree(tmp_path / "rented", cores=160, ib_ports=ports)
    run = run_diag(*roots_args(roots), "--window", WINDOW, "--kernel-log", os.devnull, "--json", "--profile", builtin)
    assert run.exit_code == 0, run.out + run.err
    assert run.problems() == {}
    assert run.checks("gpu.count", "PASS")[0]["value"] == f"{gpus} GPUs"
    assert run.checks("nvlink.links", "PASS")[0]["value"] == "18 active on every GPU"
    assert run.checks("nvlink.speed", "PASS")[0]["value"].startswith("400")
    for check in ("fabric.state", "fabric.health", "fabric.clique", "gpu.readings"):
        assert run.checks(check, "PASS"), check
    assert run.checks("fabric.clique")[0]["value"].startswith(f"{gpus} in clique")
    # A GB200 tray is not an 8-GPU node: the B200 profile fails it on count.
    if builtin == "GB200-NVL72-tray":
        other = run_diag(
            *roots_args(roots), "--window", WINDOW, "--kernel-log", os.devnull, "--json", "--profile", "8xB200-hgx"
        )
        assert ("gpu.count", "node") in other.problems()


@pytest.mark.parametrize(
    ("fault", "check", "value"),
    [
        ("not_registered", "fabric.state", "not registered with the fabric manager (state in_progress)"),
        ("failed", "fabric.state", "registration_failed (NVML status 10); clique 32766"),
        ("degraded", "fabric.health", "degraded_bandwidth; clique 32766"),
        ("unhealthy", "fabric.health", "route_unhealthy, unhealthy; clique 32766"),
        ("misconfigured", "fabric.health", "incorrect_configuration (insufficient_nvlinks); clique 32766"),
    ],
)
def test_a_fabric_fault_on_one_gpu_of_eight_fails_naming_it(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun], fault: str, check: str, value: str
) -> None:
    state = fake_nvml.load(gb200(8))
    bad = state.gpus[3]
    if fault == "not_registered":
        bad.fabric_state = FABRIC_IN_PROGRESS
    elif fault == "failed":
        bad.fabric_status = NVML_ERROR_NOT_READY
    elif fault == "degraded":
        bad.fabric_health = fabric_health_mask(degraded_bandwidth=True)
    elif fault == "unhealthy":
        bad.fabric_health, bad.fabric_summary = fabric_health_mask(route_unhealthy=True), FABRIC_SUMMARY_UNHEALTHY
    else:
        bad.fabric_health = fabric_health_mask(incorrect_configuration=5)
    run = diag("--expect-gpus", "8")
    assert run.exit_code == 1
    assert run.problems() == {(check, "gpu:3"): "FAIL"}
    (result,) = run.checks(check, "FAIL")
    assert value in result["value"]
    assert "gpu:3" in run.report["verdict_line"] and check in run.report["verdict_line"]


def test_a_route_recovery_under_way_warns(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = fake_nvml.load(gb200(4))
    state.gpus[1].fabric_health = fabric_health_mask(route_recovery=True)
    run = diag()
    assert run.exit_code == 0
    assert run.problems() == {("fabric.health", "gpu:1"): "WARN"}


def test_a_gpu_in_another_clique_or_cluster_fails(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun], tmp_path: Path
) -> None:
    state = fake_nvml.load(gb200(4))
    state.gpus[2].fabric_clique = 99
    run = diag()
    assert run.problems() == {("fabric.clique", "gpu:2"): "FAIL"}
    state.gpus[2].fabric_clique = 32766
    rented = tmp_path / "rack.toml"
    rented.write_text('[fabric]\nclique_gpus = 4\ncluster_uuid = "00000000-1111-2222-3333-444444444444"\n')
    run = diag("--profile", str(rented))
    assert set(run.problems()) == {("fabric.clique", f"gpu:{i}") for i in range(4)}
    rented.write_text("[fabric]\nclique_gpus = 8\n")
    run = diag("--profile", str(rented))
    assert run.problems() == {("fabric.clique", "4 GPUs"): "FAIL"}
    assert run.checks("fabric.clique", "FAIL")[0]["value"] == "4 in clique 32766"


def test_gpus_without_a_fabric_skip_unless_the_profile_needs_one(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun], tmp_path: Path
) -> None:
    fake_nvml.load(h100_sxm5())
    run = diag()
    assert run.exit_code == 0
    assert {r["status"] for r in run.report["checks"] if r["check"].startswith("fabric.")} == {"SKIP"}
    rented = tmp_path / "fabric.toml"
    rented.write_text("[fabric]\nrequired = true\n")
    run = diag("--profile", str(rented))
    assert run.exit_code == 1
    assert run.problems() == {("fabric.state", "8 GPUs"): "FAIL"}


def test_a_reading_that_contradicts_the_gpu_warns(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = fake_nvml.load(b200())
    state.clock = None  # GPM over diag's window needs the fake's time to move with it
    for g in state.gpus:
        g.util_gpu, g.gpm_sm_active = 95, 80.0
    state.gpus[5].gpm_sm_active = 0.0
    state.gpus[6].power_mw = 0
    run = diag()
    assert run.exit_code == 0
    assert run.problems() == {("gpu.readings", "gpu:5"): "WARN", ("gpu.readings", "gpu:6"): "WARN"}
    values = {r["subject"]: r["value"] for r in run.checks("gpu.readings", "WARN")}
    assert values["gpu:5"] == "sm_active_ratio: SM activity reads 0 while the GPU is 95% utilized"
    assert values["gpu:6"] == "power_watts: power reads 0 W while the GPU is 95% utilized"


def test_fabric_profile_keys_are_checked() -> None:
    profile = load_profile("GB200-NVL72-tray")
    assert (profile.fabric.required, profile.fabric.clique_gpus, profile.gpu.count) == (True, 4, 4)
    with pytest.raises(ProfileError, match=r"x.toml: fabric.required: expected true or false, got 'yes'"):
        parse_profile({"fabric": {"required": "yes"}}, source="x.toml")
    with pytest.raises(ProfileError, match=r"unknown key 'fabric.clique'"):
        parse_profile({"fabric": {"clique": 4}}, source="x.toml")
