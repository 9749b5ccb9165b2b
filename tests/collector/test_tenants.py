"""``[tenants]`` (collector/tenants.py): the table checked in one line, a stream's tenant from its
credential, job names scoped so that no name of one tenant is ever another's, and the ledger's
accounts and namespaces billed within the job's tenant."""

from __future__ import annotations

import functools
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nodeagent.collector.config import CollectorConfigError, config_from_mapping
from nodeagent.collector.history import split
from nodeagent.collector.history.batch import HistoryBatch
from nodeagent.collector.history.minutes import MinuteRow
from nodeagent.collector.ledger.prices import Prices
from nodeagent.collector.ledger.read import ledger_answer
from nodeagent.collector.store.database import Store
from nodeagent.collector.store.nodes import NodeRow
from nodeagent.collector.store.reader import ReadContext
from nodeagent.collector.tenants import (
    Scope,
    TenantConflictError,
    Tenants,
    raw_key,
    stream_tenant,
    tenant_of,
)
from nodeagent.core.detector.gate import job_id
from nodeagent.v1 import nodeagent_pb2 as pb

TENANTS = Tenants.from_mapping(
    {"acme": {"token_file": "/t/acme", "nodes": ["acme-*"]}, "evil": {"nodes": ["evil-*"]}}, source="c.toml"
)
NAMES = TENANTS.names


@pytest.mark.parametrize(
    ("table", "needle"),
    [
        ({"a:b": {"nodes": ["x"]}}, "c.toml: tenants.a:b: a tenant's name is"),
        ({"acme": {}}, "c.toml: tenants.acme: give token_file, nodes or both"),
        ({"acme": {"nodes": "acme-*"}}, "c.toml: tenants.acme.nodes: expected list"),
        ({"acme": {"nodes": [""]}}, "c.toml: tenants.acme.nodes: expected certificate names"),
        ({"acme": {"token": "x"}}, "c.toml: tenants.acme.token: unknown key"),
    ],
)
def test_a_bad_tenants_table_stops_start_up_in_one_line(table: dict[str, object], needle: str) -> None:
    with pytest.raises(CollectorConfigError) as err:
        config_from_mapping({"tenants": table}, "c.toml")
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_a_streams_tenant_is_its_tokens_or_its_certificates_and_never_two() -> None:
    assert stream_tenant(TENANTS, "acme", "anything", mutual=False) == "acme"
    assert stream_tenant(TENANTS, "", "evil-3", mutual=True) == "evil"
    assert stream_tenant(TENANTS, "", "evil-3", mutual=False) == ""  # a node id no certificate proves
    assert stream_tenant(TENANTS, "acme", "acme-1", mutual=True) == "acme"
    assert stream_tenant(TENANTS, "", "other", mutual=True) == ""
    with pytest.raises(TenantConflictError, match="tenant acme's, the certificate of 'evil-3' tenant evil's"):
        stream_tenant(TENANTS, "acme", "evil-3", mutual=True)


_KEYS = st.text(st.characters(blacklist_categories=("Cc", "Cs")), max_size=12) | st.sampled_from(
    ["acme:x", "evil:x", ":x", "x", "::", "acme:", "10.0.0.1:29500", "torch/run"]
)


@given(a=st.sampled_from(["", "acme", "evil"]), b=st.sampled_from(["", "acme", "evil"]), x=_KEYS, y=_KEYS)
def test_no_name_of_one_tenant_is_ever_anothers(a: str, b: str, x: str, y: str) -> None:
    """Scoping is one-to-one over (tenant, name): two tenants' names never meet, and a scoped name
    gives back its tenant and the key its nodes gave."""
    sx, sy = Scope(TENANTS, a).name(x), Scope(TENANTS, b).name(y)
    if x and y and (a, x) != (b, y):
        assert sx != sy
    if x:
        assert tenant_of(sx, NAMES) == a and raw_key(sx, NAMES) == x


def test_a_reports_job_names_are_scoped_where_the_job_stage_and_the_ledger_read_them() -> None:
    report = pb.NodeReport(node_id="evil-0")
    report.jobs.add(job="torch/victim", ranks=[3], world_size=4)
    gpu = report.gpus.add(index=0)
    gpu.processes.add(pid=1, job=pb.JobRef(job_key="torch/victim", slurm_job_id="77", account="mallory"))
    gpu.processes.add(pid=2, job=pb.JobRef(slurm_job_id="78"))
    Scope(TENANTS, "evil").report(report)
    assert report.jobs[0].job == "evil:torch/victim"
    assert [job_id(p.job) for p in gpu.processes] == ["evil:torch/victim", "evil:78"]
    assert gpu.processes[0].job.account == "mallory"  # billed within its job's tenant by the ledger
    untenanted = pb.NodeReport(node_id="n")
    untenanted.jobs.add(job="acme:torch/victim")
    Scope(TENANTS, "").report(untenanted)
    assert untenanted.jobs[0].job == ":acme:torch/victim"  # out of acme's scope


def _minute(node_id: str, job: str, computing: float) -> MinuteRow:
    parts = split.empty()
    parts[split.INDEX["computing"]] = computing
    return MinuteRow(node_id, 0, 60, samples=1, jobs=(job,), held_seconds=computing, split=parts)


def test_accounts_and_namespaces_are_billed_within_the_jobs_tenant(tmp_path: Path) -> None:
    rows = [
        _minute("acme-0", "acme:torch/victim", 60.0),
        _minute("evil-0", "evil:torch/victim", 30.0),
        _minute("evil-1", "evil:other", 15.0),
        _minute("n", ":acme:sneaky", 10.0),
    ]
    owners = [
        ("acme-0", "acme:torch/victim", "research", "", 60),
        ("evil-0", "evil:torch/victim", "research", "", 60),  # claims acme's account name
        ("n", ":acme:sneaky", "acme:research", "", 60),  # a node of no tenant, naming acme's scope
    ]
    store = Store(tmp_path / "c.db")
    try:
        nodes = [NodeRow(node_id=r.node_id, first_seen=1.0, last_seen=2.0) for r in rows]
        store.write(
            nodes, before_commit=functools.partial(store.history.write, HistoryBatch(minutes=rows, owners=owners))
        )
    finally:
        store.close()
    conn = sqlite3.connect(tmp_path / "c.db")
    try:
        request = pb.LedgerRequest(by="account")
        answer = ledger_answer(ReadContext(conn), request, Prices(), 1000, 1 << 20, TENANTS)
        untenanted = ledger_answer(ReadContext(conn), request, Prices(), 1000, 1 << 20)
    finally:
        conn.close()
    accounts = {r.key: (r.gpu_hours_held * 3600, list(r.nodes)) for r in answer.rows}
    assert accounts == {
        "acme:research": (pytest.approx(60.0), ["acme-0"]),
        "evil:research": (pytest.approx(30.0), ["evil-0"]),
        "evil:": (pytest.approx(15.0), ["evil-1"]),
        ":acme:research": (pytest.approx(10.0), ["n"]),
    }
    # Without [tenants] an account is one name, whoever claims it (as before).
    assert {r.key for r in untenanted.rows} == {"research", "", "acme:research"}
