"""A node's history answered a page at a time, read from the store as the pages go out.

``HistoryPages`` walks the rows a ``HistoryRequest`` asks for in the order ``StreamHistory`` gives them
(by GPU, the node's -1 first, then by minute), ``READ_ROWS`` minute rows per store read, merges
them into steps as they come (``minutes.Steps``) and cuts the answer into pages of at most
``PAGE_ROWS`` rows and ``PAGE_BYTES`` bytes. Each page is its own read: no transaction stays
open while a client reads (it would hold back the WAL's checkpoints), and what is held between
pages is one read's rows and the step being merged. A minute written between two pages may show
its newer value.
"""

from __future__ import annotations

from collections import deque

from nodeagent.collector.history.minutes import MINUTE_SECONDS, MinuteRow, Steps
from nodeagent.collector.store.reader import ReadContext
from nodeagent.v1 import nodeagent_pb2 as pb

# A page of StreamHistory: this many rows, or this many bytes, whichever comes first (an 8-GPU
# node's minute, 9 rows, is about 2.7 kB; a node row with every column about 0.7 kB).
PAGE_ROWS = 1000
PAGE_BYTES = 256 * 1024
# Minute rows per store read.
READ_ROWS = 1000
# A repeated message field's tag and length prefix, at most, on top of the row's own bytes.
_ROW_FRAME_BYTES = 6


class HistoryPages:
    """The pages of one ``HistoryRequest``; ``next_page`` on a reader thread, one call at a time."""

    def __init__(self, request: pb.HistoryRequest) -> None:
        self.request = request
        self._gpus: list[int] | None = None  # what is left to read, the GPU being read first
        self._since = 0.0
        self._until: float | None = None
        self._cursor = 0.0  # where the next read of the current GPU starts
        self._steps = Steps(request.step_seconds)
        self._pending: deque[MinuteRow] = deque()

    def next_page(
        self, reads: ReadContext, max_rows: int = PAGE_ROWS, max_bytes: int = PAGE_BYTES
    ) -> pb.HistoryResponse | None:
        """The next page (at least one row, however large), or None once every row was given."""
        if self._gpus is None:
            self._start(reads)
        assert self._gpus is not None
        page = pb.HistoryResponse()
        size = 0
        while True:
            while self._pending and len(page.rows) < max_rows:
                row = self._pending[0]
                out = page.rows.add(
                    time_unix_seconds=row.minute, gpu=row.gpu, samples=row.samples, state=row.state, cause=row.cause
                )
                out.values.update(row.values)
                if row.held_seconds is not None:
                    out.values["held_seconds"] = row.held_seconds
                out.jobs.extend(row.jobs)
                grown = out.ByteSize() + _ROW_FRAME_BYTES
                if size + grown > max_bytes and len(page.rows) > 1:
                    del page.rows[-1]
                    return page
                self._pending.popleft()
                size += grown
            if len(page.rows) >= max_rows:
                return page
            if not self._gpus:
                return page if page.rows else None
            reads.check()
            self._read(reads)

    def _start(self, reads: ReadContext) -> None:
        request = self.request
        since = request.since_unix_seconds
        if request.last_seconds > 0:
            newest = reads.history.newest_minute(request.node_id)
            if newest is None:
                self._gpus = []
                return
            since = newest + MINUTE_SECONDS - request.last_seconds
        self._since = self._cursor = since
        self._until = request.until_unix_seconds or None
        if request.HasField("gpu"):
            self._gpus = [request.gpu]
        else:
            self._gpus = reads.history.gpus(request.node_id, since, self._until)

    def _read(self, reads: ReadContext) -> None:
        assert self._gpus
        gpu = self._gpus[0]
        rows = reads.history.minutes_page(self.request.node_id, gpu, self._cursor, self._until, READ_ROWS)
        for row in rows:
            done = self._steps.add(row)
            if done is not None:
                self._pending.append(done)
        if len(rows) == READ_ROWS:
            self._cursor = rows[-1].minute + 1
            return
        last = self._steps.close()
        if last is not None:
            self._pending.append(last)
        self._gpus.pop(0)
        self._cursor = self._since
