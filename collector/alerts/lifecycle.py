"""The lifecycle of one alert instance (name, node, key): the rule the alert book applies and replay
shows, in one place.

A firing signal starts an instance (``firing``) or, when its severity or labels differ from the
instance's, changes it (``updated``); a signal that does not fire ends a firing instance
(``resolved``); anything else is no transition (a change of annotations alone is evidence moving,
kept current without one).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, Protocol

from nodeagent.core.detector.alert_signals import AlertSignal

FIRING: Final = "firing"
UPDATED: Final = "updated"
RESOLVED: Final = "resolved"


class Shown(Protocol):
    """What an instance looks like to its receivers: the part a transition is about."""

    @property
    def severity(self) -> str: ...

    @property
    def labels(self) -> Mapping[str, str]: ...


def alert_labels(signal: AlertSignal) -> dict[str, str]:
    """The labels receivers see: the rule's, plus the alert's name, node, severity and subject.

    An alert about no one node (``node_id`` empty: a job's ``JobStraggler`` keyed by its job, the
    collector's ``HistoryUnavailable``) keeps a ``node`` its rule names (the straggler)."""
    labels = dict(signal.labels)
    labels["alertname"] = signal.name
    labels["node"] = signal.node_id or labels.get("node", "")
    labels["severity"] = signal.severity
    if signal.key:
        labels["subject"] = signal.key
    return labels


def next_transition(current: Shown | None, signal: AlertSignal) -> str | None:
    """The transition ``signal`` makes of the instance (``current``: None when it is not firing)."""
    if not signal.firing:
        return RESOLVED if current is not None else None
    if current is None:
        return FIRING
    if signal.severity != current.severity or alert_labels(signal) != current.labels:
        return UPDATED
    return None
