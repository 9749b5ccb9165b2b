"""The waste ledger: every GPU-hour held, what it did (the history's split, ``history/split.py``),
and what it cost at the prices of ``[prices]``; read by ``nodeagent-collector ledger`` through
``Query.Ledger``."""
