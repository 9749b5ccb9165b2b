"""diag's NIC, RDMA and storage checks on fixture trees built from the shared reference trees: a
25 Gb/s NIC where 50 were rented, an InfiniBand port DOWN or Polling, a missing mount, a volume
on the wrong transport; each is caught, and the same trees without the fault pass."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from nodeagent.agent.sources import Roots
from tests.fakes.diag import DiagRun, roots_args, run_diag
from tests.fakes.trees import materialize, rewrite

ETH0 = "sys/devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/eth0"
MLX4_PORT2 = "sys/class/infiniband/mlx4_0/ports/2"


@pytest.fixture
def tree(shared_fixtures: Path, tmp_path: Path) -> Path:
    """node_exporter's tree (eth0 up at 1 Gb/s, three InfiniBand/iWARP ports ACTIVE, NVMe and SATA
    disks) with procfs's net/dev and a mountinfo that mounts nvme0n1p1 on a real directory."""
    root = materialize(shared_fixtures / "node_exporter", tmp_path / "tree")
    (root / "proc/net").mkdir(parents=True, exist_ok=True)
    shutil.copy(shared_fixtures / "procfs/proc/net/dev", root / "proc/net/dev")
    volume = tmp_path / "volume"
    volume.mkdir()
    (root / "proc/self").mkdir(parents=True, exist_ok=True)
    (root / "proc/self/mountinfo").write_text(
        "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw\n"
        f"36 22 259:1 / {volume} rw,relatime shared:7 - ext4 /dev/nvme0n1p1 rw\n"
        "41 22 0:52 / /mnt/nfs rw,relatime shared:9 - nfs4 10.0.0.9:/export rw,vers=4.2,proto=rdma,port=20049\n"
    )
    return root


def diag(root: Path, *args: str) -> DiagRun:
    roots = Roots(procfs=str(root / "proc"), sysfs=str(root / "sys"))
    # These trees hold no GPUs: say so, as the prolog of a CPU-only node would (else nvml.driver fails).
    return run_diag(*roots_args(roots), "--window", "0.05", "--kernel-log", "/dev/null", "--json", "--no-gpu", *args)


def set_speed(root: Path, mbit: int) -> None:
    rewrite(root / ETH0 / "speed", f"{mbit}\n")


def test_nic_at_25g_where_50g_was_rented_fails(tree: Path) -> None:
    set_speed(tree, 25000)
    run = diag(tree, "--expect-nic-speed", "50G")
    assert run.exit_code == 1
    assert run.problems() == {("nic.speed", "nic:eth0"): "FAIL"}
    result = run.checks("nic.speed")[0]
    assert (result["value"], result["expected"]) == ("25.00 Gb/s", "≥ 50.00 Gb/s")
    set_speed(tree, 50000)
    run = diag(tree, "--expect-nic-speed", "50G")
    assert run.exit_code == 0
    assert run.checks("nic.speed", "PASS")[0]["value"] == "eth0 50.00 Gb/s"


def test_named_nics_must_be_present_up_and_fast(tree: Path, tmp_path: Path) -> None:
    set_speed(tree, 25000)
    profile = tmp_path / "rental.toml"
    profile.write_text('[nic]\nnames = ["eth0", "eth9"]\nspeed = "50G"\nmin_mtu = 9000\n')
    run = diag(tree, "--profile", str(profile))
    assert run.exit_code == 1
    assert run.problems() == {
        ("nic.present", "nic:eth9"): "FAIL",
        ("nic.speed", "nic:eth0"): "FAIL",
        ("nic.mtu", "nic:eth0"): "WARN",  # 1500 where jumbo frames were expected
    }
    rewrite(tree / ETH0 / "operstate", "down\n")
    rewrite(tree / ETH0 / "carrier", "0\n")
    down = diag(tree, "--profile", str(profile))
    assert down.checks("nic.state", "FAIL")[0]["value"] == "down, no carrier"


