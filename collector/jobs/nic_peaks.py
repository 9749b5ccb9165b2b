"""Each NIC's traffic over the window, and the peak per-second rates of the NICs that carry the
collective: the counters-only sign of a degraded fabric link (``link``).

A collective sends in bursts; averaged over a window step a slow link and a quiet one look the
same, its peak rate between two reports does not. So at each of the node's window steps every
NIC's bytes since the last step are taken (its window: ``window``), and the NICs whose step
traffic was symmetric (the smaller direction at least ``fabric_symmetry_ratio`` of the larger,
above the floor: a collective, not a download) are followed report by report until a step shows
them otherwise: one rate per report (counter deltas over the reports' interval; a counter that
went down gives none). A node with many interfaces (veths, bonds, VLANs) pays per report only
for the few that carry the collective, found by their place in the report.

Each NIC's bytes over the window against its rating are its time on the wire
(``NicWindow.busy_ratio``): the members of a synchronous job move the same bytes per step, so a
link that spends a far larger share of its rating on them is the slow one, whether its transfers
saturate it or come in short bursts well under its rating.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.v1 import nodeagent_pb2 as pb

# A delta above this is a wrapped or reset counter's, not traffic (2^50 bytes in one interval).
_MAX_DELTA = 1 << 50


class NicWindow(NamedTuple):
    """One NIC over a step or the window: peak rates (bytes per second), bytes each way, and the
    seconds they were counted over."""

    rx_peak_bytes_per_second: float
    tx_peak_bytes_per_second: float
    rx_bytes: float
    tx_bytes: float
    seconds: float

    @property
    def peak_bytes_per_second(self) -> float:
        return max(self.rx_peak_bytes_per_second, self.tx_peak_bytes_per_second)

    def busy_ratio(self, speed_bytes_per_second: float) -> float | None:
        """The share of the time the link was busy at its rating carrying these bytes (the busier
        direction: each has the rating), its time on the wire; None without a rating or a span."""
        if speed_bytes_per_second <= 0 or self.seconds <= 0:
            return None
        return max(self.rx_bytes, self.tx_bytes) / (speed_bytes_per_second * self.seconds)

    def symmetry(self) -> float:
        """The smaller direction's bytes over the larger's (1: a collective's, 0: a download's)."""
        high = max(self.rx_bytes, self.tx_bytes)
        return min(self.rx_bytes, self.tx_bytes) / high if high > 0 else 0.0


class NicPeaks:
    __slots__ = ("_config", "_followed", "_ring", "_stepped", "speeds")

    def __init__(self, window_steps: int, config: JobRollupConfig) -> None:
        self._config = config
        # Link speeds from the node's topology (NodeInfo), where a report's NicSample has none.
        self.speeds: dict[str, float] = {}
        # name -> (time, rx total, tx total) at the node's last window step.
        self._stepped: dict[str, tuple[float, int, int]] = {}
        # The NICs followed report by report: name -> [its place in the report, time, rx total,
        # tx total (the last report's), rx peak, tx peak (this step's)], updated in place.
        self._followed: dict[str, list[float]] = {}
        self._ring: deque[dict[str, NicWindow]] = deque(maxlen=window_steps)

    def observe(self, report: pb.NodeReport) -> None:
        """Every report of the node: the followed NICs' rates."""
        if report.HasField("info"):
            self.speeds = {
                n.name: n.speed_bytes_per_second for n in report.info.nics if n.HasField("speed_bytes_per_second")
            }
        if not self._followed:
            return
        t = report.time_unix_seconds
        nics = report.nics
        for name, s in self._followed.items():
            place = int(s[0])
            nic = nics[place] if place < len(nics) else None
            if nic is None or nic.name != name:
                place = next((i for i, n in enumerate(nics) if n.name == name), -1)
                if place < 0:
                    continue
                s[0], nic = place, nics[place]
            rx, tx = nic.rx_bytes_total, nic.tx_bytes_total
            dt, d_rx, d_tx = t - s[1], rx - s[2], tx - s[3]
            s[1], s[2], s[3] = t, rx, tx
            if dt <= 0 or not (0 <= d_rx < _MAX_DELTA and 0 <= d_tx < _MAX_DELTA):
                continue
            if d_rx > s[4] * dt:
                s[4] = d_rx / dt
            if d_tx > s[5] * dt:
                s[5] = d_tx / dt

    def step(self, report: pb.NodeReport) -> None:
        """The node's window step (after ``observe`` of the same report): every NIC's step joins
        the window, and the NICs to follow until the next step are chosen."""
        t = report.time_unix_seconds
        config = self._config
        closed: dict[str, NicWindow] = {}
        followed: dict[str, list[float]] = {}
        for place, nic in enumerate(report.nics):
            name = nic.name
            if name == "lo":
                continue
            rx, tx = nic.rx_bytes_total, nic.tx_bytes_total
            before = self._stepped.get(name)
            self._stepped[name] = (t, rx, tx)
            if before is None or t <= before[0]:
                continue
            dt, d_rx, d_tx = t - before[0], rx - before[1], tx - before[2]
            if not (0 <= d_rx < _MAX_DELTA and 0 <= d_tx < _MAX_DELTA):
                continue
            # The step's mean rate is a peak too: the least a NIC not followed can claim.
            rx_peak, tx_peak = d_rx / dt, d_tx / dt
            was = self._followed.get(name)
            if was is not None:
                rx_peak, tx_peak = max(rx_peak, was[4]), max(tx_peak, was[5])
            step = closed[name] = NicWindow(rx_peak, tx_peak, d_rx, d_tx, dt)
            if step.peak_bytes_per_second >= config.link_peak_floor_bytes_per_second and (
                step.symmetry() >= config.fabric_symmetry_ratio
            ):
                followed[name] = [place, t, rx, tx, 0.0, 0.0]
        self._followed = followed
        self._ring.append(closed)

    def window(self) -> dict[str, NicWindow]:
        out: dict[str, NicWindow] = {}
        for step in self._ring:
            for name, closed in step.items():
                acc = out.get(name)
                out[name] = closed if acc is None else NicWindow(
                    max(acc[0], closed[0]), max(acc[1], closed[1]), acc[2] + closed[2], acc[3] + closed[3],
                    acc[4] + closed[4],
                )  # fmt: skip
        return out
