"""Prometheus families built from a report, shared by the agent's /metrics and the collector's remote write."""
