"""diag's GPU and NVLink checks against the fake NVML: every fault gives the right FAIL or WARN,
naming the GPU (and link), with the right exit status; the healthy nodes pass."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

from nodeagent.agent.gpu import nvml_library
from tests.fakes.diag import DiagRun, host_tree, roots_args, run_diag
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import FI_RETIRED_DBE, FI_RETIRED_PENDING, FI_RETIRED_SBE, PROFILES, FakeNvmlState

WINDOW = "0.05"
# Links per GPU of each fake profile.
LINKS = {"a100_sxm4": 12, "a800_sxm4": 8, "h100_sxm5": 18, "b200": 18, "gb200": 18, "gb300": 18}


@pytest.fixture
def diag(fake_nvml: FakeNvml, tmp_path: Path) -> Callable[..., DiagRun]:
    """Run diag over the fake's current state, on a host tree with enough cores and memory and
    an empty kernel log."""
    roots = host_tree(tmp_path / "host", memory_gib=4096)  # 8 GB300s hold 2.3 TB
    empty_log = tmp_path / "dmesg.txt"
    empty_log.write_text("")

    def run(*args: str, kernel_log: Path = empty_log) -> DiagRun:
        fake_nvml.write()
        return run_diag(*roots_args(roots), "--window", WINDOW, "--kernel-log", str(kernel_log), "--json", *args)

    return run


def load(fake: FakeNvml, profile: str = "a100_sxm4", count: int = 8) -> FakeNvmlState:
    return fake.load(PROFILES[profile](count))


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_healthy_node_passes(fake_nvml: FakeNvml, diag: Callable[..., DiagRun], profile: str) -> None:
    load(fake_nvml, profile)
    run = diag("--expect-gpus", "8", "--expect-nvlinks", str(LINKS[profile]))
    assert run.exit_code == 0, run.out + run.err
    assert run.report["verdict"] == "healthy"
    assert run.problems() == {}
    assert run.checks("gpu.count", "PASS")[0]["value"] == "8 GPUs"
    assert run.checks("nvlink.links", "PASS")[0]["value"] == f"{LINKS[profile]} active on every GPU"
    assert run.checks("nvml.driver", "PASS")[0]["value"] == "driver 570.133.20, CUDA 12.8"


@pytest.mark.parametrize(
    ("profile", "builtin", "host"),
    [
        ("a800_sxm4", "8xA800-nvlink-50g", {"nic_mbit": 50_000}),
        ("h100_sxm5", "8xH100-sxm-ib", {"ib_ports": 8}),
        ("a100_sxm4", "8xA100-sxm-nvlink", {}),
    ],
)
def test_healthy_node_passes_its_builtin_profile(
    fake_nvml: FakeNvml, tmp_path: Path, profile: str, builtin: str, host: dict[str, int]
) -> None:
    load(fake_nvml, profile)
    fake_nvml.write()
    roots = host_tree(tmp_path / "rented", **host)
    flags = ["--window", WINDOW, "--kernel-log", os.devnull, "--json", "--profile", builtin]
    run = run_diag(*roots_args(roots), *flags)
    assert run.exit_code == 0, run.out + run.err
    assert run.problems() == {}
    assert run.checks("gpu.model", "PASS") and run.checks("nvlink.links", "PASS")
    assert len(run.statuses()) - len(run.problems()) >= 20
    if "nic_mbit" in host:  # the same node with its data NIC at half the speed rented
        slow = run_diag(*roots_args(host_tree(tmp_path / "slow", nic_mbit=25_000)), *flags)
        assert slow.exit_code == 1
        assert slow.problems() == {("nic.speed", "nic:eth0"): "FAIL"}


def test_one_nvlink_link_down_fails_naming_gpu_and_link(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[3].links[5].state = 0
    run = diag("--expect-nvlinks", "12")
    assert run.exit_code == 1
    assert run.problems() == {("nvlink.links", "gpu:3/nvlink:5"): "FAIL"}
    assert run.checks("nvlink.links")[0]["value"] == "down (11 of 12 links active)"


def test_link_down_without_expectation_warns_against_the_other_gpus(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun]
) -> None:
    state = load(fake_nvml)
    state.gpus[3].links[5].state = 0
    run = diag()
    assert run.exit_code == 0
    assert run.problems("nvlink") == {("nvlink.links", "gpu:3/nvlink:5"): "WARN"}


def test_crc_errors_warn_naming_gpu_and_link(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml, "h100_sxm5")
    state.gpus[2].links[7].crc_flit = 12
    state.gpus[2].links[7].crc_data = 3
    run = diag("--expect-nvlinks", "18")
    assert run.exit_code == 0
    assert run.problems() == {("nvlink.errors", "gpu:2/nvlink:7"): "WARN"}
    assert run.checks("nvlink.errors")[0]["value"] == "crc_flit 12, crc_data 3"


def test_replay_errors_growing_during_the_check_fail(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml, "h100_sxm5")
    state.gpus[6].links[1].replay = 40
    state.gpus[6].links[1].replay_step = 5
    state.gpus[1].links[0].recovery = 2  # old, not growing: a warning only
    run = diag()
    assert run.exit_code == 1
    assert run.problems() == {("nvlink.errors", "gpu:6/nvlink:1"): "FAIL", ("nvlink.errors", "gpu:1/nvlink:0"): "WARN"}
    assert run.checks("nvlink.errors", "FAIL")[0]["value"].startswith("replay +5 during the")


def test_lost_gpu_fails_and_leaves_seven(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[6].lost = 1
    run = diag("--expect-gpus", "8")
    assert run.exit_code == 1
    assert run.problems() == {("gpu.lost", "gpu:6"): "FAIL", ("gpu.count", "node"): "FAIL"}
    assert run.checks("gpu.count")[0]["value"] == "7 GPUs (+1 lost)"
    # The other GPUs are still checked.
    assert run.checks("gpu.ecc", "PASS")[0]["subject"] == "7 GPUs"


def test_uncorrectable_ecc_fails_and_past_errors_warn(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[1].ecc_dbe_vol = 2
    state.gpus[1].ecc_dbe_agg = 2
    state.gpus[5].ecc_dbe_agg = 1
    run = diag()
    assert run.exit_code == 1
    assert run.problems() == {("gpu.ecc", "gpu:1"): "FAIL", ("gpu.ecc", "gpu:5"): "WARN"}


def test_pcie_x8_on_an_x16_gpu_fails(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[4].pcie_width = 8
    run = diag()
    assert run.exit_code == 1
    assert run.problems() == {("gpu.pcie_link", "gpu:4"): "FAIL"}
    assert run.checks("gpu.pcie_link", "FAIL")[0]["value"] == "Gen4 x8"


def test_pcie_generation_low_at_idle_passes_but_not_under_load(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun]
) -> None:
    state = load(fake_nvml, "h100_sxm5")
    for gpu in state.gpus:
        gpu.pcie_gen = 1  # idle GPUs drop to Gen1
    assert diag().problems() == {}
    state.gpus[2].util_gpu = 97
    run = diag()
    assert run.exit_code == 0
    assert run.problems() == {("gpu.pcie_link", "gpu:2"): "WARN"}


def test_slot_capping_the_gpus_generation_warns(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml, "h100_sxm5")
    state.gpus[0].pcie_gen_max = state.gpus[0].pcie_gen = 4  # a Gen5 GPU in a Gen4 slot
    run = diag()
    assert run.problems() == {("gpu.pcie_link", "gpu:0"): "WARN"}
    assert run.checks("gpu.pcie_link")[0]["expected"] == "Gen5 (the GPU's)"


def test_seven_gpus_where_eight_are_expected_fail(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    load(fake_nvml, "a800_sxm4", count=7)
    run = diag("--expect-gpus", "8")
    assert run.exit_code == 1
    assert run.problems() == {("gpu.count", "node"): "FAIL"}
    assert run.checks("gpu.count")[0]["value"] == "7 GPUs"
    assert "UNHEALTHY" in run.report["verdict_line"] and "gpu.count" in run.report["verdict_line"]


def test_row_remapping_pending_warns_and_failure_fails(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[2].remap_pending = 1
    state.gpus[7].remap_failure = 1
    run = diag()
    assert run.problems() == {("gpu.remapped_rows", "gpu:2"): "WARN", ("gpu.remapped_rows", "gpu:7"): "FAIL"}


def test_retired_pages_on_a_gpu_that_retires_pages(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    assert diag().checks("gpu.retired_pages", "SKIP"), "Ampere refuses the page-retirement fields"
    for gpu in state.gpus:  # as a Volta-era GPU would answer
        gpu.unsupported_fields -= {FI_RETIRED_SBE, FI_RETIRED_DBE, FI_RETIRED_PENDING}
    state.gpus[3].retired_sbe, state.gpus[3].retired_pending = 2, 1
    state.gpus[4].retired_sbe, state.gpus[4].retired_dbe = 40, 22
    run = diag()
    assert run.problems() == {("gpu.retired_pages", "gpu:3"): "WARN", ("gpu.retired_pages", "gpu:4"): "FAIL"}


def test_heat_and_slowdowns_warn(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[5].temp = 91
    state.gpus[6].clock_reasons = 0x40 | 0x8 | 0x4  # hw_thermal_slowdown (so hw_slowdown); sw_power_cap alone is normal
    state.gpus[7].clock_reasons = 0x4
    run = diag()
    assert run.exit_code == 0
    assert run.problems() == {("gpu.temperature", "gpu:5"): "WARN", ("gpu.throttle", "gpu:6"): "WARN"}
    assert run.checks("gpu.throttle")[0]["value"] == "hw_slowdown, hw_thermal_slowdown"


def test_xids_from_the_kernel_log_name_the_gpu(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun], tmp_path: Path
) -> None:
    load(fake_nvml)  # GPU 2 sits on bus 0x47, GPU 5 on 0x90
    log = tmp_path / "kern.log"
    log.write_text(
        "[   12.345678] nvidia-nvlink: Nvlink Core is being initialized\n"
        "[ 8812.100000] NVRM: Xid (PCI:0000:47:00): 79, pid='<unknown>', name=<unknown>, GPU has fallen off the bus.\n"
        "[ 9001.000000] NVRM: Xid (PCI:0000:90:00): 13, pid=4242, name=python, Graphics Exception\n"
        "[ 9002.000000] NVRM: Xid (PCI:0000:90:00): 13, pid=4242, name=python, Graphics Exception\n"
        "[ 9100.000000] NVRM: Xid (PCI:0000:c1:00): 62, pid=0, name=, Internal micro-controller halt\n"
    )
    run = diag(kernel_log=log)
    assert run.exit_code == 1
    assert run.problems() == {
        ("gpu.xid", "gpu:2"): "FAIL",
        ("gpu.xid", "gpu:5"): "WARN",
        ("gpu.xid", "pci:0000:c1:00"): "FAIL",  # a GPU NVML no longer lists
    }
    assert run.checks("gpu.xid", "WARN")[0]["value"] == "Xid 13 ×2"
    assert "fallen off the bus" in run.checks("gpu.xid")[0]["hint"]


def test_diag_calls_only_listed_nvml_symbols(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml, "h100_sxm5")
    state.gpus[1].lost = 1
    diag()
    called = fake_nvml.called_symbols()
    assert "nvmlDeviceGetGpuMaxPcieLinkGeneration" in called
    assert called <= set(nvml_library.NVML_SYMBOLS), sorted(called - set(nvml_library.NVML_SYMBOLS))
    ours = nvml_library.call_counts()
    for symbol in called - {"nvmlEventSetWait_v2"}:  # the event thread may be inside a wait
        assert fake_nvml.calls(symbol) == ours.get(symbol, 0), symbol


@pytest.mark.parametrize("failing", [{"hang": 1}, {"delay_ms": 3000}], ids=["hanging", "slow"])
def test_a_gpu_that_does_not_answer_fails_its_own_check_and_diag_ends(
    fake_nvml: FakeNvml, diag: Callable[..., DiagRun], failing: dict[str, int]
) -> None:
    state = load(fake_nvml)
    for key, value in failing.items():
        setattr(state.gpus[3], key, value)
    try:
        run = diag("--expect-gpus", "8")
    finally:
        state.gpus[3].hang = state.gpus[3].delay_ms = 0
        fake_nvml.write()  # releases the call left blocked in the fake
    assert run.exit_code == 1, run.out + run.err
    assert run.report["verdict"] != "healthy"
    fails = run.checks("gpu.responsive", "FAIL")
    assert [r["subject"] for r in fails] == ["gpu:3"]
    assert fails[0]["value"].startswith("did not answer nvml")
    assert run.checks("gpu.count", "FAIL")[0]["value"] == "7 GPUs (+1 unresponsive)"
    # The other GPUs were checked as usual.
    assert ("gpu.lost", "node") not in run.problems()


def test_a_gpu_lost_after_some_calls_fails_as_lost(fake_nvml: FakeNvml, diag: Callable[..., DiagRun]) -> None:
    state = load(fake_nvml)
    state.gpus[3].lost_after = 3  # it answers the scan's first calls, then is lost
    run = diag("--expect-gpus", "8")
    assert run.exit_code == 1, run.out + run.err
    assert [r["subject"] for r in run.checks("gpu.lost", "FAIL")] == ["gpu:3"]
    assert run.checks("gpu.responsive", "FAIL") == []
