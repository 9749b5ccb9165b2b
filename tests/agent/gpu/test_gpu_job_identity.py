"""A GPU process's multi-node job from its launcher's environment, as torchrun, Slurm, Open MPI
and PMIx set it: the key the same on every node, the ranks from one launcher, garbage dropped."""

from __future__ import annotations

import pytest

from nodeagent.agent.gpu.job_identity import (
    KEPT_KEYS,
    MAX_ENVIRON_BYTES,
    JobIdentity,
    Ranks,
    identify,
    parse_environ,
)

MASTER = {"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29500"}
TORCH_RANKS = {"WORLD_SIZE": "32", "RANK": "9", "LOCAL_RANK": "1", "GROUP_RANK": "1"}
SLURM_TASK = {
    "SLURM_JOB_ID": "4242", "SLURM_NTASKS": "16", "SLURM_PROCID": "5", "SLURM_LOCALID": "1", "SLURM_NODEID": "2",
}  # fmt: skip
OMPI = {
    "PMIX_NAMESPACE": "prterun-node1-31337@1", "PMIX_RANK": "3",
    "OMPI_COMM_WORLD_SIZE": "8", "OMPI_COMM_WORLD_RANK": "3", "OMPI_COMM_WORLD_LOCAL_RANK": "3",
}  # fmt: skip
SLURM_CGROUP = "/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0"
POD_CGROUP = "/kubepods.slice/kubepods-pod8dbc5577_d0e2_4706_8787_57d52c03ddf2.slice/cri-containerd-ab.scope"


