"""The per-node agent: sampling, delivery, diag, the sample and top views."""

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
