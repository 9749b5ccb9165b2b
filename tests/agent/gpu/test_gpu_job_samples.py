"""One JobSample per multi-node job on the node: what its processes say (disagreement reported,
not hidden), and the pressure of the job's own cgroup, read each tick from a fake tree."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from nodeagent.agent.gpu.job_identity import JobIdentity, Ranks
from nodeagent.agent.gpu.job_samples import JobMember, job_samples
from nodeagent.agent.gpu.round_readings import LONGEST_ROUND
from nodeagent.agent.sources.gpu import GpuSource
from nodeagent.core.wire.validate import MAX_JOBS, MAX_RANKS, check_report
from nodeagent.v1 import nodeagent_pb2 as pb
from tests.fakes.nvml.plugin import FakeNvml
from tests.fakes.nvml.state import a100_sxm4
from tests.fakes.trees import rewrite, write_tree

MakeSource = Callable[..., GpuSource]
GIB = 1024**3
JOB_DIR = "/system.slice/slurmstepd.scope/job_4242"


def _member(gpu: int, pid: int, key: str = "torch/r", world: int | None = 16, rank: int | None = None,
            node: int | None = 1, cgroup: str = "/pod/a") -> JobMember:  # fmt: skip
    ranks = Ranks(world_size=world, rank=rank if rank is not None else pid, local_rank=gpu, node_rank=node)
    return JobMember(gpu=gpu, pid=pid, identity=JobIdentity(key=key, source="torch", ranks=ranks, cgroup=cgroup))


def test_one_sample_per_job_with_its_ranks_and_gpus() -> None:
    samples = job_samples(
        [
            _member(1, 9),
            _member(0, 8),
            _member(2, 30, key="4242", world=None, node=None),
            JobMember(gpu=3, pid=77, identity=JobIdentity()),  # no multi-node job: no sample
        ]
    )
    assert [s.job for s in samples] == ["4242", "torch/r"]
    torch = samples[1]
    assert (torch.source, torch.world_size, list(torch.ranks), list(torch.gpus)) == ("torch", 16, [8, 9], [0, 1])
    assert (torch.node_rank, torch.cgroup) == (1, "/pod/a")
    slurm = samples[0]
    assert (slurm.world_size, list(slurm.ranks), slurm.HasField("node_rank")) == (0, [30], False)


def test_processes_that_disagree_are_reported_by_majority_not_by_maximum() -> None:
    members = [_member(0, 1, world=16), _member(1, 2, world=16), _member(2, 3, world=64, node=2)]
    (sample,) = job_samples(members)
    assert sample.world_size == 16  # two say 16, one 64: not the largest claim
    assert list(sample.ranks) == [1, 2, 3]  # every rank they hold
    assert sample.node_rank == 1
    (tie,) = job_samples([_member(0, 1, world=16, node=3), _member(1, 2, world=32, node=2)])
    assert (tie.world_size, tie.node_rank) == (32, 2)  # ties: the largest world size, the smallest node rank


def test_a_process_on_two_gpus_votes_once_and_ranks_are_unique() -> None:
    members = [_member(0, 5, world=8, rank=0), _member(1, 5, world=8, rank=0), _member(2, 6, world=4, rank=0)]
    (sample,) = job_samples(members)
    assert (sample.world_size, list(sample.ranks), list(sample.gpus)) == (8, [0], [0, 1, 2])


def test_processes_in_different_cgroups_give_no_job_cgroup() -> None:
    (sample,) = job_samples([_member(0, 1, cgroup="/pod/a"), _member(1, 2, cgroup="/pod/b")])
    assert sample.cgroup == ""


def test_the_bounds_hold_and_the_report_passes_validation() -> None:
    many = [_member(i % 8, i, key=f"torch/job-{i:03d}") for i in range(MAX_JOBS + 6)]
    samples = job_samples(many)
    assert [s.job for s in samples] == [f"torch/job-{i:03d}" for i in range(MAX_JOBS)]
    crowded = [_member(i % 8, i + 1, rank=i) for i in range(MAX_RANKS + 10)]
    (sample,) = job_samples(crowded)
    assert list(sample.ranks) == list(range(MAX_RANKS))
    report = pb.NodeReport(node_id="n", epoch=1, seq=1, time_unix_seconds=1.0)
    report.jobs.extend([*samples, sample][:MAX_JOBS])
    check_report(report, "n")


# ---- through the GPU source, over fake procfs and sysfs trees ----


def _process(procfs: Path, pid: int, cgroup: str, env: dict[str, str]) -> None:
    d = procfs / str(pid)
    d.mkdir(parents=True)
    (d / "comm").write_text("python\n")
    (d / "status").write_text("Uid:\t0\t0\t0\t0\n")
    (d / "cgroup").write_text(f"0::{cgroup}\n")
    (d / "environ").write_bytes(b"".join(f"{k}={v}".encode() + b"\0" for k, v in env.items()))


def _pressure(some: float, total: int) -> str:
    return (
        f"some avg10={some:.2f} avg60=1.00 avg300=0.50 total={total}\n"
        f"full avg10={some / 2:.2f} avg60=0.50 avg300=0.25 total={total // 2}\n"
    )


def test_the_job_cgroup_pressure_is_read_each_tick(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    root = write_tree(
        tmp_path,
        {
            "sys/fs/cgroup/cgroup.controllers": "cpu io memory pids\n",
            f"sys/fs/cgroup{JOB_DIR}/cpu.pressure": _pressure(12.5, 1000),
            f"sys/fs/cgroup{JOB_DIR}/io.pressure": _pressure(40.0, 5000),
        },
    )
    task = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_{}"
    for pid, rank in ((4101, 0), (4102, 1)):
        env = {"SLURM_JOB_ID": "4242", "SLURM_NTASKS": "16", "SLURM_PROCID": str(rank), "SLURM_NODEID": "0",
               "SLURM_LOCALID": str(rank), "AWS_SECRET_ACCESS_KEY": "do-not-ship"}  # fmt: skip
        _process(root / "proc", pid, task.format(rank).removeprefix("0::"), env)
    state = fake_nvml.load(a100_sxm4())
    state.gpus[0].procs = {4101: 30 * GIB}
    state.gpus[1].procs = {4102: 30 * GIB}
    fake_nvml.write()
    gpu_source = make_gpu_source(root / "proc", root / "sys")
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(time_unix_seconds=1000.0)
    gpu_source.collect(report)
    (job,) = report.jobs
    assert (job.job, job.source, job.world_size) == ("4242", "slurm", 16)
    assert (list(job.ranks), list(job.gpus)) == ([0, 1], [0, 1])
    assert (job.node_rank, job.cgroup) == (0, JOB_DIR)
    assert job.cpu_pressure.some_avg10_ratio == 0.125 and job.cpu_pressure.some_total_microseconds == 1000
    assert job.io_pressure.some_avg10_ratio == 0.40 and job.io_pressure.full_total_microseconds == 2500
    ref = report.gpus[1].processes[0].job
    assert (ref.job_key, ref.world_size, ref.rank, ref.local_rank, ref.node_rank) == ("4242", 16, 1, 1, 0)
    assert b"do-not-ship" not in report.SerializeToString()

    rewrite(root / f"sys/fs/cgroup{JOB_DIR}/cpu.pressure", _pressure(50.0, 9000))
    report = pb.NodeReport(time_unix_seconds=1001.0)
    gpu_source.collect(report)
    assert report.jobs[0].cpu_pressure.some_avg10_ratio == 0.5  # read again, not cached

    open_before = len(gpu_source.ctx.files)
    state.gpus[0].procs, state.gpus[1].procs = {}, {}
    fake_nvml.write()
    for tick in range(LONGEST_ROUND):  # the processes are read once a round (round_readings)
        report = pb.NodeReport(time_unix_seconds=1002.0 + tick)
        gpu_source.collect(report)
        if not report.jobs:
            break
    assert not report.jobs
    assert len(gpu_source.ctx.files) == open_before - 2  # the job's pressure files are closed


def test_hybrid_cgroups_and_a_job_without_a_cgroup(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    pod = "/kubepods.slice/kubepods-pod1.slice/cri-containerd-ab.scope"
    root = write_tree(
        tmp_path,
        {
            "sys/fs/cgroup/unified/cgroup.controllers": "",
            f"sys/fs/cgroup/unified{pod}/cpu.pressure": _pressure(5.0, 10),
        },
    )
    torch = {"TORCHELASTIC_RUN_ID": "run-1", "WORLD_SIZE": "16", "RANK": "3", "LOCAL_RANK": "0", "GROUP_RANK": "1"}
    _process(root / "proc", 501, pod, torch)
    _process(root / "proc", 502, "/", {"PMIX_NAMESPACE": "ns", "PMIX_RANK": "0"})
    state = fake_nvml.load(a100_sxm4())
    state.gpus[0].procs = {501: GIB}
    state.gpus[1].procs = {502: GIB}
    fake_nvml.write()
    gpu_source = make_gpu_source(root / "proc", root / "sys")
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(time_unix_seconds=1000.0)
    gpu_source.collect(report)
    mpi, torch_job = report.jobs
    assert (torch_job.job, torch_job.cgroup, torch_job.cpu_pressure.some_avg10_ratio) == ("torch/run-1", pod, 0.05)
    assert not torch_job.HasField("io_pressure")  # no io.pressure file there: absent, not zero
    assert (mpi.job, mpi.cgroup, mpi.HasField("cpu_pressure")) == ("mpi/ns", "", False)


def test_an_environment_that_cannot_be_read_leaves_the_cgroup_s_job(
    fake_nvml: FakeNvml, make_gpu_source: MakeSource, tmp_path: Path
) -> None:
    procfs = tmp_path / "proc"
    _process(procfs, 700, "/system.slice/slurmstepd.scope/job_99/step_0", {})
    (procfs / "700" / "environ").unlink()
    (procfs / "700" / "environ").mkdir()  # open() fails, as EACCES does for another user's process
    _process(procfs, 701, "/user.slice/session-1.scope", {})
    (procfs / "701" / "environ").unlink()
    state = fake_nvml.load(a100_sxm4())
    state.gpus[0].procs = {700: GIB, 701: GIB}
    fake_nvml.write()
    gpu_source = make_gpu_source(procfs, tmp_path / "sys")
    gpu_source.scan(pb.NodeInfo())
    report = pb.NodeReport(time_unix_seconds=1000.0)
    gpu_source.collect(report)
    slurm, plain = report.gpus[0].processes
    assert (slurm.job.job_key, slurm.job.HasField("rank")) == ("99", False)
    assert plain.job.job_key == ""
    assert [(j.job, j.source, list(j.ranks)) for j in report.jobs] == [("99", "slurm", [])]
