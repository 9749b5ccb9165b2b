"""The collector: receives agents' reports, judges data-starved GPUs and slowed jobs, names the
cause, raises alerts and bills lost GPU-hours.

Rooms: ``cli``, ``service`` (one process assembled), ``ingest``, ``store`` (SQLite), ``history``,
``query``, ``alerts``, ``outbound``, ``remote_write``, ``views``, ``workers`` (a front and one
worker per core), ``jobs`` (the job roll-up), ``jobrelay`` (its messages between processes),
``fleet`` (many collectors as one), ``ledger``, ``payoff``, ``states`` (the state words of
nodes and jobs, said alike by every view: a node's is the detector's verdict, or `down`,
`no-gpu`, `new`, `moved`, `stopped`). Loose modules: ``replay.py`` (the detector, the rules and
the job roll-up over recorded traces, through the same report stages as ingest),
``config.py`` (the sections of ``collector.toml``) and ``tenants.py`` (`[tenants]`: node
credentials, a stream's tenant, job names scoped by it)."""

from nodeagent.core.program import log as _log  # noqa: F401  (first: structlog without rich, core/program/lean_imports.py)
