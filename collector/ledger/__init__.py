"""The waste ledger (docs/ledger.md): every GPU-hour held, what it did (the history's split,
``history/split.py``), and what it cost. ``prices`` reads `[prices]` (per GPU-hour by node-id
pattern, GPU model, default); ``read`` answers `Query.Ledger` on a reader thread: the split summed
per job, node, fleet, Slurm account or Kubernetes namespace, priced. Read by
``nodeagent-collector ledger`` and the ``/ledger`` page."""
