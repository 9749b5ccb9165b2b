"""The ``[sinks]`` table: which sinks the collector feeds, checked strictly.

    [sinks]
    log = true                                   # structured log events (default true)
    webhook_url = "https://ops.example/hooks/gpu"
    webhook_timeout_seconds = 5.0
    webhook_retries = 5
    webhook_backoff_seconds = 1.0
    alertmanager_url = "http://127.0.0.1:9093"   # base URL; /api/v2/alerts is appended
    alertmanager_resend_seconds = 60.0
    alertmanager_timeout_seconds = 5.0
    alertmanager_retries = 3
    generator_url = "http://collector.example:9400/"   # optional, sent to Alertmanager

An unknown key, a wrong type or an impossible value is a ``SinkConfigError`` naming the source
and the key, in one line.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from typing import Any, Final

from nodeagent.collector.alerts.sinks.alertmanager import AlertmanagerSink
from nodeagent.collector.alerts.sinks.base import Sink
from nodeagent.collector.alerts.sinks.log import LogSink
from nodeagent.collector.alerts.sinks.webhook import WebhookSink
from nodeagent.core.settings.tables import check_table

# key -> (type, default)
SINK_KEYS: Final[Mapping[str, tuple[type, object]]] = {
    "log": (bool, True),
    "webhook_url": (str, ""),
    "webhook_timeout_seconds": (float, 5.0),
    "webhook_retries": (int, 5),
    "webhook_backoff_seconds": (float, 1.0),
    "alertmanager_url": (str, ""),
    "alertmanager_resend_seconds": (float, 60.0),
    "alertmanager_timeout_seconds": (float, 5.0),
    "alertmanager_retries": (int, 3),
    "generator_url": (str, ""),
}


class SinkConfigError(ValueError):
    """A ``[sinks]`` value that cannot be used; the message is one line."""


def build_sinks(mapping: Mapping[str, Any], *, source: str = "<config>") -> list[Sink]:
    """The sinks a ``[sinks]`` table asks for, in delivery order: log, webhook, Alertmanager."""
    values = check_table(mapping, SINK_KEYS, source=source, table="sinks", error=SinkConfigError)
    sinks: list[Sink] = []
    if values["log"]:
        sinks.append(LogSink())
    if values["webhook_url"]:
        sinks.append(
            WebhookSink(
                _url(values["webhook_url"], source, "webhook_url"),
                timeout=_positive(values, "webhook_timeout_seconds", source),
                retries=_count(values, "webhook_retries", source),
                backoff=_positive(values, "webhook_backoff_seconds", source),
            )
        )
    if values["alertmanager_url"]:
        sinks.append(
            AlertmanagerSink(
                _url(values["alertmanager_url"], source, "alertmanager_url"),
                resend_seconds=_positive(values, "alertmanager_resend_seconds", source),
                timeout=_positive(values, "alertmanager_timeout_seconds", source),
                retries=_count(values, "alertmanager_retries", source),
                generator_url=values["generator_url"],
            )
        )
    return sinks


def _url(value: str, source: str, key: str) -> str:
    parsed = urllib.parse.urlsplit(value)
    if parsed.scheme not in ("http", "https") or not parsed.hostname:
        raise SinkConfigError(f"{source}: sinks.{key}: expected an http(s) URL with a host, got {value!r}")
    return value


def _positive(values: Mapping[str, Any], key: str, source: str) -> float:
    value = float(values[key])
    if value <= 0:
        raise SinkConfigError(f"{source}: sinks.{key}: must be positive, got {values[key]!r}")
    return value


def _count(values: Mapping[str, Any], key: str, source: str) -> int:
    value = int(values[key])
    if value < 0:
        raise SinkConfigError(f"{source}: sinks.{key}: must be 0 or more, got {values[key]!r}")
    return value
