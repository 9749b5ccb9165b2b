"""NIC peaks: a bursty collective's peak per-second rate, not its mean; only the NICs that carry
it followed per report; counters that reset say nothing."""

from __future__ import annotations

from nodeagent.collector.jobs.config import JobRollupConfig
from nodeagent.collector.jobs.nic_peaks import NicPeaks
from nodeagent.v1 import nodeagent_pb2 as pb

MB = 1e6


def _report(t: float, nics: dict[str, tuple[int, int]]) -> pb.NodeReport:
    r = pb.NodeReport(node_id="n", time_unix_seconds=t)
    for name, (rx, tx) in nics.items():
        r.nics.add(name=name, rx_bytes_total=rx, tx_bytes_total=tx)
    return r


def test_a_bursty_collective_peaks_at_its_burst_and_a_download_is_not_followed() -> None:
    peaks = NicPeaks(6, JobRollupConfig())
    totals = {"fab0": [0, 0], "eth0": [0, 0], **{f"veth{k}": [0, 0] for k in range(30)}}
    for second in range(60):
        burst = 400 * MB if second % 4 == 0 else 0  # one second in four at 400 MB/s both ways
        totals["fab0"][0] += int(burst)
        totals["fab0"][1] += int(burst)
        totals["eth0"][0] += int(200 * MB)  # a loader's download
        totals["eth0"][1] += int(2 * MB)
        report = _report(1000.0 + second, {name: (rx, tx) for name, (rx, tx) in totals.items()})
        peaks.observe(report)
        if second % 10 == 0:
            peaks.step(report)
    window = peaks.window()
    assert window["fab0"].peak_bytes_per_second == 400 * MB  # the mean is 100 MB/s
    assert window["fab0"].symmetry() == 1.0
    assert window["eth0"].peak_bytes_per_second == 200 * MB and window["eth0"].symmetry() < 0.02
    assert window["veth3"].peak_bytes_per_second == 0.0
    assert set(peaks._followed) == {"fab0"}  # per report, only the collective's NIC is read


def test_a_counter_that_goes_down_gives_no_rate() -> None:
    peaks = NicPeaks(6, JobRollupConfig())
    for t, rx in ((0.0, 0), (10.0, int(100 * MB)), (11.0, int(200 * MB)), (12.0, 5), (20.0, int(100 * MB))):
        report = _report(t, {"fab0": (rx, rx)})
        peaks.observe(report)
        if t in (0.0, 10.0, 20.0):
            peaks.step(report)
    assert peaks.window()["fab0"].peak_bytes_per_second == 100 * MB  # not 2^64 / s, nor negative
