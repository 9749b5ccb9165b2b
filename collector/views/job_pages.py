"""The job pages' JSON: ``/api/jobs`` (every multi-node job the roll-up follows) and
``/api/job/NAME`` (one job, its nodes side by side), for the fleet page (``fleet_page``).

The roll-up's verdicts (``Ingest.jobs``, a snapshot replaced whole) beside each node's own
verdict; a job is ``down`` when no node of it reports now. A job judged elsewhere (another worker
or collector) is a 404 that carries the cards of its nodes held here (``JobPages.job_members``),
for the merged page (``fleet/page_merge.py``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final

from nodeagent.collector.alerts.alert import Alert
from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.ingest.shown_state import down_after_seconds
from nodeagent.collector.jobs.verdict import JobVerdict
from nodeagent.collector.payoff.worth import gpu_models, job_worth
from nodeagent.collector.states.words import DOWN, job_sentence, job_shown_state, job_worst_first
from nodeagent.collector.views.evidence_text import evidence_lines
from nodeagent.collector.views.page_rows import counts, node_row
from nodeagent.core.detector.verdict_words import evidence_words, verdict_sentence
from nodeagent.v1 import nodeagent_pb2 as pb

if TYPE_CHECKING:
    from nodeagent.collector.views.fleet_state import FleetState

_HIGHWAYS: Final = ("network", "storage", "cpu")


class JobPages:
    def __init__(self, server: FleetState, alerts: Callable[[], list[Alert]]) -> None:
        self.server = server
        self._alerts = alerts  # the alert book's recent alerts, oldest first

    def jobs(self) -> dict[str, Any]:
        """Every multi-node job the roll-up follows, worst first; ``down`` when no node of it is fresh."""
        now = self.server.ingest.clock()
        fresh = self._fresh_nodes(now)
        shown = [self._job_row(v, fresh) for v in self.server.ingest.jobs.verdicts()]
        shown.sort(key=job_worst_first)
        return {"time_unix_seconds": now, "states": counts(j["state"] for j in shown), "jobs": shown}

    def job(self, name: str) -> dict[str, Any] | None:
        """One job: its verdict, and its nodes side by side, each with its own verdict (on the GPUs
        of the job there, where its report says which), the straggler marked."""
        verdict = self.server.ingest.jobs.verdict(name)
        if verdict is None:
            return None
        now = self.server.ingest.clock()
        out = self._job_row(verdict, self._fresh_nodes(now))
        out["sentence"] = job_sentence(out)
        out["evidence_lines"] = evidence_lines(verdict.evidence)
        out["node_details"] = [
            self._job_node(name, node_id, node_id in verdict.straggler_nodes, verdict.cause, now)
            for node_id in verdict.nodes
        ]
        out["alerts"] = [a.to_plain() for a in self._alerts() if a.labels.get("job") == name]
        return out

    def _job_row(self, verdict: JobVerdict, fresh: set[str]) -> dict[str, Any]:
        """``_job_row``'s, its ``if_fixed`` at the ``[payoff]`` target and priced as the ledger prices."""
        out = _job_row(verdict, fresh)
        prices, payoff = self.server.worth_config
        fixed = job_worth(
            verdict.if_fixed, verdict.gpus, gpu_models(self.server.ingest.nodes, verdict.nodes), prices, payoff
        )
        out["if_fixed"] = fixed.to_plain() if fixed is not None else None
        return out

    def job_members(self, name: str) -> list[dict[str, Any]]:
        """The cards of the nodes held here whose reports name a job judged elsewhere (its owner is
        another worker or collector): the merged page fills the owner's unknown cards with them.
        Whether a node holds the job back is the owner's to say: each card carries the node's
        sentence and its words for every highway, the merge keeps them for a straggler."""
        now = self.server.ingest.clock()
        return [self._job_node(name, node_id, None, None, now) for node_id in self.server.ingest.jobs.members_of(name)]

    def _job_node(
        self, job: str, node_id: str, straggler: bool | None, cause: str | None, now: float
    ) -> dict[str, Any]:
        """One node's card on the job's page; ``straggler`` None: not judged here (``job_members``)."""
        node = self.server.ingest.nodes.get(node_id)
        if node is None:  # a node of the job this collector does not hold (another shard's, retired)
            return {"node_id": node_id, "known": False, "straggler": straggler, "state": "unknown", "gpus": []}
        window = self.server.ingest.detector_config.window_seconds
        row = node_row(node, now, window, down_after_seconds(self.server.ingest))
        detector = node.detector
        v = detector.verdict if detector is not None and row["state"] != "down" else None
        mine = _job_gpus(node, job)
        gpus = [g for g in v.gpus if mine is None or g.index in mine] if v is not None else []
        busy = [1.0 - g.idle_ratio for g in gpus if g.idle_ratio is not None]
        data = [g.starvation_ratio for g in gpus if g.starvation_ratio is not None]
        sync = [g.interconnect_ratio for g in gpus if g.interconnect_ratio is not None]
        out: dict[str, Any] = {
            "node_id": node_id, "known": True, "straggler": straggler, "state": row["state"], "cause": row["cause"],
            "connected": row["connected"], "gpu_count": len(gpus),
            "busy_ratio": _mean(busy), "starvation_ratio": _mean(data), "interconnect_ratio": _mean(sync),
            "waiting_on": list(v.waiting_on) if v is not None else [],
            "gpus": [g for g in row["gpus"] if mine is None or g["index"] in mine],
        }  # fmt: skip
        if straggler is not False and v is not None:
            out["sentence"] = verdict_sentence(v.to_plain())
            evidence = detector.evidence.values if detector is not None else {}
            words = {c: evidence_words(c, evidence) if evidence else "" for c in _HIGHWAYS}
            if straggler:
                out["highway"] = words.get(cause or "", "")
            else:
                out["highways"] = words
        return out

    def _fresh_nodes(self, now: float) -> set[str]:
        """The nodes that report now: this process's own, and every job member its job stage heard
        from (a job judged here may have all its nodes on other workers)."""
        ingest = self.server.ingest
        fresh_after = now - ingest.detector_config.window_seconds
        own = {n.row.node_id for n in list(ingest.nodes.values()) if n.row.last_seen >= fresh_after}
        return own | ingest.jobs.heard_nodes()


def _job_row(verdict: JobVerdict, fresh: set[str]) -> dict[str, Any]:
    """The verdict's plain form, ``down`` as its state when no node of the job reports now."""
    plain = verdict.to_plain()
    plain["state"] = job_shown_state(verdict.state, verdict.nodes, fresh)
    plain["down"] = plain["state"] == DOWN
    return plain


def _job_gpus(node: NodeState, job: str) -> set[int] | None:
    """The GPUs the job uses on the node, as its latest report says; None when it does not say."""
    if node.latest is None:
        return None
    report = pb.NodeReport.FromString(node.latest)
    for sample in report.jobs:
        if sample.job == job and sample.gpus:
            return set(sample.gpus)
    return None


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None
