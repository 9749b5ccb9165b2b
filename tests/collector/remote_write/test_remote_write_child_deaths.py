"""The remote-write process SIGKILLed again and again under load, against a real VictoriaMetrics:
the collector's counts stay those of the receiver. A sample is counted sent the moment the
receiver acknowledged it, lost only where it was never posted, and in doubt where the process died
while posting it (the receiver may or may not have taken it): the receiver's own count of samples
inserted lies between sent and sent plus in doubt, whatever the moments of the kills."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

from tests.collector.remote_write.test_remote_write_process import ONE_PROCESS, _child, _samples, _value
from tests.conftest import require
from tests.fakes.fleet import Collector, free_port, processes, wait_for
from tests.fakes.remote_write_node import Node
from tests.fakes.tsdb import VictoriaMetrics

KILLS = 4  # the restart delay doubles each time (0.5 s, 1, 2, 4): 6 took 30 s, 4 about 10
REPORTS_PER_STREAM = 40


@pytest.mark.alone  # a collector, its child and VictoriaMetrics under load on a shared machine
def test_counts_match_the_receivers_over_repeated_child_kills(tmp_path: Path) -> None:
    require(VictoriaMetrics.available(), "needs VictoriaMetrics (Debian package victoria-metrics)")
    receiver = VictoriaMetrics(tmp_path / "vm").start()
    collector = Collector(
        db=tmp_path / "c.db", port=free_port(), workers=ONE_PROCESS,
        args=["--remote-write-url", receiver.write_url, "--remote-write-resolution-seconds", "0"],
    )  # fmt: skip
    nodes = [Node(f"rw-kill-{i}", "fast-cloud", time.time() - 3600) for i in range(2)]
    stop = threading.Event()
    errors: list[BaseException] = []

    def load() -> None:  # reports as fast as ingest takes them, the whole time the kills go on
        try:
            while not stop.is_set():
                for node in nodes:
                    node.stream(collector.address, node.reports(REPORTS_PER_STREAM))
        except BaseException as err:
            errors.append(err)

    try:
        with processes() as started:
            started.append(collector.start())
            loader = threading.Thread(target=load, daemon=True)
            loader.start()
            for kill in range(1, KILLS + 1):
                # Killed while it posts: something has gone out since the last restart.
                def posting(before: float = _samples(collector.metrics(), "sent")) -> bool:
                    return _samples(collector.metrics(), "sent") > before

                assert wait_for(posting, 60, 0.05)
                child = _child(collector)
                child.send_signal(signal.SIGKILL)
                child.wait(10)

                def restarted(kill: int = kill) -> bool:
                    return _value(collector.metrics(), "nodeagent_remote_write_process_restarts_total") == kill

                assert wait_for(restarted, 60, 0.1), collector.metrics()[-2000:]
            stop.set()
            loader.join(120)
            assert not errors, errors

            def drained() -> bool:
                return _value(collector.metrics(), "nodeagent_remote_write_queued_samples") == 0

            assert wait_for(drained, 60, 0.1)
            text = collector.metrics()
        receiver.flush()
        received = receiver.samples_received()
    finally:
        stop.set()
        receiver.stop()
    sent, lost = _samples(text, "sent"), _samples(text, "lost_process_died")
    in_doubt = _samples(text, "in_doubt_process_died")
    offered = sum(node.series_total for node in nodes)
    print(f"offered {offered} received {received:.0f} sent {sent:.0f} in_doubt {in_doubt:.0f} lost {lost:.0f}")
    assert sent <= received <= sent + in_doubt
    assert _samples(text, "dropped_queue_full") == _samples(text, "refused") == 0
