"""nodeagent: node health and telemetry for rented GPU servers (docs/architecture.md)."""

__version__ = "0.1.0"
