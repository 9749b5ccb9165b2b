"""Where alert transitions go: ``log`` (structured log), ``webhook``, ``alertmanager``, and the
``dispatcher`` that runs them off the ingest path; ``config`` reads `[sinks]`; ``base``: JSON
POSTs with bounded retries through ``collector/outbound/post.py``."""

from nodeagent.collector.alerts.sinks.alertmanager import AlertmanagerSink
from nodeagent.collector.alerts.sinks.base import DeferredSink, Sink, SinkError
from nodeagent.collector.alerts.sinks.config import SinkConfigError, build_sinks
from nodeagent.collector.alerts.sinks.dispatcher import DispatchStats, SinkDispatcher
from nodeagent.collector.alerts.sinks.log import LogSink
from nodeagent.collector.alerts.sinks.webhook import WebhookSink

__all__ = [
    "AlertmanagerSink",
    "DeferredSink",
    "DispatchStats",
    "LogSink",
    "Sink",
    "SinkConfigError",
    "SinkDispatcher",
    "SinkError",
    "WebhookSink",
    "build_sinks",
]
