"""Prometheus remote write: every node's series and the detector's, pushed to a time-series engine."""
