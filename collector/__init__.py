"""The collector: receives agents' reports, flags data-starved GPUs, raises alerts."""

from nodeagent.core.program import log as _log  # noqa: F401  (first: structlog without rich, core/program/lean_imports.py)
