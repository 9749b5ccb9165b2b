"""The rows the fleet page's JSON is made of, shared by its fleet, node and job pages: a node's
row (``node_row``: what ``/api/fleet`` lists, what ``/api/node/NAME`` starts from, what each
node's card on a job's page starts from, ``job_pages``) and a tally of rows (``counts``).

Made from what the collector keeps in memory (the node's row, its detector's latest verdict):
the cause, the starvation and each GPU's state only while the verdict is fresh (not silent, not
stopped), GPU-hours lost today as the node's history counts them (``NodeState.lost_today_seconds``).
"""

from __future__ import annotations

from typing import Any

from nodeagent.collector.ingest.node_state import NodeState
from nodeagent.collector.ingest.shown_state import is_silent, node_shown_state
from nodeagent.collector.states.words import STOPPED
from nodeagent.core.detector.verdict_words import forming_words


def node_row(node: NodeState, now: float, window_seconds: float, down_seconds: float) -> dict[str, Any]:
    row = node.row
    detector = node.detector
    verdict = detector.verdict if detector is not None else None
    state = node_shown_state(node, now, down_seconds)
    fresh = (
        verdict is not None and bool(verdict.time_unix_seconds) and not is_silent(node, now, down_seconds)
        and state != STOPPED
    )  # fmt: skip
    gpus = []
    if fresh and verdict is not None:
        for g in verdict.gpus:
            busy = None if g.idle_ratio is None else round(1.0 - g.idle_ratio, 3)
            gpus.append({"index": g.index, "state": g.state, "cause": g.cause, "busy_ratio": busy})
            if g.instances:  # a MIG-split GPU: its instances under it
                gpus[-1]["instances"] = [
                    {"gpu_instance_id": i.gpu_instance_id, "mig_profile": i.mig_profile, "state": i.state}
                    for i in g.instances
                ]
    seen = detector.seen_seconds if detector is not None else 0.0
    return {
        "node_id": row.node_id,
        "connected": node.stream is not None,
        "last_seen": row.last_seen,
        "state": state,
        "cause": verdict.cause if fresh and verdict is not None else None,
        "starvation_ratio": verdict.starvation_ratio if fresh and verdict is not None else None,
        "gpu_hours_lost_today": round(node.lost_today_seconds(now) / 3600, 3),
        "gpu_count": row.gpu_count,
        "gpus": gpus,
        # While the detector's window fills, a starved node still reads busy: say so.
        "forming": forming_words(seen, window_seconds) if fresh and row.gpu_count else "",
        # While waiting: the node(s) of its multi-node job it waits on.
        "waiting_on": list(verdict.waiting_on) if fresh and verdict is not None else [],
        "waiting_job": (verdict.waiting_job or None) if fresh and verdict is not None else None,
    }


def counts(values: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for v in values:
        out[v] = out.get(v, 0) + 1
    return out
