"""The per-node agent: each tick it samples the node and either prints what it sees, streams it to a
collector or writes it to a trace.

Rooms: ``cli`` (the command line), ``service`` (the daemon), ``sampling`` (one tick),
``sources`` (the readers, one per source), ``kernel`` (the kernel's files), ``gpu`` (NVML and
what rides on it), ``delivery`` (spool and sender), ``views`` (what a person reads),
``exposition`` (its ``/metrics``), ``diag`` (the health check). ``config.py``: its own config
sections (`[link_speeds]`, `[gpu_deadlines]`, `[dcgm_exporter]`, `rescan_seconds`,
`gpu_power_sample_seconds`). It never imports the collector; what both need is in the core."""

# First, before any module imports them: asyncio without ssl, hashlib without OpenSSL, shutil
# without its archive codecs, structlog without rich (the agent's memory has a budget; see
# core/program/lean_imports.py).
from nodeagent.core.program.lean_imports import hidden

with hidden("ssl", "_hashlib", "bz2", "lzma"):
    import asyncio  # noqa: F401
    import hashlib  # noqa: F401
    import hmac  # noqa: F401
    import shutil  # noqa: F401

from nodeagent.core.program import log as _log  # noqa: F401
