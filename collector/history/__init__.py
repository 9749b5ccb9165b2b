"""The per-minute history of each node (docs/history.md): ``minutes`` (a minute row, its columns,
how they merge into steps), ``node_history`` (each node's open minute as reports arrive, what a
flush takes of it, the seed after a restart), ``open_minute`` (one GPU's or the node's minute
being built), ``gpu_sums`` (one report's GPUs added: the per-report loop), ``split`` (the ledger's
split: each held second computing or lost by category), ``forming`` (held seconds a later verdict
may still judge), ``owners`` (whom each job is billed to), ``counters`` (the split by job since the
start, for `nodeagent_gpu_seconds_total`), ``node_rates`` (the node row's rates between two
reports), ``config`` (how much is kept, how often it is written: `HistoryConfig`) and
``batch`` (what one flush writes). The tables are the store's
(``collector/store/history_tables.py``)."""
