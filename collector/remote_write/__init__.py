"""Prometheus remote write: every node's series and the detector's, pushed to a time-series engine
from a process of its own (``process.py`` hands reports over, ``child.py`` builds and posts)."""
