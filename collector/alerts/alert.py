"""The collector's one alert shape, ``Alert``, and its conversions at the edges that speak another.

Inside, an alert is an ``Alert`` wherever it is: the alert book's, the sinks', the fleet page's. It
says which alert it is (``identity``: copies of one alert on several shards share it), which of
two copies wins a merge (``rank``) and where it is listed (``order``), so that one collector and a
merged fleet rank and order alike. The outside forms are converted where they are spoken:

- the page's JSON and the alert outbox: ``Alert.to_plain`` and ``plain_alert``;
- the Query service's ``AlertRecord`` (protobuf): read by ``record_alert`` (the fleet's merge and
  the ``alerts`` command), written by the service (``query/service.py``);
- Alertmanager's JSON: ``sinks/alertmanager.py``; the ``alerts`` command's rows: ``views/fleet_table.py``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from nodeagent.v1 import nodeagent_pb2 as pb


@dataclass(frozen=True, slots=True)
class Alert:
    name: str
    node_id: str
    key: str
    severity: str
    # The full label set: the rule's labels plus alertname, node, severity and (when key is set) subject.
    labels: Mapping[str, str]
    annotations: Mapping[str, str]
    starts_at: float
    # None while firing.
    ends_at: float | None
    # Stable over the alert's identity (name, node, key): the same across restarts and re-fires.
    fingerprint: str

    @property
    def firing(self) -> bool:
        return self.ends_at is None

    @property
    def state(self) -> str:
        return "firing" if self.ends_at is None else "resolved"

    @property
    def identity(self) -> tuple[str, str, str]:
        """Copies of one alert on several shards share it."""
        return (self.name, self.node_id, self.key)

    @property
    def rank(self) -> tuple[bool, float, float]:
        """Of two copies, the greater wins: firing over resolved, then the newest start, then the
        latest end (a tie goes to the shard first by name: ``fleet/winning_copy.py``)."""
        return (self.ends_at is None, self.starts_at, self.ends_at or 0.0)

    @property
    def order(self) -> tuple[bool, float, str, str, str]:
        """Where it is listed (the page, StreamAlerts merged, the ``alerts`` command): firing first,
        then the newest; ties by name, node and key."""
        return (self.ends_at is not None, -self.starts_at, self.name, self.node_id, self.key)

    def to_plain(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "node_id": self.node_id,
            "key": self.key,
            "state": self.state,
            "severity": self.severity,
            "labels": dict(self.labels),
            "annotations": dict(self.annotations),
            "starts_at_unix_seconds": self.starts_at,
            "ends_at_unix_seconds": self.ends_at,
            "fingerprint": self.fingerprint,
        }


def fingerprint(name: str, node_id: str, key: str) -> str:
    return hashlib.sha256(f"{name}\0{node_id}\0{key}".encode()).hexdigest()[:16]


def plain_alert(plain: Mapping[str, Any]) -> Alert:
    """The alert ``Alert.to_plain`` wrote (the page's JSON, a merged page's with its ``shard``, the
    outbox). Its name, node, key and start are needed; the rest reads as an alert without them
    would (no severity, labels or annotations; the fingerprint of its identity)."""
    name, node_id, key = plain["name"], plain["node_id"], plain["key"]
    ends = plain.get("ends_at_unix_seconds")
    return Alert(
        name=name,
        node_id=node_id,
        key=key,
        severity=plain.get("severity", ""),
        labels=dict(plain.get("labels", {})),
        annotations=dict(plain.get("annotations", {})),
        starts_at=float(plain["starts_at_unix_seconds"]),
        ends_at=None if ends is None else float(ends),
        fingerprint=plain.get("fingerprint") or fingerprint(name, node_id, key),
    )


def record_alert(record: pb.AlertRecord) -> Alert:
    """The alert a Query answer's ``AlertRecord`` carries (the record has no fingerprint: it is
    its identity's, as the book made it)."""
    ends = record.ends_at_unix_seconds if record.HasField("ends_at_unix_seconds") else None
    return Alert(
        name=record.name,
        node_id=record.node_id,
        key=record.key,
        severity=record.severity,
        labels=dict(record.labels),
        annotations=dict(record.annotations),
        starts_at=record.starts_at_unix_seconds,
        ends_at=ends,
        fingerprint=fingerprint(record.name, record.node_id, record.key),
    )


def alert_order(record: pb.AlertRecord) -> tuple[bool, float, str, str, str]:
    """StreamAlerts' order (merged, and the ``alerts`` command's): its alert's."""
    return record_alert(record).order
