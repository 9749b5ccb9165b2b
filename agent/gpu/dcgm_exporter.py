"""DCGM's profiling where it runs: SM and tensor activity from a local dcgm-exporter's ``/metrics``.

``[dcgm_exporter]`` of agent.toml names the page (docs/agent.md, "DCGM's profiling"); without it
this module is not even imported (prometheus_client's parser costs the agent 2.5 MB resident).
Each tick, ``DcgmProfiling.apply`` — the one place that sets a GPU's ``computing_source`` to
``"dcgm"`` — fills the GPUs (and GPU instances) the last page answered for, then asks a thread of
its own for the next page: the tick never waits on the exporter.

A page is used only while it is:

- there: the last scrape answered 200 with a dcgm-exporter page within ``timeout_seconds``, and
  no scrape has been in flight longer than that (else **absent** or **slow**);
- collecting SM activity (``DCGM_FI_PROF_SM_ACTIVE`` is not in dcgm-exporter's default counters);
- this node's: it names at least one of this node's GPU UUIDs (a Service that routed to another
  node's exporter answers for other GPUs: **foreign**);
- fresh: DCGM refreshed it within three reporting intervals, and refreshes at least that often
  (else **stale**). The page carries no timestamps, so a refresh is seen as the page's values
  changing between two scrapes (its energy counter climbs at every refresh of a powered GPU).
  dcgm-exporter collects every 30 s unless told (``-c``/``--collect-interval``, in ms): at that
  pace a value is a 30-s mean up to 30 s old, which no per-second verdict can use.

Otherwise each GPU keeps the next source (GPM where the agent reads it, else power), and the log says
why once per cause (again at most every ``SAY_AGAIN_SECONDS``), not each tick. GPM where the agent
reads it is kept over DCGM's: it covers exactly the report's interval, DCGM's value the exporter's.
"""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final
from urllib.parse import urlsplit

import structlog

from nodeagent.agent.config import DcgmExporterConfig
from nodeagent.agent.gpu.dcgm_page import SM_ACTIVE, DcgmPage, DcgmReading, NotAnExporterPage, PageParser
from nodeagent.v1 import nodeagent_pb2 as pb

log = structlog.get_logger("nodeagent.dcgm")

SOURCE: Final = "dcgm"
FRESH_INTERVALS: Final = 3.0  # a reading older than this many reporting intervals is stale
SAY_AGAIN_SECONDS: Final = 600.0  # one cause of falling back is logged again at most this often
MAX_PAGE_BYTES: Final = 16 << 20  # an 8-GPU page with every field is well under 1 MiB


@dataclass(frozen=True, slots=True)
class _Scraped:
    at: float  # clock() when the scrape ended
    page: DcgmPage | None
    kind: str = ""  # why there is no page: "absent", "slow", "not_exporter"
    error: str = ""


