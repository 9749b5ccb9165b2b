"""Push series to a Prometheus remote-write receiver (Remote Write 1.0: protobuf, snappy).

Runs in the remote-write process (``child.py``), one ``RemoteWriter`` per receiver: the build
thread there turns each report into series once and hands the same bytes to every receiver's
queue (``enqueue``); this thread posts batches. The queue is bounded in samples and drops its
oldest when full, counting every sample dropped; a batch stays in the queue until the receiver
took it, so stopping the receiver for a while loses nothing inside the bound.
Retries: connection errors, timeouts, 5xx and 429, with exponential backoff and full jitter;
any other 4xx is the receiver refusing the content: those samples are dropped and counted, and
the receiver's reason is logged at most once a minute.

A receiver refuses a whole request for one bad sample: Prometheus answers 400 "duplicate sample for
timestamp" when a sample repeats a series' newest timestamp with another value, which is what a
report sent again through another collector does (its verdict series are that collector's). So a
batch of several reports refused with 400 or 413 is split in halves and each half posted again,
down to the report the receiver refuses on its own: only that report's samples are dropped, not
the other nodes' in the same batch. Other refusals (401, 403, 404: the receiver, not the content)
are not split.

Each report is serialized once, when it is turned into series (``NodeSeries.encode``); a
batch is those bytes joined. Protobuf defines the concatenation of two serialized messages as the
serialization of their merge, and a ``WriteRequest``'s only field is its repeated ``timeseries``:
the joined reports are exactly the ``WriteRequest`` of all their series, byte for byte, without
parsing them back or encoding them again.

Snappy is cramjam's (a maintained Rust binding that python-snappy itself now builds on), in the
raw block format the spec asks for.
"""

from __future__ import annotations

import base64
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace

import cramjam
import structlog

from nodeagent.collector.outbound.post import post
from nodeagent.collector.remote_write.config import RemoteWriteConfig
from nodeagent.collector.remote_write.series import EncodedReport
from nodeagent.core.transport.backoff import Backoff

log = structlog.get_logger("nodeagent.collector")

REFUSAL_LOG_SECONDS = 60.0
# Refusals that may be one report's doing (a bad or duplicate sample, a request too large): a batch
# of several is split to find it. Any other 4xx refuses every request alike.
SPLIT_STATUSES = frozenset({400, 413})


@dataclass(slots=True)
class RemoteWriteStats:
    samples_sent_total: int = 0
    samples_dropped_queue_full_total: int = 0
    samples_refused_total: int = 0
    requests_total: int = 0
    request_failures_total: int = 0
    queued_samples: int = 0
    # Of the queued, those in the request posted now, whose answer has not come: a process that
    # dies meanwhile cannot know whether the receiver took them.
    in_flight_samples: int = 0
    # CPU of the sender's thread: joining, compressing, posting (building is the build thread's).
    cpu_seconds_total: float = 0.0


class _Item:
    __slots__ = ("body", "id", "samples")

    def __init__(self, ident: int, report: EncodedReport) -> None:
        self.id = ident
        self.body = report.body
        self.samples = report.samples


