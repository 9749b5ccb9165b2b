"""Who joins a job: a node that joins after the job's first judged step, or claims a rank another
node holds, is noted and raised as an info alert; a node of another tenant naming the same key is
its own tenant's job and raised as a ``JobTenantMismatch`` (collector/jobs/membership_alerts.py)."""

from __future__ import annotations

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.rollup import JobRollup
from nodeagent.core.detector.config import DetectorConfig
from tests.collector.jobs.test_rollup import Run
from tests.fakes.job_reports import FakeNode, JobPart, job_nodes


def _instances(run: Run, name: str) -> dict[tuple[str, str], list[bool]]:
    """(node, key) -> each signal's firing, in order."""
    out: dict[tuple[str, str], list[bool]] = {}
    for _, s in run.signals:
        if s.name == name:
            out.setdefault((s.node_id, s.key), []).append(s.firing)
    return out


def test_a_node_that_joins_after_the_first_step_is_noted_and_raised_as_info_for_a_window() -> None:
    nodes = job_nodes("1234", 4)
    run = Run(nodes)
    run.silent.add("node-3")
    run.seconds(60)
    assert run.verdict().nodes == ("node-0", "node-1", "node-2")
    run.silent.clear()
    run.seconds(30)
    v = run.verdict()
    assert v.nodes == ("node-0", "node-1", "node-2", "node-3")
    assert "node-3 joined after the job's first step" in v.notes
    [late] = [s for _, s in run.signals if s.name == "JobNodeJoinedLate" and s.firing][:1]
    assert (late.node_id, late.key, late.severity, late.labels["job"]) == ("node-3", "1234", "info", "1234")
    run.seconds(90)  # a window later: the note and the alert go
    assert not any("joined" in note for note in run.verdict().notes)
    assert _instances(run, "JobNodeJoinedLate")[("node-3", "1234")][-1] is False
    # The nodes that were there from the start are never named.
    assert set(_instances(run, "JobNodeJoinedLate")) == {("node-3", "1234")}


def test_nodes_there_from_the_start_raise_nothing() -> None:
    run = Run(job_nodes("1234", 4))
    run.seconds(120)
    assert not [s for _, s in run.signals if s.name.startswith(("JobNode", "JobRank", "JobTenant"))]
    assert not any("joined" in note for note in run.verdict().notes)


def test_a_rank_claimed_twice_is_raised_on_the_node_that_claims_it() -> None:
    nodes = job_nodes("1234", 3)
    nodes[2].jobs[0].ranks = nodes[1].jobs[0].ranks
    run = Run(nodes)
    run.seconds(60)
    firing = {k: v[-1] for k, v in _instances(run, "JobRankClaimedTwice").items()}
    assert firing == {("node-2", "1234"): True}
    [signal] = [s for _, s in run.signals if s.name == "JobRankClaimedTwice"][:1]
    assert signal.severity == "info"


def test_a_node_of_another_tenant_naming_the_key_is_its_own_job_and_a_tenant_mismatch() -> None:
    acme = job_nodes("acme:torch/victim", 3, prefix="acme")
    evil = FakeNode("evil-0", [JobPart("evil:torch/victim", (0, 1, 2, 3), (12, 13, 14, 15), 16)])
    config = DetectorConfig()
    run = Run([*acme, evil], JobRollup(config, JobRollupConfig(tenants=frozenset({"acme", "evil"}))))
    run.silent.add("evil-0")
    run.seconds(40)
    run.silent.clear()
    run.seconds(40)
    assert run.verdict("acme:torch/victim").nodes == ("acme-0", "acme-1", "acme-2")
    assert run.verdict("evil:torch/victim").nodes == ("evil-0",)
    mismatches = _instances(run, "JobTenantMismatch")
    assert mismatches == {("evil-0", "acme:torch/victim"): [True] * len(mismatches[("evil-0", "acme:torch/victim")])}
    [signal] = [s for _, s in run.signals if s.name == "JobTenantMismatch"][:1]
    assert signal.severity == "warning" and signal.labels == {"job": "acme:torch/victim", "node": "evil-0"}
    assert "tenant evil" in signal.annotations["summary"] and "tenant acme" in signal.annotations["summary"]
    evil.jobs = []
    run.seconds(20)  # it no longer names the key: its job ends, and its alert resolves
    assert run.rollup.verdict("evil:torch/victim") is None
    assert _instances(run, "JobTenantMismatch")[("evil-0", "acme:torch/victim")][-1] is False


def test_without_tenants_a_key_with_a_colon_is_one_job_and_no_mismatch() -> None:
    a = job_nodes("acme:1234", 2, prefix="a")
    b = job_nodes("1234", 2, prefix="b")
    run = Run([*a, *b])
    run.seconds(60)
    assert run.verdict("acme:1234").nodes == ("a-0", "a-1") and run.verdict("1234").nodes == ("b-0", "b-1")
    assert not [s for _, s in run.signals if s.name == "JobTenantMismatch"]
