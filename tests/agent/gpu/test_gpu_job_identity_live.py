"""Job identity the real way: real processes started by a launcher's environment (torchrun's
variables beside a cloud secret), listed as GPU processes by the fake NVML, read by
``nodeagent sample`` from the real /proc. The report carries the job; the secret goes nowhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nodeagent.agent.gpu import processes
from nodeagent.agent.gpu.processes import ProcessReader, parse_cgroup
from nodeagent.agent.gpu.source import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4
from tests.fakes.trees import REPO

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
RUN_ID = "llama-pretrain-0042"
GIB = 1024**3
HOST_OFF = ["--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband"]


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two ranks of node 1 of a 16-rank torchrun job (ranks 8 and 9), each with a secret in its
    environment, sleeping until the test ends."""
    started = []
    for local_rank in (0, 1):
        env = {
            "TORCHELASTIC_RUN_ID": RUN_ID, "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29400",
            "WORLD_SIZE": "16", "RANK": str(8 + local_rank), "LOCAL_RANK": str(local_rank), "GROUP_RANK": "1",
            "AWS_SECRET_ACCESS_KEY": SECRET, "PATH": os.environ.get("PATH", "/usr/bin"),
        }  # fmt: skip
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env))
    yield started
    for proc in started:
        proc.kill()
        proc.wait(timeout=30)


def test_sample_json_carries_the_job_and_never_the_secret(
    fake_nvml_dir: Path, tmp_path: Path, ranks: list[subprocess.Popen[bytes]]
) -> None:
    state = a100_sxm4()
    state.gpus[0].procs = {ranks[0].pid: 30 * GIB}
    state.gpus[1].procs = {ranks[1].pid: 30 * GIB}
    state_path = tmp_path / "nvml.state"
    state.write(state_path)
    env = {k: v for k, v in os.environ.items() if k != "FAKE_NVML_STATE"}
    env.update(LD_LIBRARY_PATH=str(fake_nvml_dir), FAKE_NVML_STATE=str(state_path))
    result = subprocess.run(
        [sys.executable, "-m", "nodeagent.agent", "--log-level", "debug", "sample", "--json", "--count", "2",
         "--interval", "0.1", *HOST_OFF],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert SECRET not in result.stdout and SECRET not in result.stderr
    assert "AWS_SECRET_ACCESS_KEY" not in result.stdout + result.stderr
    snap = json.loads(result.stdout.splitlines()[-1])
    processes = {p["pid"]: p for g in snap["gpus"] for p in g["processes"]}
    first, second = processes[ranks[0].pid], processes[ranks[1].pid]
    assert (first["job_key"], first["world_size"], first["rank"], first["local_rank"], first["node_rank"]) == (
        f"torch/{RUN_ID}", 16, 8, 0, 1,
    )  # fmt: skip
    assert (second["rank"], second["local_rank"]) == (9, 1)
    (job,) = snap["jobs"]
    assert (job["job"], job["source"], job["world_size"], job["ranks"], job["node_rank"], job["gpus"]) == (
        f"torch/{RUN_ID}", "torch", 16, [8, 9], 1, [0, 1],
    )  # fmt: skip


def test_the_report_bytes_carry_the_job_and_never_the_secret(
    fake_nvml: FakeNvml,
    make_gpu_collector: Callable[..., GpuSource],
    ranks: list[subprocess.Popen[bytes]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[str] = []
    real_read = processes._read_environ

    def counted(path: str) -> bytes | None:
        reads.append(path)
        return real_read(path)

    monkeypatch.setattr(processes, "_read_environ", counted)
    state = fake_nvml.load(a100_sxm4())
    state.gpus[3].procs = {ranks[0].pid: GIB, ranks[1].pid: GIB}
    fake_nvml.write()
    collector = make_gpu_collector()
    collector.scan(pb.NodeInfo())
    for tick in range(3):
        report = pb.NodeReport(node_id="n", epoch=1, seq=tick + 1, time_unix_seconds=1000.0 + tick)
        collector.collect(report)
        data = report.SerializeToString()
        assert SECRET.encode() not in data and b"AWS_SECRET" not in data
        assert [(j.job, list(j.ranks), list(j.gpus)) for j in report.jobs] == [(f"torch/{RUN_ID}", [8, 9], [3])]
    assert sorted(reads) == sorted(f"/proc/{p.pid}/environ" for p in ranks)  # once per process, not per tick


def test_another_user_s_environment_is_skipped_cleanly() -> None:
    """Where the kernel refuses /proc/1/environ (not root, or root in a container whose init is
    another user's), the process keeps the job its cgroup names and no error escapes."""
    try:
        with open("/proc/1/environ", "rb") as handle:
            handle.read(1)
    except PermissionError:
        pass
    else:
        pytest.skip("/proc/1/environ is readable here (root): no refusal to meet")
    info = ProcessReader("/proc").info(1)
    with open("/proc/1/cgroup") as handle:
        cgroup_job = parse_cgroup(handle.read())
    assert info.identity.key == cgroup_job.slurm_job_id
    assert info.identity.ranks.rank is None
