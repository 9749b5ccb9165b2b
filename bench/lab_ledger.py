#!/usr/bin/env python3
"""The recorded lab cluster runs (tests/data/lab_cluster) fed to a collector with the lab's detector
settings; each job's ledger (its shares of held GPU time) beside the ranks' wait share, then each
node's beside its rank's timers. Usage: .venv/bin/python bench/lab_ledger.py"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the test's feeding of a trace to a collector, reused

from nodeagent.tools.lab_traces import cluster_traces  # noqa: E402
from tests.collector.ledger.test_lab_ledger import (  # noqa: E402
    clean_transfers,
    lab_ledger,
    ranks_wait_over_the_ledgers_span,
)

DATA = ROOT / "tests" / "data" / "lab_cluster"


def _shares(row: object) -> str:
    held = row.gpu_hours_held  # type: ignore[attr-defined]
    lost = {k: round(v / held, 3) for k, v in row.gpu_hours_lost.items() if v / held >= 0.0005}  # type: ignore[attr-defined]
    return f"computing {row.gpu_hours_computing / held:.3f} lost {sum(lost.values()):.3f} {lost}"  # type: ignore[attr-defined]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        for trace in cluster_traces(DATA):
            ledger = lab_ledger(trace.name, Path(tmp))
            jobs = {r.key: r for r in ledger["job"].rows}
            nodes = {r.key: r for r in ledger["node"].rows}
            for job in trace.jobs:
                row = jobs[job.job]
                print(f"{trace.name:10} {job.job:28} held {row.gpu_hours_held * 3600:5.0f} GPU-s {_shares(row)}")
                span = ranks_wait_over_the_ledgers_span(trace.name, job)
                clean = clean_transfers(job)
                lost = sum(row.gpu_hours_lost.values()) / row.gpu_hours_held
                print(f"{'':10} ranks' wait share {job.wait_share:.3f}; over the ledger's span {span:.3f}, less the "
                      f"clean transfers of its {job.steps_per_second:.2f} steps/s ({clean:.3f}): {span - clean:.3f};"
                      f" the ledger's lost share {lost:.3f}, off by {abs(lost - (span - clean)):.3f}")  # fmt: skip
                for rank in job.ranks:
                    node = nodes[rank["node"]]
                    print(f"{'':12}{rank['node']}: {_shares(node)}; rank waited {rank['wait_share']:.3f} "
                          f"(data {rank['data_share']:.3f}, collective {rank['collective_share']:.3f})")  # fmt: skip


if __name__ == "__main__":
    main()
