"""The query service behind the operator role: ``service`` (nodes, alerts, history, jobs, forget;
reads through ``collector/store/reader.py``), ``bounds`` (queries per caller and in all, their
time and row bounds, who the caller is), ``history_pages`` (the history a page at a time),
``jobs`` (the totals per job), ``reflection`` (server reflection behind the same role),
``worker_port`` (a worker's agent port refuses queries, naming its front)."""
