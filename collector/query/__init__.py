"""The query service (nodes, alerts, history, jobs) behind the operator role, and server reflection
behind the same role: ``service`` (the methods), ``bounds`` (how many queries run at once, per
caller and in all, their time and row bounds, and a stream's bounded write), ``history_pages``
(the history a page at a time, for ``StreamHistory``), ``jobs`` (the totals per job),
``reflection``, ``worker_port`` (a worker's agent port refuses queries)."""
