"""What the views read of one collector process: a narrow, read-only view of its parts.

The pages and ``/metrics`` are given this, not the process that assembles them
(``collector/service/server.py``): the views know what they read and nothing of how the process is
wired, and the composition root imports the views, never the other way round.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from nodeagent.collector.alerts.alerting import Alerting
    from nodeagent.collector.ingest.intake import Ingest
    from nodeagent.collector.ledger.prices import Prices
    from nodeagent.collector.payoff.targets import PayoffConfig
    from nodeagent.collector.remote_write.process import RemoteWriteProcess
    from nodeagent.collector.store.database import StoreWriter
    from nodeagent.collector.views.metrics_config import MetricsConfig
    from nodeagent.v1 import nodeagent_pb2 as pb


class JobMessageCounts(Protocol):
    """What ``/metrics`` reads of the job roll-up's messenger: its messages by outcome."""

    @property
    def sent_total(self) -> int: ...

    @property
    def dropped_total(self) -> int: ...

    @property
    def received_total(self) -> int: ...

    @property
    def bad_total(self) -> int: ...


class FleetState(Protocol):
    """One collector process's state, as its pages and ``/metrics`` read it."""

    @property
    def ingest(self) -> Ingest: ...

    @property
    def writer(self) -> StoreWriter: ...

    @property
    def alerting(self) -> Alerting: ...

    @property
    def remote_write(self) -> RemoteWriteProcess | None: ...

    @property
    def job_messenger(self) -> JobMessageCounts | None:
        """The job roll-up's messenger (``jobrelay/messenger.py``), for its counters."""

    @property
    def worker_index(self) -> int | None:
        """This worker's index behind a front; None for a collector of its own."""

    def ask_ledger(self, request: pb.LedgerRequest) -> pb.LedgerResponse:
        """``Query.Ledger``'s answer from this process's own store (on an HTTP thread)."""

    @property
    def metrics_config(self) -> MetricsConfig:
        """``[metrics]``: which fleet families ``/metrics`` carries."""

    @property
    def worth_config(self) -> tuple[Prices, PayoffConfig]:
        """``[prices]`` and ``[payoff]``: how ``nodeagent_fix_worth_*`` prices a fix and where it aims."""

    @property
    def rejected(self) -> Mapping[tuple[str, str], int]:
        """Agent streams refused, by (gRPC status name, reason)."""

    @property
    def replaced_total(self) -> int: ...

    @property
    def serving(self) -> bool: ...

    @property
    def flusher(self) -> asyncio.Task[None] | None: ...

    @property
    def started_monotonic(self) -> float: ...
