"""The simulated node's multi-node job and faulty GPU: the job key on every GPU process and one
``JobSample`` built as the agent builds it from real processes, an Xid that the collector's rule
turns into XIDError at once, and ``nodeagent run --set`` checking what it is given."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from nodeagent.agent.cli.main import cli
from nodeagent.agent.gpu.job_identity import JobIdentity, Ranks
from nodeagent.agent.gpu.job_samples import JobMember, job_samples
from nodeagent.collector.alerts.config import AlertConfig
from nodeagent.collector.alerts.report_rules import XID_ERROR, NodeRules
from nodeagent.core.wire.validate import check_report
from nodeagent.tools.simulator import ScenarioError, Simulation
from nodeagent.tools.simulator.scenarios import parse_overrides
from nodeagent.v1 import nodeagent_pb2 as pb


def test_a_job_key_puts_the_node_in_a_multi_node_job_as_the_agent_reports_it() -> None:
    sim = Simulation("healthy", node_id="n2", job_key="torch/run-1", job_nodes=3, job_node_rank=2, gpus=4)
    report = sim.step(1.0)
    report.epoch, report.seq = 1, 1
    check_report(report, "n2")  # what the collector accepts
    refs = [process.job for gpu in report.gpus for process in gpu.processes]
    assert [ref.job_key for ref in refs] == ["torch/run-1"] * 4
    assert [(ref.rank, ref.local_rank, ref.node_rank, ref.world_size) for ref in refs] == [
        (8, 0, 2, 12), (9, 1, 2, 12), (10, 2, 2, 12), (11, 3, 2, 12)
    ]  # fmt: skip
    # The agent's own builder, given these processes, yields the same sample the simulator sends.
    members = [
        JobMember(gpu.index, process.pid, JobIdentity(ref.job_key, "torch", Ranks(ref.world_size, ref.rank,
                                                                                 ref.local_rank, ref.node_rank)))
        for gpu in report.gpus for process in gpu.processes for ref in [process.job]
    ]  # fmt: skip
    assert list(report.jobs) == job_samples(members)


def test_no_job_key_no_job_sample_and_none_before_the_job_starts() -> None:
    assert not Simulation("healthy", node_id="n").step(1.0).jobs
    assert not Simulation("healthy", node_id="n").step(1.0).gpus[0].processes[0].job.job_key
    late = Simulation("job-start", node_id="n", job_key="1234")
    assert not late.step(30.0).jobs  # idle: no process, no job
    assert late.step(40.0).jobs[0].source == "slurm"  # loading the model: the job's processes are there
    with pytest.raises(ScenarioError, match="job_node_rank"):
        Simulation("healthy", node_id="n", job_key="k", job_nodes=2, job_node_rank=2)
    with pytest.raises(ScenarioError, match="job_key must be printable"):
        Simulation("healthy", node_id="n", job_key="a\nb")


def test_a_faulty_gpu_raises_xids_on_schedule_and_xid_error_fires_at_the_first() -> None:
    sim = Simulation("xid-errors", node_id="n1", xid_every_seconds=2.0, xid_gpu=3)
    rules = NodeRules("n1", AlertConfig())
    first = sim.step(0.0)
    first.info.CopyFrom(sim.info())
    assert not [s for s in rules.observe(first) if s.firing]
    events, signals = [], []
    for _ in range(10):  # 5 s at 0.5 s
        report = sim.step(0.5)
        events += [(e.time_unix_seconds - sim.start_time, e.subject, e.attributes["xid"]) for e in report.events]
        signals += rules.observe(report)
    assert events == [(2.0, "gpu:3", "13"), (4.0, "gpu:3", "13")]
    fired = [s for s in signals if s.firing]
    assert [(s.name, s.key, s.severity) for s in fired] == [(XID_ERROR, "gpu:3", "warning")]  # once, not per Xid
    assert Simulation("xid-errors", node_id="n1").params.xid_every_seconds == 10.0


def test_unrelated_nodes_never_share_a_slurm_job_but_the_nodes_of_one_job_do() -> None:
    """The history adds up GPU-minutes by job: two simulated rentals that both said Slurm job 4242
    were one 2-node job there."""

    def slurm_ids(sim: Simulation) -> set[str]:
        return {p.job.slurm_job_id for gpu in sim.step(1.0).gpus for p in gpu.processes}

    a, b = (slurm_ids(Simulation("ordinary-cloud", node_id=n)) for n in ("rental-a", "rental-b"))
    assert len(a) == len(b) == 1 and a != b and a == slurm_ids(Simulation("fast-cloud", node_id="rental-a"))
    job = [slurm_ids(Simulation("healthy", node_id=f"n{r}", job_key="torch/run-e", job_nodes=2, job_node_rank=r))
           for r in (0, 1)]  # fmt: skip
    assert job[0] == job[1] != a
    assert slurm_ids(Simulation("healthy", node_id="n", job_key="hopper/1234", job_nodes=2)) == {"1234"}
    assert slurm_ids(Simulation("healthy", node_id="n", job_id="77")) == {"77"}


def test_overrides_parse_as_json_else_as_text() -> None:
    assert parse_overrides(["job_key=torch/run-1", "job_nodes=3", "xid_every_seconds=null", "job=false"]) == {
        "job_key": "torch/run-1", "job_nodes": 3, "xid_every_seconds": None, "job": False
    }  # fmt: skip
    with pytest.raises(ScenarioError, match="expected NAME=VALUE"):
        parse_overrides(["job_key"])


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--set", "job_nodes=2"], "--set needs --simulate"),
        (["--simulate", "healthy", "--set", "job_nodez=2"], "unknown simulator parameter 'job_nodez'"),
        (["--simulate", "healthy", "--set", "job_nodes=two"], "job_nodes: expected int"),
        (["--simulate", "healthy", "--time-scale", "30", "--time-scale-anchor", "nan"], "finite number"),
        (["--simulate", "healthy", "--time-scale", "30", "--time-scale-anchor", "9e9"], "h back"),
    ],
)
def test_run_refuses_a_bad_set_in_one_line(args: list[str], message: str) -> None:
    result = CliRunner().invoke(cli, ["run", "--collector", "127.0.0.1:1", "--max-reports", "1", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_a_simulated_job_s_processes_carry_its_slurm_account() -> None:
    def accounts(report: pb.NodeReport) -> set[str]:
        return {process.job.account for gpu in report.gpus for process in gpu.processes}

    demo = Simulation("fast-cloud", node_id="clip-node-0", job_key="torch/clip-4node", job_nodes=4, gpus=2)
    report = demo.step(1.0)
    report.epoch, report.seq = 1, 1
    check_report(report, "clip-node-0")  # what the collector accepts
    assert accounts(report) == {"clip"}  # derived from the key, as the demo's job
    assert accounts(Simulation("healthy", node_id="n", job_key="torch/r", job_account="vision").step(1.0)) == {"vision"}
    assert accounts(Simulation("healthy", node_id="n").step(1.0)) == {""}  # no job key, no account
    assert accounts(Simulation("healthy", node_id="n", job_key="hopper/4242").step(1.0)) == {""}
    with pytest.raises(ScenarioError, match="job_account must be printable"):
        Simulation("healthy", node_id="n", job_account="a\x1bb")
    # The Slurm job id names the GPUs' job without a key (issue 47 carried ESC, CR and LF in it).
    with pytest.raises(ScenarioError, match="job_id must be printable"):
        Simulation("healthy", node_id="n", job_id="77\x1b[2J\r\n")
