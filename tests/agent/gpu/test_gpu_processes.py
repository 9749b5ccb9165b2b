"""Which job a GPU process belongs to, from its cgroup, as Slurm, Kubernetes and container
runtimes name them."""

from __future__ import annotations

from pathlib import Path

import pytest

from nodeagent.agent.gpu.processes import JobInfo, ProcessReader, parse_cgroup, parse_status_uid

POD = "8dbc5577-d0e2-4706-8787-57d52c03ddf2"
CID = "4c6e1b0fd2a0a8f0e9d3b7a1c2e5f6a7b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d"


@pytest.mark.parametrize(
    ("cgroup", "want"),
    [
        pytest.param(
            "0::/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0\n",
            JobInfo(slurm_job_id="1234", cgroup="/system.slice/slurmstepd.scope/job_1234/step_0/user/task_0"),
            id="slurm-cgroup-v2",
        ),
        pytest.param(
            "12:pids:/slurm/uid_1000/job_98765/step_batch\n4:memory:/slurm/uid_1000/job_98765/step_batch\n",
            JobInfo(slurm_job_id="98765", cgroup="/slurm/uid_1000/job_98765/step_batch"),
            id="slurm-cgroup-v1",
        ),
        pytest.param(
            f"0::/kubepods/burstable/pod{POD}/{CID}\n",
            JobInfo(k8s_pod_uid=POD, container_id=CID, cgroup=f"/kubepods/burstable/pod{POD}/{CID}"),
            id="k8s-cgroupfs-driver",
        ),
        pytest.param(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
            f"{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n",
            JobInfo(
                k8s_pod_uid=POD,
                container_id=CID,
                cgroup="/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
                f"{POD.replace('-', '_')}.slice/cri-containerd-{CID}.scope",
            ),
            id="k8s-systemd-driver-containerd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope\n",
            JobInfo(
                k8s_pod_uid=POD,
                container_id=CID,
                cgroup=f"/kubepods.slice/kubepods-pod{POD.replace('-', '_')}.slice/crio-{CID}.scope",
            ),
            id="k8s-cri-o",
        ),
        pytest.param(
            f"0::/system.slice/docker-{CID}.scope\n",
            JobInfo(container_id=CID, cgroup=f"/system.slice/docker-{CID}.scope"),
            id="docker-systemd",
        ),
        pytest.param(f"11:devices:/docker/{CID}\n", JobInfo(container_id=CID, cgroup=f"/docker/{CID}"), id="docker-v1"),
        pytest.param(
            "0::/user.slice/user-1000.slice/session-3.scope\n",
            JobInfo(cgroup="/user.slice/user-1000.slice/session-3.scope"),
            id="plain-login-session",
        ),
        pytest.param("0::/job_12ab/x\n", JobInfo(cgroup="/job_12ab/x"), id="not-a-slurm-job-id"),
        pytest.param("", JobInfo(), id="empty"),
    ],
)
def test_parse_cgroup(cgroup: str, want: JobInfo) -> None:
    assert parse_cgroup(cgroup) == want


def test_unified_hierarchy_wins_over_v1_lines() -> None:
    text = f"5:cpu:/docker/{CID}\n0::/slurm/job_7/step_0\n"
    assert parse_cgroup(text).slurm_job_id == "7"


@pytest.mark.parametrize(
    ("status", "uid"),
    [("Name:\tpython\nUid:\t1000\t1001\t1001\t1001\n", 1000), ("Name:\tx\n", None), ("Uid:\t\n", None)],
)
def test_parse_status_uid(status: str, uid: int | None) -> None:
    assert parse_status_uid(status) == uid


def test_reader_caches_until_the_pid_leaves(tmp_path: Path) -> None:
    proc = tmp_path / "77"
    proc.mkdir()
    (proc / "comm").write_text("trainer\n")
    (proc / "status").write_text("Uid:\t0\t0\t0\t0\n")
    (proc / "cgroup").write_text("0::/slurm/job_5/step_0\n")
    reader = ProcessReader(str(tmp_path))
    first = reader.info(77)
    assert (first.name, first.user, first.job.slurm_job_id) == ("trainer", "root", "5")
    (proc / "comm").write_text("renamed\n")
    assert reader.info(77).name == "trainer"  # cached while the pid stays on a GPU
    reader.retain(set())
    assert reader.info(77).name == "renamed"
    missing = reader.info(12345)  # in another pid namespace, or gone
    assert (missing.name, missing.user, missing.job) == ("", "", JobInfo())