class ExporterScraper:
    """Fetches the page when asked, on a thread of its own (or at once, ``scrape_once``), and keeps
    the evidence of its freshness: when its values were last seen to change, and how far apart the
    last two changes were."""

    def __init__(self, config: DcgmExporterConfig, clock: Callable[[], float] = time.monotonic) -> None:
        self.url = config.url
        self.timeout_seconds = config.timeout_seconds
        parts = urlsplit(config.url)
        self._host, self._port = parts.hostname or "", parts.port or 80
        self._path = (parts.path or "/metrics") + (f"?{parts.query}" if parts.query else "")
        self._clock = clock
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None
        self._closed = False
        self.latest: _Scraped | None = None
        self.in_flight_since: float | None = None
        self.first_ok_at: float | None = None  # the start of the current run of good pages
        self.changed_at: float | None = None  # when a change of the page's values was last seen
        self.change_gap: float | None = None  # seconds between the last two changes seen
        self._fingerprint: int | None = None
        self._parser = PageParser()  # remembers each series' labels: a page's values are read at little cost

    def request(self) -> None:
        """Ask for a scrape soon (at most one waits behind the one in flight); never blocks."""
        if self._thread is None and not self._closed:
            self._thread = threading.Thread(target=self._run, name="dcgm-exporter-scrape", daemon=True)
            self._thread.start()
        self._wake.set()

    def scrape_once(self) -> None:
        started = self._clock()
        with self._lock:
            self.in_flight_since = started
        page, kind, error = None, "", ""
        try:
            page = self._parser.parse(self._fetch())
        except _ScrapeError as err:
            kind, error = err.kind, str(err)
        except NotAnExporterPage as err:
            kind, error = "not_exporter", f"{self.url} is not dcgm-exporter's page: {err}"
        except ValueError as err:  # prometheus_client's parser: the text is not the exposition format
            kind, error = "not_exporter", f"{self.url} does not parse as Prometheus text: {_one_line(err)}"
        except Exception as err:  # anything else is one failed scrape too, said once as the others
            kind, error = "error", f"reading {self.url} failed: {type(err).__name__}: {_one_line(err)}"
        ended = self._clock()
        if page is not None and ended - started > self.timeout_seconds:
            page, kind = None, "slow"
            error = f"dcgm-exporter at {self.url} took {ended - started:.2f} s, over {self.timeout_seconds:g} s"
        with self._lock:
            self.in_flight_since = None
            self.latest = _Scraped(at=ended, page=page, kind=kind, error=error)
            self._follow(page, ended)

    def freshness(self) -> tuple[_Scraped | None, float | None, float | None, float | None, float | None]:
        """The last scrape, the start of the one in flight, the start of this run of good pages, when
        the page was last seen to change and the gap between its last two changes: one consistent view."""
        with self._lock:
            return self.latest, self.in_flight_since, self.first_ok_at, self.changed_at, self.change_gap

    def close(self) -> None:
        self._closed = True
        self._wake.set()

    # -- helpers --

    def _follow(self, page: DcgmPage | None, at: float) -> None:
        if page is None:  # continuity is lost: freshness is learnt afresh
            self.first_ok_at = self.changed_at = self.change_gap = self._fingerprint = None
            return
        if self._fingerprint is None:
            self.first_ok_at = at
        elif page.fingerprint != self._fingerprint:
            if self.changed_at is not None:
                self.change_gap = at - self.changed_at
            self.changed_at = at
        self._fingerprint = page.fingerprint

    def _run(self) -> None:
        while True:
            self._wake.wait()
            self._wake.clear()
            if self._closed:
                return
            self.scrape_once()  # never raises: a failure is the scrape's result

    def _fetch(self) -> str:
        """The page's text. http.client, not urllib: no proxy from the environment, no redirects."""
        conn = http.client.HTTPConnection(self._host, self._port, timeout=self.timeout_seconds)
        try:
            conn.request("GET", self._path, headers={"Accept": "text/plain"})
            response = conn.getresponse()
            if response.status != 200:
                raise _ScrapeError("absent", f"dcgm-exporter at {self.url} answered HTTP {response.status}")
            body = response.read(MAX_PAGE_BYTES + 1)
        except TimeoutError as err:
            raise _ScrapeError("slow", f"dcgm-exporter at {self.url} did not answer within "
                               f"{self.timeout_seconds:g} s") from err  # fmt: skip
        except ConnectionRefusedError as err:
            raise _ScrapeError("absent", f"nothing listens at {self.url} (connection refused)") from err
        except (OSError, http.client.HTTPException) as err:
            raise _ScrapeError("absent", f"cannot read {self.url}: {_one_line(err)}") from err
        finally:
            conn.close()
        if len(body) > MAX_PAGE_BYTES:
            raise _ScrapeError("not_exporter", f"{self.url} is over {MAX_PAGE_BYTES >> 20} MiB")
        try:
            return body.decode("utf-8")
        except UnicodeDecodeError as err:
            raise _ScrapeError("not_exporter", f"{self.url} is not UTF-8 text") from err


