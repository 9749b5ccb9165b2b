"""Where alert transitions go: structured log, webhook, Alertmanager, and the dispatcher that runs
them off the ingest path."""

from collector.sinks.alertmanager import AlertmanagerSink
from collector.sinks.base import DeferredSink, Sink, SinkError
from collector.sinks.config import SinkConfigError, build_sinks
from collector.sinks.dispatcher import DispatchStats, SinkDispatcher
from collector.sinks.log import LogSink
from collector.sinks.webhook import WebhookSink

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
