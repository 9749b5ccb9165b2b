"""nodeagent: the per-node agent (sampling, spool, sender, diag)."""

__version__ = "0.1.0"