@pytest.mark.parametrize(
    ("env", "key", "source", "ranks"),
    [
        pytest.param(
            {"TORCHELASTIC_RUN_ID": "llama-70b-7", **MASTER, **TORCH_RANKS},
            "torch/llama-70b-7", "torch", Ranks(32, 9, 1, 1),
            id="torchrun-rdzv-id",
        ),
        pytest.param(
            {"TORCHELASTIC_RUN_ID": "none", **MASTER, **TORCH_RANKS},
            "torch/10.0.0.1:29500", "torch", Ranks(32, 9, 1, 1),
            id="torchrun-static-rendezvous-run-id-none",
        ),
        pytest.param(
            {"TORCHELASTIC_RUN_ID": "", **MASTER, "WORLD_SIZE": "4", "RANK": "2", "NODE_RANK": "1"},
            "torch/10.0.0.1:29500", "torch", Ranks(4, 2, None, 1),
            id="empty-run-id-and-node-rank-for-lightning",
        ),
        pytest.param(
            {"TORCHELASTIC_RUN_ID": "none", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29500", "WORLD_SIZE": "8",
             "RANK": "3", "LOCAL_RANK": "3", "GROUP_RANK": "0"},
            "", "", Ranks(8, 3, 3, 0),
            id="single-node-loopback-master-names-no-job",
        ),
        pytest.param({"MASTER_ADDR": "localhost", "MASTER_PORT": "1"}, "", "", Ranks(), id="localhost"),
        pytest.param(
            {"MASTER_ADDR": "localhost", "MASTER_PORT": "23456", "HOSTNAME": "bert-master-0", "WORLD_SIZE": "4",
             "RANK": "0"},
            "torch/bert-master-0:23456", "torch", Ranks(4, 0),
            id="kubeflow-master-is-localhost-to-itself",
        ),
        pytest.param(
            {"MASTER_ADDR": "bert-master-0", "MASTER_PORT": "23456", "HOSTNAME": "bert-worker-0", "WORLD_SIZE": "4",
             "RANK": "1"},
            "torch/bert-master-0:23456", "torch", Ranks(4, 1),
            id="kubeflow-worker-names-the-master",
        ),
        pytest.param(
            {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", "HOSTNAME": "localhost"}, "", "", Ranks(),
            id="a-loopback-hostname-is-no-name",
        ),
        pytest.param({"MASTER_ADDR": "::1", "MASTER_PORT": "1"}, "", "", Ranks(), id="ipv6-loopback"),
        pytest.param(SLURM_TASK, "4242", "slurm", Ranks(16, 5, 1, 2), id="srun-task-per-gpu"),
        pytest.param(
            {**SLURM_TASK, "SLURM_CLUSTER_NAME": "hopper"}, "hopper/4242", "slurm", Ranks(16, 5, 1, 2),
            id="slurm-with-cluster-name",
        ),
        pytest.param(
            {**SLURM_TASK, "SLURM_NTASKS": "4", "SLURM_PROCID": "2", "TORCHELASTIC_RUN_ID": "none", **MASTER,
             **TORCH_RANKS},
            "4242", "slurm", Ranks(32, 9, 1, 1),
            id="srun-then-torchrun-slurm-key-torch-ranks",
        ),
        pytest.param(OMPI, "mpi/prterun-node1-31337@1", "mpi", Ranks(8, 3, 3, None), id="open-mpi-mpirun"),
        pytest.param(
            {"PMIX_NAMESPACE": "slurm.pmix.77.0", "PMIX_RANK": "6"}, "mpi/slurm.pmix.77.0", "mpi", Ranks(rank=6),
            id="pmix-only",
        ),
        pytest.param(
            {**OMPI, "SLURM_NTASKS": "64", "SLURM_PROCID": "40", "SLURM_NODEID": "5"},
            "mpi/prterun-node1-31337@1", "mpi", Ranks(8, 3, 3, None),
            id="mpi-numbers-not-mixed-with-slurm",
        ),
        pytest.param({}, "", "", Ranks(), id="nothing"),
    ],
)  # fmt: skip
def test_each_launcher(env: dict[str, str], key: str, source: str, ranks: Ranks) -> None:
    identity = identify(env)
    assert (identity.key, identity.source, identity.ranks) == (key, source, ranks)


def test_the_slurm_cgroup_wins_and_a_pod_alone_names_no_job() -> None:
    assert identify({"SLURM_JOB_ID": "1"}, slurm_job_id="4242").key == "4242"
    assert identify({}, slurm_job_id="4242", unified_cgroup=SLURM_CGROUP).key == "4242"
    # The cgroup names the job without the environment: another user's process, read without root.
    assert identify({}, slurm_job_id="4242").source == "slurm"
    assert identify({}, unified_cgroup=POD_CGROUP) == JobIdentity()


@pytest.mark.parametrize(
    ("env", "slurm_job_id", "unified", "cgroup"),
    [
        pytest.param({}, "4242", SLURM_CGROUP, "/system.slice/slurmstepd.scope/job_4242", id="slurm-job-level"),
        pytest.param(
            {"TORCHELASTIC_RUN_ID": "r", **MASTER}, "", POD_CGROUP, POD_CGROUP, id="torch-in-a-pod-its-own-cgroup"
        ),
        pytest.param({"SLURM_JOB_ID": "5"}, "", "/user.slice/session-3.scope", "", id="slurm-without-a-job-cgroup"),
        pytest.param({"TORCHELASTIC_RUN_ID": "r"}, "", "/", "", id="the-root-is-no-job-s"),
        pytest.param({"TORCHELASTIC_RUN_ID": "r"}, "", "/../../other", "", id="another-cgroup-namespace"),
        pytest.param({"TORCHELASTIC_RUN_ID": "r"}, "", "", "", id="cgroup-v1-only"),
    ],
)
def test_the_job_cgroup(env: dict[str, str], slurm_job_id: str, unified: str, cgroup: str) -> None:
    assert identify(env, slurm_job_id, unified).cgroup == cgroup


@pytest.mark.parametrize(
    "value",
    ["-1", "+8", "0x10", " 8", "8 ", "", "8.0", "1e3", "\u0663", "2147483648", "99999999999", "12345678901234567890"],
)
def test_an_integer_that_is_not_a_plain_decimal_is_dropped(value: str) -> None:
    env = {"TORCHELASTIC_RUN_ID": "r", "WORLD_SIZE": value, "RANK": value, "LOCAL_RANK": value, "GROUP_RANK": "1"}
    assert identify(env).ranks == Ranks(node_rank=1)


def test_the_largest_world_size_a_launcher_can_set_is_kept() -> None:
    assert identify({"WORLD_SIZE": "2147483647", "RANK": "0"}).ranks.world_size == 2**31 - 1


@pytest.mark.parametrize(
    ("env", "key"),
    [
        pytest.param({"TORCHELASTIC_RUN_ID": "bad\x1b[31m", **MASTER}, "torch/10.0.0.1:29500", id="unprintable-run-id"),
        pytest.param({"TORCHELASTIC_RUN_ID": "r" * 201, **MASTER}, "torch/10.0.0.1:29500", id="run-id-too-long"),
        pytest.param({"TORCHELASTIC_RUN_ID": "   "}, "", id="blank-run-id"),
        pytest.param({"TORCHELASTIC_RUN_ID": "NONE"}, "", id="run-id-NONE"),
        pytest.param({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "70000"}, "", id="port-out-of-range"),
        pytest.param({"MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "0"}, "", id="port-zero"),
        pytest.param({"MASTER_ADDR": "10.0.0.1"}, "", id="no-port"),
        pytest.param({"MASTER_ADDR": "a\nb", "MASTER_PORT": "1"}, "", id="address-with-a-newline"),
        pytest.param({"SLURM_JOB_ID": "12ab", "PMIX_NAMESPACE": "ns"}, "mpi/ns", id="slurm-id-not-a-number"),
        pytest.param({"SLURM_JOB_ID": "7", "SLURM_CLUSTER_NAME": "c\x00x"}, "7", id="unprintable-cluster-name"),
        pytest.param({"PMIX_NAMESPACE": "n" * 201}, "", id="namespace-too-long"),
    ],
)
def test_a_garbage_name_is_dropped(env: dict[str, str], key: str) -> None:
    assert identify(env).key == key


def test_parse_environ_keeps_the_launcher_keys_and_nothing_else() -> None:
    data = (
        b"PATH=/usr/bin\0AWS_SECRET_ACCESS_KEY=hunter2\0RANK=3\0WORLD_SIZE=8\0HF_TOKEN=hf_x\0"
        b"MASTER_ADDR=10.0.0.1\0NOEQUALS\0LOCAL_RANK=\xff\xfe\0RANK=4\0=empty\0"
    )
    env = parse_environ(data)
    assert env == {"RANK": "3", "WORLD_SIZE": "8", "MASTER_ADDR": "10.0.0.1"}  # the first RANK, as getenv
    assert set(env) <= KEPT_KEYS
    assert "hunter2" not in repr(env) and "hf_x" not in repr(env)


def test_parse_environ_stops_at_its_bound_and_drops_the_cut_entry() -> None:
    # The reader reads MAX_ENVIRON_BYTES at most: here they end inside "WORLD_SIZE=128", after
    # "WORLD_SIZE=1", which must not be read as a world size of 1.
    head = b"RANK=1\0X=" + b"y" * (MAX_ENVIRON_BYTES - 9 - 1 - 12) + b"\0"
    data = (head + b"WORLD_SIZE=128\0LOCAL_RANK=2\0")[:MAX_ENVIRON_BYTES]
    assert data.endswith(b"\0WORLD_SIZE=1")
    assert parse_environ(data) == {"RANK": "1"}
    # Exactly at the bound and ending with its NUL: the last entry is whole and kept.
    whole = b"RANK=1\0X=" + b"y" * (MAX_ENVIRON_BYTES - 9 - 1 - 13) + b"\0WORLD_SIZE=8\0"
    assert len(whole) == MAX_ENVIRON_BYTES
    assert parse_environ(whole) == {"RANK": "1", "WORLD_SIZE": "8"}
    assert parse_environ(b"") == {}


@pytest.mark.parametrize(
    "env",
    [
        pytest.param({**SLURM_TASK, "SLURM_JOB_ACCOUNT": "clip"}, id="srun-task"),
        pytest.param(
            {**SLURM_TASK, "SLURM_JOB_ACCOUNT": "clip", "TORCHELASTIC_RUN_ID": "r", **MASTER, **TORCH_RANKS},
            id="torchrun-under-srun",
        ),
        pytest.param({"SLURM_JOB_ACCOUNT": "clip", **OMPI}, id="mpirun-in-an-allocation"),
        pytest.param({"SLURM_JOB_ACCOUNT": "clip"}, id="no-job-key-still-an-account"),
    ],
)
def test_the_slurm_account_is_kept_whatever_launcher_gave_the_key(env: dict[str, str]) -> None:
    assert identify(env).account == "clip"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param("bad\x1b[31m", id="unprintable"),
        pytest.param("a\nb", id="newline"),
        pytest.param("a" * 201, id="too-long"),
        pytest.param("   ", id="blank"),
        pytest.param("", id="empty"),
    ],
)
def test_a_garbage_account_is_dropped_and_the_key_stays(value: str) -> None:
    identity = identify({**SLURM_TASK, "SLURM_JOB_ACCOUNT": value})
    assert (identity.key, identity.account) == ("4242", "")


def test_the_longest_account_is_kept() -> None:
    assert identify({"SLURM_JOB_ACCOUNT": "a" * 200}).account == "a" * 200


def test_parse_environ_keeps_the_account_and_still_nothing_else() -> None:
    data = b"SLURM_JOB_ACCOUNT=clip\0SLURM_JOB_PARTITION=gpu\0SLURM_JOB_USER=alice\0HF_TOKEN=hf_x\0SLURM_JOB_ID=7\0"
    env = parse_environ(data)
    assert env == {"SLURM_JOB_ACCOUNT": "clip", "SLURM_JOB_ID": "7"}
    assert identify(env).account == "clip"
