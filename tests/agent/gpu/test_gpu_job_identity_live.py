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
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4
from tests.fakes.trees import REPO

SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
RUN_ID = "llama-pretrain-0042"
ACCOUNT = "llm-pretrain"
GIB = 1024**3
HOST_OFF = ["--no-collector.netdev", "--no-collector.diskstats", "--no-collector.infiniband"]


@pytest.fixture
def ranks() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Two ranks of node 1 of a 16-rank torchrun job (ranks 8 and 9) under an allocation charged to
    ``ACCOUNT``, each with a secret in its environment, sleeping until the test ends."""
    started = []
    for local_rank in (0, 1):
        env = {
            "TORCHELASTIC_RUN_ID": RUN_ID, "MASTER_ADDR": "10.1.0.1", "MASTER_PORT": "29400",
            "WORLD_SIZE": "16", "RANK": str(8 + local_rank), "LOCAL_RANK": str(local_rank), "GROUP_RANK": "1",
            "SLURM_JOB_ACCOUNT": ACCOUNT, "AWS_SECRET_ACCESS_KEY": SECRET, "PATH": os.environ.get("PATH", "/usr/bin"),
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
    assert (first["account"], second["account"]) == (ACCOUNT, ACCOUNT)
    (job,) = snap["jobs"]
    assert (job["job"], job["source"], job["world_size"], job["ranks"], job["node_rank"], job["gpus"]) == (
        f"torch/{RUN_ID}", "torch", 16, [8, 9], 1, [0, 1],
    )  # fmt: skip


def test_the_report_bytes_carry_the_job_and_never_the_secret(
    fake_nvml: FakeNvml,
    make_gpu_source: Callable[..., GpuSource],
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
    gpu_source = make_gpu_source()
    gpu_source.scan(pb.NodeInfo())
    for tick in range(3):
        report = pb.NodeReport(node_id="n", epoch=1, seq=tick + 1, time_unix_seconds=1000.0 + tick)
        gpu_source.collect(report)
        data = report.SerializeToString()
        assert SECRET.encode() not in data and b"AWS_SECRET" not in data
        assert [(j.job, list(j.ranks), list(j.gpus)) for j in report.jobs] == [(f"torch/{RUN_ID}", [8, 9], [3])]
        (gpu,) = [g for g in report.gpus if g.index == 3]
        assert [p.job.account for p in gpu.processes] == [ACCOUNT, ACCOUNT]
    assert sorted(reads) == sorted(f"/proc/{p.pid}/environ" for p in ranks)  # once per process, not per tick


def _read_as_another_user(pid: int) -> dict[str, object]:
    """What the reader makes of ``pid`` in a forked child that, when this test runs as root, drops
    to ``nobody`` first (the interpreter under root's home cannot be started as nobody)."""
    rfd, wfd = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child's result comes back through the pipe
        try:
            if os.geteuid() == 0:
                os.setgid(65534)
                os.setuid(65534)
            try:
                with open(f"/proc/{pid}/environ", "rb") as handle:
                    handle.read(1)
                refused = False
            except PermissionError:
                refused = True
            info = ProcessReader("/proc").info(pid)
            with open(f"/proc/{pid}/cgroup") as handle:
                cgroup_job = parse_cgroup(handle.read())
            seen = {"refused": refused, "key": info.identity.key, "cgroup_key": cgroup_job.slurm_job_id,
                    "rank": info.identity.ranks.rank}  # fmt: skip
            os.write(wfd, json.dumps(seen).encode())
        except BaseException as err:  # anything the reader raises is the failure
            os.write(wfd, json.dumps({"error": repr(err)}).encode())
        finally:
            os._exit(0)
    os.close(wfd)
    with os.fdopen(rfd, "rb") as pipe:
        data = pipe.read()
    os.waitpid(child, 0)
    return dict(json.loads(data))


def test_another_user_s_environment_is_skipped_cleanly() -> None:
    """Where the kernel refuses a process's environ (another user's), the reader keeps the job its
    cgroup names and no error escapes. As root the reader runs as ``nobody`` against this test's
    own (root) process, so the refusal is met here too, not skipped."""
    seen = _read_as_another_user(os.getpid() if os.geteuid() == 0 else 1)
    assert "error" not in seen, seen
    assert seen["refused"], "the kernel let the reader read another user's environment"
    assert seen["key"] == seen["cgroup_key"] and seen["rank"] is None
