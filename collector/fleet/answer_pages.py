"""Query answers cut into pages of bounded bytes: what a streaming method sends, one page at a time.

``StreamNodes``, ``StreamAlerts``, ``StreamJobs``, ``StreamJobTotals`` (and the front's
``StreamHistory``) send their items in pages of their response type (``ListNodesResponse``, ...),
each at most ``page_bytes(limit)`` bytes, so that no answer is bounded by one message. The
``AnswerKind`` of a method says which repeated field holds its items and the key they come in:
a page-by-page merge of several shards (``stream_merge.py``) needs every shard's items in the
same order.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message

from nodeagent.v1 import nodeagent_pb2 as pb

# A page: at most this many bytes (StreamHistory's own page), less where the message limit is lower.
PAGE_BYTES = 256 * 1024
# A repeated field's tag and length prefix, at most, on top of the item's own bytes; and room
# for the page's ``fleet`` and framing.
_ITEM_FRAME_BYTES = 6
_PAGE_MARGIN_BYTES = 4096


def page_bytes(message_limit: int) -> int:
    """The page size under a message limit of ``message_limit`` bytes."""
    return max(1024, min(PAGE_BYTES, message_limit - _PAGE_MARGIN_BYTES))


@dataclass(frozen=True)
class AnswerKind:
    """One streaming method: its page type, the field of its items and their key."""

    method: str
    page: type[Message]
    field: str
    key: Callable[[Any], Any]


def _history_key(row: pb.HistoryRow) -> tuple[int, float]:
    # As a collector streams a node's rows: by GPU (the node's -1 first), then by minute.
    return (row.gpu, row.time_unix_seconds)


KINDS: dict[str, AnswerKind] = {
    kind.method: kind
    for kind in (
        AnswerKind("StreamNodes", pb.ListNodesResponse, "nodes", lambda n: n.node_id),
        AnswerKind("StreamAlerts", pb.ListAlertsResponse, "alerts", lambda a: (a.name, a.node_id, a.key)),
        AnswerKind("StreamJobs", pb.ListJobsResponse, "jobs", lambda j: j.job),
        AnswerKind("StreamJobTotals", pb.JobsResponse, "jobs", lambda j: j.job),
        AnswerKind("StreamHistory", pb.HistoryResponse, "rows", _history_key),
    )
}


class PageFiller:
    """Items added one by one; a full page handed back as soon as the next item would not fit
    (a page holds at least one item, however large)."""

    def __init__(self, kind: AnswerKind, max_bytes: int) -> None:
        self.kind = kind
        self.max_bytes = max_bytes
        self._page = kind.page()
        self._items = getattr(self._page, kind.field)
        self._size = 0

    def add(self, item: Message) -> Message | None:
        """Add ``item``; the page that was full before it, if it was."""
        grown = item.ByteSize() + _ITEM_FRAME_BYTES
        full = None
        if self._size and self._size + grown > self.max_bytes:
            full = self.take()
        self._items.append(item)
        self._size += grown
        return full

    def take(self) -> Message:
        """The page so far (possibly empty), and a new one started."""
        page = self._page
        self._page = self.kind.page()
        self._items = getattr(self._page, self.kind.field)
        self._size = 0
        return page

    @property
    def empty(self) -> bool:
        return not self._size


def pages_of(kind: AnswerKind, items: Iterable[Message], max_bytes: int) -> Iterator[Message]:
    """``items`` in their key's order, in pages of at most ``max_bytes``; one empty page when
    there is none (so that a caller always reads an answer)."""
    filler = PageFiller(kind, max_bytes)
    for item in sorted(items, key=kind.key):
        full = filler.add(item)
        if full is not None:
            yield full
    yield filler.take()
