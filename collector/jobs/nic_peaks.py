"""Each NIC's peak per-second receive and transmit over the window, from every report of a node
that is in a job: the counters-only sign of a degraded fabric link (``link``).

A collective sends in bursts; averaged over a window step a slow link and a quiet one look the
same, its peak rate between two reports does not. Per report: one rate per NIC (counter deltas
over the reports' interval; a counter that went down gives none); per window step: the step's
peaks and bytes join a ring of ``window_steps``.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from nodeagent.v1 import nodeagent_pb2 as pb

# A delta above this is a wrapped or reset counter's, not traffic (2^50 bytes in one interval).
_MAX_DELTA = 1 << 50


class NicWindow(NamedTuple):
    """One NIC over the window: peak rates and bytes moved each way."""

    rx_peak_bytes_per_second: float
    tx_peak_bytes_per_second: float
    rx_bytes: float
    tx_bytes: float

    @property
    def peak_bytes_per_second(self) -> float:
        return max(self.rx_peak_bytes_per_second, self.tx_peak_bytes_per_second)

    def symmetry(self) -> float:
        """The smaller direction's bytes over the larger's (1: a collective's, 0: a download's)."""
        high = max(self.rx_bytes, self.tx_bytes)
        return min(self.rx_bytes, self.tx_bytes) / high if high > 0 else 0.0


class NicPeaks:
    __slots__ = ("_nics", "_ring", "speeds")

    def __init__(self, window_steps: int) -> None:
        # Link speeds from the node's topology (NodeInfo), where a report's NicSample has none.
        self.speeds: dict[str, float] = {}
        # name -> [time, rx total, tx total (the last report's), then the open step's rx peak,
        # tx peak (bytes per second), rx bytes, tx bytes]: one list per NIC, updated in place.
        self._nics: dict[str, list[float]] = {}
        self._ring: deque[dict[str, NicWindow]] = deque(maxlen=window_steps)

    def observe(self, report: pb.NodeReport) -> None:
        if report.HasField("info"):
            self.speeds = {
                n.name: n.speed_bytes_per_second for n in report.info.nics if n.HasField("speed_bytes_per_second")
            }
        t = report.time_unix_seconds
        nics = self._nics
        for nic in report.nics:
            name = nic.name
            rx, tx = nic.rx_bytes_total, nic.tx_bytes_total
            s = nics.get(name)
            if s is None:
                if name != "lo":
                    nics[name] = [t, rx, tx, 0.0, 0.0, 0.0, 0.0]
                continue
            dt, d_rx, d_tx = t - s[0], rx - s[1], tx - s[2]
            s[0], s[1], s[2] = t, rx, tx
            if dt <= 0 or not (0 <= d_rx < _MAX_DELTA and 0 <= d_tx < _MAX_DELTA):
                continue
            if d_rx > s[3] * dt:
                s[3] = d_rx / dt
            if d_tx > s[4] * dt:
                s[4] = d_tx / dt
            s[5] += d_rx
            s[6] += d_tx

    def step(self) -> None:
        """Close the open step (at the node's window step)."""
        closed = {}
        for name, s in self._nics.items():
            closed[name] = NicWindow(s[3], s[4], s[5], s[6])
            s[3] = s[4] = s[5] = s[6] = 0.0
        self._ring.append(closed)

    def window(self) -> dict[str, NicWindow]:
        out: dict[str, NicWindow] = {}
        for step in self._ring:
            for name, closed in step.items():
                acc = out.get(name)
                out[name] = closed if acc is None else NicWindow(
                    max(acc[0], closed[0]), max(acc[1], closed[1]), acc[2] + closed[2], acc[3] + closed[3]
                )  # fmt: skip
        return out