class DcgmProfiling:
    """Each tick: DCGM's SM and tensor activity into the GPUs the page answers for, or the reason it
    does not, said once."""

    def __init__(
        self, config: DcgmExporterConfig, clock: Callable[[], float] = time.monotonic, background: bool = True
    ) -> None:
        self.scraper = ExporterScraper(config, clock)
        self._clock = clock
        self._background = background  # False: the caller scrapes (``scraper.scrape_once``), as tests do
        self._last_tick: float | None = None
        self._said: dict[str, float] = {}
        self._last_said = ""

    def apply(self, gpus: Sequence[pb.GpuSample]) -> int:
        """Fill this tick's samples from the last page, then ask for the next; how many GPUs or GPU
        instances took DCGM's reading."""
        now = self._clock()
        interval = None if self._last_tick is None else now - self._last_tick
        self._last_tick = now
        try:
            return self._fill(gpus, now, interval)
        finally:
            if self._background:
                self.scraper.request()

    def close(self) -> None:
        self.scraper.close()

    # -- helpers --

    def _fill(self, gpus: Sequence[pb.GpuSample], now: float, interval: float | None) -> int:
        page = self._page(gpus, now, interval)
        reason = self._fresh(page, now, interval) if page is not None and interval is not None else None
        if page is None or reason is None:
            return 0
        filled, missing = 0, []
        for g in gpus:
            if g.lost or g.unresponsive or not g.uuid:
                continue
            if g.uuid not in page.uuids:
                missing.append(g.uuid)
                continue
            filled += _take(g, page.readings.get((g.uuid, None)), reason)
            for instance in g.mig_instances:
                if instance.HasField("gpu_instance_id"):
                    filled += _take(instance, page.readings.get((g.uuid, instance.gpu_instance_id)), reason)
        url = self.scraper.url
        if missing:
            self._say(f"missing:{','.join(missing)}", "warning", "dcgm-exporter has no reading for these GPUs; "
                      "they keep the next source", now, uuids=missing, url=url)  # fmt: skip
        else:
            self._say("ok", "info", "using DCGM profiling for the computing share", now, url=url, gpus=filled)
        return filled

    def _page(self, gpus: Sequence[pb.GpuSample], now: float, interval: float | None) -> DcgmPage | None:
        """The last page, if it is there, in time, collects SM activity and is this node's; None
        otherwise (a fall-back said, or nothing to judge yet: the first tick, the first scrape out)."""
        latest, in_flight, *_ = self.scraper.freshness()
        why = self._unusable(gpus, now, latest, in_flight)
        if why is not None:
            self._fall_back(*why, now)
            return None
        return latest.page if latest is not None and interval is not None else None

    def _unusable(
        self, gpus: Sequence[pb.GpuSample], now: float, latest: _Scraped | None, in_flight: float | None
    ) -> tuple[str, str] | None:
        """Why the last page cannot be used (cause, reason); None when it can, or nothing is known yet."""
        s = self.scraper
        if in_flight is not None and now - in_flight > s.timeout_seconds:
            waited = now - in_flight
            return (
                "slow",
                f"dcgm-exporter at {s.url} has not answered for {waited:.1f} s (deadline {s.timeout_seconds:g} s)",
            )
        if latest is None:
            return None
        page = latest.page
        if page is None:
            return latest.kind, latest.error
        if not page.has_sm_active:
            return "no_sm_active", f"dcgm-exporter at {s.url} does not collect {SM_ACTIVE} (add it to its counters CSV)"
        ours = {g.uuid for g in gpus if g.uuid}
        if ours and not ours & page.uuids:
            theirs = ", ".join(sorted(page.uuids)) or "none"
            return "foreign", f"dcgm-exporter at {s.url} answers for GPUs {theirs}, none of this node's"
        return None

    def _fresh(self, page: DcgmPage, now: float, interval: float) -> str | None:
        """The reason to take the page (its age and pace), or None: stale (said), or its pace unknown yet."""
        s = self.scraper
        _, _, first_ok, changed_at, gap = s.freshness()
        bound = FRESH_INTERVALS * interval
        if changed_at is None:
            since = now - (first_ok if first_ok is not None else now)
            if since <= bound:
                return None  # no change seen yet, not for long: wait for one
            self._stale(f"has not refreshed its values in {since:.1f} s", bound, interval, now)
            return None
        age = now - changed_at
        if age > bound or (gap is not None and gap > bound):
            every = f"refreshes about every {gap:.1f} s" if gap is not None else f"last refreshed {age:.1f} s ago"
            self._stale(every, bound, interval, now)
            return None
        if gap is None:
            return None  # one change seen: its pace is not known yet
        return f"{SM_ACTIVE} from dcgm-exporter at {s.url}, {age:.1f} s old (refreshed every {gap:.1f} s)"

    def _stale(self, what: str, bound: float, interval: float, now: float) -> None:
        self._fall_back("stale", f"dcgm-exporter at {self.scraper.url} {what}; fresh is within {bound:.1f} s "
                        f"({FRESH_INTERVALS:g} reporting intervals): run it with --collect-interval "
                        f"{max(100, int(interval * 1000))} or less", now)  # fmt: skip

    def _fall_back(self, kind: str, reason: str, now: float) -> None:
        self._say(kind, "warning", "DCGM profiling not used; GPUs keep the next source (GPM, else power)", now,
                  cause=kind, reason=reason)  # fmt: skip

    def _say(self, key: str, level: str, event: str, now: float, **fields: object) -> None:
        """Log ``event`` when the cause changes, and the same cause again only after ``SAY_AGAIN_SECONDS``."""
        if key == self._last_said:
            return
        self._last_said = key
        said = self._said.get(key)
        if said is not None and now - said < SAY_AGAIN_SECONDS:
            return
        self._said[key] = now
        getattr(log, level)(event, **fields)


def _take(sample: pb.GpuSample, reading: DcgmReading | None, reason: str) -> int:
    """DCGM's reading into a sample GPM did not fill this tick; 1 when it took it."""
    if reading is None or reading.sm_active_ratio is None or sample.HasField("sm_active_ratio"):
        return 0
    sample.sm_active_ratio = reading.sm_active_ratio
    if reading.tensor_active_ratio is not None and not sample.HasField("tensor_active_ratio"):
        sample.tensor_active_ratio = reading.tensor_active_ratio
    sample.computing_source = SOURCE
    sample.computing_source_reason = reason
    return 1


class _ScrapeError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


def _one_line(err: BaseException) -> str:
    text = str(err) or type(err).__name__
    return text.splitlines()[0]
