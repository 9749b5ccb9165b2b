"""One collector process's configuration (``ServerConfig``): what ``serve`` and each worker of
``serve --workers N`` are given, and what ``service/builder.py`` builds from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nodeagent.collector.config import CollectorConfig
from nodeagent.collector.history.config import HistoryConfig
from nodeagent.collector.ingest.clock_bounds import ClockBounds
from nodeagent.collector.ingest.node_state import DEFAULT_MAX_NODES
from nodeagent.collector.ingest.retire import DEFAULT_RETIRE_AFTER_SECONDS
from nodeagent.collector.ingest.streams import DEFAULT_HELLO_TIMEOUT_SECONDS, DEFAULT_MAX_STREAMS_PER_SOURCE
from nodeagent.collector.query.bounds import QueryBounds
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.core.transport.security import ServerSecurity

DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024


@dataclass(frozen=True, slots=True)
class ServerConfig:
    listen: str = "127.0.0.1:50051"
    db_path: Path = Path("nodeagent-collector.db")
    security: ServerSecurity = field(default_factory=ServerSecurity)
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    flush_seconds: float = 0.05
    settings: CollectorConfig = field(default_factory=CollectorConfig)
    # HOST:PORT of /metrics and /healthz; None: no HTTP listener.
    http_listen: str | None = None
    hello_timeout_seconds: float = DEFAULT_HELLO_TIMEOUT_SECONDS
    max_streams_per_source: int = DEFAULT_MAX_STREAMS_PER_SOURCE
    max_nodes: int = DEFAULT_MAX_NODES
    # Seconds of silence after which a node is retired (0: never).
    retire_after_seconds: float = DEFAULT_RETIRE_AFTER_SECONDS
    # How far a report's time may be ahead of or behind the collector's clock (None: any).
    clock_bounds: ClockBounds | None = field(default_factory=ClockBounds)
    history: HistoryConfig = field(default_factory=HistoryConfig)
    remote_write: tuple[RemoteWriteConfig, ...] = ()
    query: QueryBounds = field(default_factory=QueryBounds)
    # Set for a worker of ``serve --workers N``: its index (its own families get worker="i") and
    # the unix socket its front asks it on (calls there are the front's: operator calls).
    worker_index: int | None = None
    front_socket: Path | None = None
    # A worker's siblings (every worker's unix socket, by index; the job roll-up's messages go
    # there) and its front's --listen (the collector's address in [fleet] collectors).
    worker_sockets: tuple[Path, ...] = ()
    front_listen: str | None = None
