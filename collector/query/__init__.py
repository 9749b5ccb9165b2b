"""The query service (nodes, alerts, history, jobs) behind the operator role, and server reflection
behind the same role: ``service`` (the methods), ``bounds`` (how many queries run at once, per
caller and in all, and their time and row bounds), ``history_pages`` (the history a page at a
time, for ``StreamHistory`` and ``History``), ``jobs`` (the totals per job), ``reflection``."""