@pytest.mark.parametrize(
    ("state", "phys_state", "hint"),
    [("1: DOWN", "3: Disabled", "disabled"), ("1: DOWN", "2: Polling", "looking for a peer")],
    ids=["down", "polling"],
)
def test_infiniband_port_not_up_is_caught(tree: Path, tmp_path: Path, state: str, phys_state: str, hint: str) -> None:
    rewrite(tree / MLX4_PORT2 / "state", state + "\n")
    rewrite(tree / MLX4_PORT2 / "phys_state", phys_state + "\n")
    profile = tmp_path / "ib.toml"
    profile.write_text('[rdma]\nports = 3\nrate = "40G"\n')
    run = diag(tree, "--profile", str(profile))
    assert run.exit_code == 1
    assert run.problems("rdma") == {
        ("rdma.count", "node"): "FAIL",
        ("rdma.state", "rdma:mlx4_0/2"): "FAIL",
        ("rdma.rate", "rdma:i40iw0/1"): "FAIL",  # iWARP at 10 Gb/s, not 40
    }
    port = run.checks("rdma.state", "FAIL")[0]
    assert port["value"] == f"{state[3:]} / {phys_state[3:]}"
    assert hint in port["hint"]
    # Without expectations an idle port is only a warning: the node may not use it.
    unexpected = diag(tree)
    assert unexpected.exit_code == 0
    assert unexpected.problems("rdma") == {("rdma.state", "rdma:mlx4_0/2"): "WARN"}


def test_all_ports_up_pass(tree: Path, tmp_path: Path) -> None:
    profile = tmp_path / "ib.toml"
    profile.write_text('[rdma]\nports = 3\ndevices = ["mlx4_0"]\nlink_layer = "InfiniBand"\n')
    run = diag(tree, "--profile", str(profile))
    assert run.exit_code == 0
    assert run.problems("rdma") == {}
    assert run.checks("rdma.state", "PASS")[0]["subject"] == "3 ports"
    rewrite(tree / "sys/class/infiniband/i40iw0/ports/1/link_layer", "Ethernet\n")
    roce = diag(tree, "--profile", str(profile))
    assert roce.problems("rdma") == {("rdma.link_layer", "rdma:i40iw0/1"): "FAIL"}


def test_missing_mount_fails_and_present_ones_pass(tree: Path, tmp_path: Path) -> None:
    volume = str(tmp_path / "volume")
    run = diag(tree, "--expect-mount", "/data", "--expect-mount", volume, "--expect-mount", "/mnt/nfs")
    assert run.exit_code == 1
    assert run.problems("storage") == {("storage.mounts", "mount:/data"): "FAIL"}
    assert run.checks("storage.mounts", "FAIL")[0]["value"] == "not mounted"
    present = run.statuses("storage.mounts")
    assert present[("storage.mounts", f"mount:{volume}")] == "PASS"
    assert present[("storage.mounts", "mount:/mnt/nfs")] == "PASS"
    assert run.checks("storage.free", "PASS")[0]["subject"] == f"mount:{volume}"


def test_volume_on_the_wrong_transport_fails(tree: Path, tmp_path: Path) -> None:
    (tree / "sys/class/nvme/nvme0/transport").write_text("tcp\n")
    volume = str(tmp_path / "volume")
    profile = tmp_path / "rdma-volume.toml"
    profile.write_text(f'[storage]\nmounts = ["{volume}", "/mnt/nfs"]\ntransport = "rdma"\nmin_free_gib = 1\n')
    run = diag(tree, "--profile", str(profile))
    assert run.exit_code == 1
    assert run.problems("storage") == {("storage.transport", f"mount:{volume}"): "FAIL"}
    assert run.checks("storage.transport", "FAIL")[0]["value"] == "tcp"
    assert run.statuses("storage.transport")[("storage.transport", "mount:/mnt/nfs")] == "PASS"  # proto=rdma


def test_free_space_below_the_profile_fails(tree: Path, tmp_path: Path) -> None:
    volume = str(tmp_path / "volume")
    profile = tmp_path / "big.toml"
    profile.write_text(f'[storage]\nmounts = ["{volume}"]\nmin_free_gib = 1000000\n')
    run = diag(tree, "--profile", str(profile))
    assert run.problems("storage") == {("storage.free", f"mount:{volume}"): "FAIL"}