class RemoteWriter:
    """One receiver: its queue, its thread, its counters.

    ``publish`` is given the counters after every change, under the queue's lock, in the order
    they change: the remote-write process writes them to the collector's shared page there, so
    that a process killed at any moment leaves counts that are exact up to that moment (a sample
    counted sent the moment its receiver acknowledged it, and the queue as it was)."""

    def __init__(
        self,
        config: RemoteWriteConfig,
        stats: RemoteWriteStats | None = None,
        publish: Callable[[RemoteWriteStats], None] | None = None,
    ) -> None:
        self.config = config
        # Counters go on from ``stats`` (a restarted process's predecessor's); the queue is empty.
        self.stats = replace(stats, queued_samples=0, in_flight_samples=0) if stats is not None else RemoteWriteStats()
        self._publish = publish if publish is not None else _unpublished
        self._cpu_base = self.stats.cpu_seconds_total
        self._queue: deque[_Item] = deque()
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._next_id = 0
        self._thread_cpu = 0.0
        self._in_flight_items = 0  # the queue's first items, in the request posted now
        self._last_refusal_log = -REFUSAL_LOG_SECONDS
        self._headers = self._request_headers()
        self._ssl = self._ssl_context()
        self._thread = threading.Thread(target=self._run, name="nodeagent-remote-write", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(timeout)

    def drain(self, timeout: float) -> bool:
        """Wait until the queue is empty (True) or ``timeout`` has passed."""
        deadline = time.monotonic() + timeout
        while self.stats.queued_samples and time.monotonic() < deadline:
            time.sleep(0.02)
        return not self.stats.queued_samples

    def publish(self) -> None:
        """The counters given to ``publish`` now (the CPU's, which changes all the time)."""
        with self._lock:
            self.stats.cpu_seconds_total = self._cpu_base + self._thread_cpu
            self._publish(self.stats)

    def enqueue(self, report: EncodedReport) -> None:
        """One report's (or job snapshot's) series, from the build thread; the oldest go when full."""
        self._enqueue(report)
        self._wake.set()

    # ---- the thread ----

    def _run(self) -> None:
        # Full jitter: many collectors behind one receiver do not come back in step.
        backoff = Backoff(self.config.backoff_seconds, self.config.max_backoff_seconds)
        while not self._stop.is_set():
            self._thread_cpu = time.thread_time()
            batch = self._head()
            if not batch:
                self._wake.wait(1.0)
                self._wake.clear()
                continue
            delivered = self._deliver(batch)
            with self._lock:
                self._in_flight_items = 0
            if not delivered:
                # The queue, bounded in samples, is where an outage is held meanwhile.
                if self._stop.wait(backoff.next()):
                    return
                continue
            backoff.reset()

    def _deliver(self, batch: list[_Item]) -> bool:
        """Post the batch and take it off the queue, sent or refused; a refused batch of several
        reports in halves (``SPLIT_STATUSES``). False: an answer worth another attempt came, and
        what was not taken off yet stays at the queue's head for it."""
        outcome = self._post(batch)
        if outcome == "retry":
            return False
        if outcome == "split" and len(batch) > 1:
            middle = len(batch) // 2
            return self._deliver(batch[:middle]) and self._deliver(batch[middle:])
        if outcome != "sent":  # a sent batch was taken off the moment it was acknowledged
            self._release(batch, sent=False)
        return True

    def _enqueue(self, report: EncodedReport) -> None:
        with self._lock:
            self._next_id += 1
            item = _Item(self._next_id, report)
            self._queue.append(item)
            self.stats.queued_samples += item.samples
            # The oldest go, but not those posted now (the queue's head): the receiver may be
            # taking them, and they would be counted both dropped and sent.
            queue, posted = self._queue, self._in_flight_items
            while self.stats.queued_samples > self.config.queue_samples and len(queue) > posted:
                dropped = queue[posted]
                del queue[posted]
                self.stats.queued_samples -= dropped.samples
                self.stats.samples_dropped_queue_full_total += dropped.samples
            self._publish(self.stats)

    def _head(self) -> list[_Item]:
        with self._lock:
            batch: list[_Item] = []
            samples = 0
            for item in self._queue:
                if batch and samples + item.samples > self.config.batch_samples:
                    break
                batch.append(item)
                samples += item.samples
            # Kept from the overflow until answered (and its halves, where it is split).
            self._in_flight_items = len(batch)
            return batch

    def _release(self, batch: list[_Item], *, sent: bool) -> None:
        """Take the batch's items off the queue (at its head: the overflow leaves the items of a
        request posted alone, and a refused batch's were never posted or have been answered)."""
        last = batch[-1].id
        with self._lock:
            while self._queue and self._queue[0].id <= last:
                item = self._queue.popleft()
                self._in_flight_items = max(0, self._in_flight_items - 1)
                self.stats.queued_samples -= item.samples
                if sent:
                    self.stats.samples_sent_total += item.samples
                else:
                    self.stats.samples_refused_total += item.samples
            self.stats.in_flight_samples = 0
            self._publish(self.stats)

    def _post(self, batch: list[_Item]) -> str:
        """ "sent", "retry", "split" (refused, perhaps for one of its reports: ``SPLIT_STATUSES``)
        or "refused" (any other 4xx than 429: never retried)."""
        body = bytes(cramjam.snappy.compress_raw(b"".join(item.body for item in batch)))
        with self._lock:
            self.stats.requests_total += 1
            self.stats.in_flight_samples = sum(item.samples for item in batch)
            self._publish(self.stats)
        answer = post(
            self.config.url, body, self._headers, timeout_seconds=self.config.timeout_seconds, context=self._ssl
        )
        if answer.accepted:
            self._release(batch, sent=True)  # counted the moment the receiver acknowledged them
            return "sent"
        with self._lock:
            self.stats.in_flight_samples = 0
            self.stats.request_failures_total += 1
            self._publish(self.stats)
        self._log_failure(answer.detail, retrying=answer.retry)
        if answer.retry:
            return "retry"
        return "split" if answer.status in SPLIT_STATUSES else "refused"

    def _log_failure(self, detail: str, *, retrying: bool) -> None:
        now = time.monotonic()
        if now - self._last_refusal_log < REFUSAL_LOG_SECONDS:
            return
        self._last_refusal_log = now
        if retrying:
            log.warning("remote write failed; retrying", url=self.config.url, error=detail)
        else:
            log.error("remote write refused by the receiver; samples dropped", url=self.config.url, error=detail)

    def _request_headers(self) -> dict[str, str]:
        """Remote Write 1.0's headers and the receiver's credentials, if any."""
        config = self.config
        headers = {
            "Content-Type": "application/x-protobuf", "Content-Encoding": "snappy",
            "X-Prometheus-Remote-Write-Version": "0.1.0",
        }  # fmt: skip
        if config.bearer_token_file is not None:
            headers["Authorization"] = f"Bearer {config.bearer_token_file.read_text().strip()}"
        elif config.basic_auth_user and config.basic_auth_password_file is not None:
            password = config.basic_auth_password_file.read_text().strip()
            token = base64.b64encode(f"{config.basic_auth_user}:{password}".encode()).decode()
            headers["Authorization"] = f"Basic {token}"
        return headers

    def _ssl_context(self) -> ssl.SSLContext | None:
        config = self.config
        if not config.url.startswith("https:"):
            return None
        context = ssl.create_default_context(cafile=str(config.tls_ca) if config.tls_ca else None)
        if config.tls_cert is not None and config.tls_key is not None:
            context.load_cert_chain(str(config.tls_cert), str(config.tls_key))
        return context


def _unpublished(_stats: RemoteWriteStats) -> None:
    """Where nobody reads the counters but the writer's owner (``stats``)."""
