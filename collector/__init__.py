"""The collector: receives agents' reports, flags data-starved GPUs, raises alerts."""

from nodeagent.core import log as _log  # noqa: F401  (first: structlog without rich, core/lean_imports.py)
