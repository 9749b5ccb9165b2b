"""bench/lab.py as a user runs it: bad arguments, --gpu without CUDA, a short real run (root),
and Ctrl-C leaving nothing behind."""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import require, require_root_tools
from tests.fakes.fleet import started_at, still_running
from tests.fakes.trees import REPO

LAB = [sys.executable, str(REPO / "bench" / "lab.py")]


def lab(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LAB, *args], cwd=REPO, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--scenarios", "nfs"], "'nfs'"),
        (["--scenarios", "h2d"], "needs --gpu"),
        (["--seconds", "10"], "--seconds 10"),
    ],
)
def test_bad_arguments_are_one_line_and_exit_2(args: list[str], named: str) -> None:
    done = lab(*args)
    assert done.returncode == 2
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("lab: ") and named in last


def test_gpu_without_cuda_refuses_in_one_line() -> None:
    probe = subprocess.run([sys.executable, "-c", "import torch; assert torch.cuda.is_available()"],
                           capture_output=True, timeout=120, check=False)  # fmt: skip
    require(probe.returncode != 0, "this machine has PyTorch with CUDA")
    done = lab("--gpu", "--scenarios", "clean", timeout=120)
    assert done.returncode == 1
    assert done.stderr.strip().count("\n") == 0 and done.stderr.startswith("lab: --gpu needs ")


def _namespaces() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, timeout=30, check=True).stdout


@pytest.mark.alone
# The live clean loader is judged by the multi-node lab's live run (tests/tools/test_lab_cluster.py)
# and this lab's recorded clean trace (tests/tools/test_lab_traces.py): here, the shaped link only.
def test_a_shaped_link_gets_the_right_verdict_and_leaves_nothing(fake_nvml_dir: object) -> None:
    require_root_tools("ip", "tc", "losetup")
    require(shutil.which("gcc") is not None, "needs gcc for the fake NVML")
    proc = subprocess.Popen([*LAB, "--scenarios", "network", "--seconds", "30"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, out + err
    rows = {line.split("|")[1].strip(): line for line in out.splitlines() if line.startswith("| ")}
    assert "starved (network)" in rows["network"] and rows["network"].endswith("| yes |")
    assert f"-{proc.pid % 100000}" not in _namespaces()


# Not alone: it judges what is left behind, not how fast anything ran; the parallel pass may
# share the cores with it.
def test_ctrl_c_removes_the_namespaces_and_processes(fake_nvml_dir: object) -> None:
    require_root_tools("ip", "tc")
    # Long enough that the lab is still running when the Ctrl-C comes, however slowly a busy
    # machine makes its namespaces (with 30 s it once finished first, and exited 0).
    proc = subprocess.Popen([*LAB, "--scenarios", "network", "--seconds", "600"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    tag = f"na-b-{proc.pid % 100000}"
    try:
        deadline = time.monotonic() + 60
        while tag not in _namespaces() and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.5)
        assert tag in _namespaces(), "the lab made no namespace"
        time.sleep(3)  # its server and collector are starting
        children = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True, timeout=30,
                                  check=False).stdout.split()  # fmt: skip
        started = started_at(children)
        assert children, "the lab started no processes"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert tag not in _namespaces()
    assert not still_running(started), started
